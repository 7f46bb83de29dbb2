/**
 * A cgroup per sandboxed tree, where the host offers one: one memory budget
 * for everything the tree holds (anonymous memory of all its processes,
 * tmpfs files, SysV and POSIX shared memory, memfds, pipe buffers charged
 * to it), no swap, and a process count of its own. cgroup v2 needs a
 * subtree this process may write with the memory and pids controllers
 * available; cgroup v1 needs root. Elsewhere the per-process closures
 * (rlimits, tmpfs sizes, seccomp) hold alone.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { namesOfDeadHosts, statFields } from './proc.js';

export type CgroupVersion = 'v1' | 'v2';

export interface CgroupSupport {
  version: CgroupVersion | false;
  /** Why there is none, or where the trees go. */
  reason: string;
}

/** The directories the trees of this host process go under, one per controller hierarchy. */
interface Parents {
  version: CgroupVersion;
  memory: string;
  pids: string;
}

let support: { parents?: Parents; result: CgroupSupport } | undefined;

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** Mount points by filesystem type and (v1) controller, from /proc/self/mountinfo. */
function mounts(): Array<{ point: string; type: string; options: string[] }> {
  const out: Array<{ point: string; type: string; options: string[] }> = [];
  for (const line of (read('/proc/self/mountinfo') ?? '').split('\n')) {
    const [left, right] = line.split(' - ');
    if (!left || !right) continue;
    const [type, , superOptions] = right.split(' ');
    const point = left.split(' ')[4];
    if (type && point) out.push({ point, type, options: (superOptions ?? '').split(',') });
  }
  return out;
}

/** This process's cgroup path in each hierarchy: '' → v2, else the v1 controller list. */
function ownCgroups(): Map<string, string> {
  const map = new Map<string, string>();
  for (const line of (read('/proc/self/cgroup') ?? '').trim().split('\n')) {
    const match = /^\d+:([^:]*):(.*)$/.exec(line);
    if (match) for (const name of match[1]!.split(',')) map.set(name, match[2]!);
  }
  return map;
}

/**
 * Removes the parents left by host processes that died without cleaning up
 * (SIGKILL, a killed test worker): `improv-extfn-<pid>` with no such pid.
 */
function sweepDeadParents(hierarchy: string): void {
  for (const name of namesOfDeadHosts(hierarchy, /^improv-extfn-(\d+)$/)) {
    const parent = join(hierarchy, name);
    try {
      // a tree's cgroup, then the parent: each fails, harmlessly, while a process is inside
      for (const tree of readdirSync(parent)) {
        if (tree.startsWith('tree-')) rmdirSync(join(parent, tree));
      }
      rmdirSync(parent);
    } catch {}
  }
}

/** Removes the leaves host processes that died moved themselves into (see delegateV2). */
function sweepDeadHosts(hierarchy: string): void {
  for (const name of namesOfDeadHosts(hierarchy, /^improv-extfn-host-(\d+)$/)) {
    try {
      rmdirSync(join(hierarchy, name)); // fails, harmlessly, while a child of it lives on
    } catch {}
  }
}

function makeParent(dir: string): void {
  sweepDeadParents(dirname(dir));
  mkdirSync(dir, { recursive: true });
}

function detectV1(): Parents | string {
  if (process.getuid?.() !== 0) return 'cgroup v1 needs root';
  const own = ownCgroups();
  const found = mounts().filter((m) => m.type === 'cgroup');
  const memory = found.find((m) => m.options.includes('memory'));
  const pids = found.find((m) => m.options.includes('pids'));
  if (!memory || !pids) return 'no cgroup v1 memory and pids controllers mounted';
  const name = `improv-extfn-${process.pid}`;
  const parents: Parents = {
    version: 'v1',
    memory: join(memory.point, own.get('memory') ?? '/', name),
    pids: join(pids.point, own.get('pids') ?? '/', name),
  };
  try {
    makeParent(parents.memory);
    makeParent(parents.pids);
  } catch (error) {
    return `cannot create ${parents.memory}: ${(error as Error).message}`;
  }
  return parents;
}

function detectV2(): Parents | string {
  const mount = mounts().find((m) => m.type === 'cgroup2');
  const path = ownCgroups().get('');
  if (!mount || path === undefined) return 'no cgroup v2 hierarchy';
  const own = join(mount.point, path);
  const available = (read(join(own, 'cgroup.controllers')) ?? '').split(/\s+/);
  if (!available.includes('memory') || !available.includes('pids'))
    return `the memory and pids controllers are not delegated to ${own}`;
  const refused = delegateV2(own, ['memory', 'pids']);
  if (refused !== undefined) return refused;
  const parent = join(own, `improv-extfn-${process.pid}`);
  try {
    makeParent(parent);
    writeFileSync(join(parent, 'cgroup.subtree_control'), '+memory +pids');
  } catch (error) {
    return `cannot create ${parent}: ${(error as Error).message}`;
  }
  return { version: 'v2', memory: parent, pids: parent };
}

/**
 * Gives `controllers` of the cgroup v2 `own` (the host's cgroup) to its
 * children; undefined when done, else why not. cgroup v2 lets a cgroup other
 * than the root give controllers to its children only while it holds no
 * process itself, and the host lives in `own`. So, as systemd asks of a
 * service it delegates a cgroup to, the host and its descendants move into a
 * leaf of their own first (`improv-extfn-host-<pid>`, beside the trees'
 * parent), if they are all that `own` holds: a process of anyone else's is
 * never moved. Exported for its test, which uses a controller this kernel
 * leaves to cgroup v2.
 */
export function delegateV2(
  own: string,
  controllers: readonly string[],
  pid = process.pid,
): string | undefined {
  const enable = () => {
    try {
      writeFileSync(join(own, 'cgroup.subtree_control'), controllers.map((c) => `+${c}`).join(' '));
      return undefined;
    } catch (error) {
      return error as NodeJS.ErrnoException;
    }
  };
  let error = enable();
  // more rounds than one: a process the host starts meanwhile is born in `own`
  for (let round = 0; error?.code === 'EBUSY' && round < 3; round++) {
    const members = (read(join(own, 'cgroup.procs')) ?? '').split('\n').filter(Boolean).map(Number);
    const others = members.filter((member) => !descendsFrom(member, pid));
    if (others.length > 0) {
      return (
        `${own} holds processes other than this host and its children (${others.slice(0, 5).join(', ')}), ` +
        'and a cgroup v2 that holds processes gives no controller to its children: ' +
        'run the host in a cgroup of its own with memory and pids delegated (e.g. systemd-run --scope -p Delegate=yes)'
      );
    }
    const leaf = join(own, `improv-extfn-host-${pid}`);
    try {
      sweepDeadHosts(own);
      mkdirSync(leaf, { recursive: true });
    } catch (mkdirError) {
      return `cannot create ${leaf} to move this host into: ${(mkdirError as Error).message}`;
    }
    for (const member of members) {
      try {
        writeFileSync(join(leaf, 'cgroup.procs'), String(member));
      } catch {} // gone meanwhile
    }
    error = enable();
  }
  return error && `cannot delegate ${controllers.join(' and ')} below ${own}: ${error.message}`;
}

/** Whether `pid` is `ancestor` or one of its descendants (by the parent pids in /proc). */
function descendsFrom(pid: number, ancestor: number): boolean {
  for (let p = pid, steps = 0; p > 1 && steps < 4096; steps++) {
    if (p === ancestor) return true;
    try {
      p = Number(statFields(p)[1]);
    } catch {
      return false; // gone: not one to move
    }
  }
  return false;
}

/** Whether trees get a cgroup here, found once per host process. */
export function cgroupSupport(): CgroupSupport {
  if (support) return support.result;
  if (process.platform !== 'linux') {
    support = { result: { version: false, reason: 'not Linux' } };
    return support.result;
  }
  const v2 = detectV2();
  const chosen = typeof v2 === 'string' ? detectV1() : v2;
  if (typeof chosen === 'string') {
    const why = typeof v2 === 'string' ? `${v2}; ${chosen}` : chosen;
    support = { result: { version: false, reason: why } };
  } else {
    const where =
      chosen.memory === chosen.pids ? chosen.memory : `${chosen.memory}, ${chosen.pids}`;
    support = {
      parents: chosen,
      result: { version: chosen.version, reason: `trees under ${where}` },
    };
  }
  return support.result;
}

let counter = 0;
/**
 * This copy of the module's own part of its trees' names: a host process
 * that loads two copies (two installed versions of this package) makes two
 * counters, and their `tree-1`s would collide under the same parents.
 */
const copy = randomBytes(4).toString('hex');
/** Trees whose cgroup exists now; with none, the parents are removed too (and made again on demand). */
let live = 0;

function ensureParents(parents: Parents): void {
  for (const dir of new Set([parents.memory, parents.pids])) mkdirSync(dir, { recursive: true });
  if (parents.version === 'v2')
    writeFileSync(join(parents.memory, 'cgroup.subtree_control'), '+memory +pids');
}

function removeParentsIfIdle(): void {
  const parents = support?.parents;
  if (!parents || live > 0) return;
  for (const dir of new Set([parents.memory, parents.pids])) {
    try {
      rmdirSync(dir);
    } catch {}
  }
}

/** One tree's cgroup: memory (no swap) and pids limits, removed once the tree has ended. */
export class TreeCgroup {
  private removed = false;

  private constructor(
    readonly version: CgroupVersion,
    private readonly dirs: string[],
  ) {}

  /** A new cgroup with these limits, or undefined where the host offers none. */
  static create(memoryBytes: number, processes: number): TreeCgroup | undefined {
    cgroupSupport();
    const parents = support?.parents;
    if (!parents) return undefined;
    const name = `tree-${copy}-${++counter}`;
    const memory = join(parents.memory, name);
    const pids = join(parents.pids, name);
    const dirs = memory === pids ? [memory] : [memory, pids];
    live++;
    try {
      ensureParents(parents);
      for (const dir of dirs) mkdirSync(dir);
      if (parents.version === 'v2') {
        writeFileSync(join(memory, 'memory.max'), String(memoryBytes));
        try {
          writeFileSync(join(memory, 'memory.swap.max'), '0');
        } catch {} // no swap accounting: the kernel has no swap to give either
      } else {
        writeFileSync(join(memory, 'memory.limit_in_bytes'), String(memoryBytes));
        try {
          // memory + swap no more than memory alone: no swap
          writeFileSync(join(memory, 'memory.memsw.limit_in_bytes'), String(memoryBytes));
        } catch {}
      }
      writeFileSync(join(pids, 'pids.max'), String(processes));
    } catch (error) {
      for (const dir of dirs) {
        try {
          rmdirSync(dir);
        } catch {}
      }
      live--;
      removeParentsIfIdle();
      throw error;
    }
    return new TreeCgroup(parents.version, dirs);
  }

  /** The files a pid is written to, to move it into the cgroup (what `add` does). */
  procsFiles(): string[] {
    return this.dirs.map((dir) => join(dir, 'cgroup.procs'));
  }

  /** Moves a process (and so whatever it starts afterwards) into the cgroup. */
  add(pid: number): void {
    for (const file of this.procsFiles()) writeFileSync(file, String(pid));
  }

  /**
   * `add` off the event loop: a write to cgroup.procs waits in the kernel
   * for the cgroup lock (an RCU grace period on cgroup v1: milliseconds),
   * which the host's loop should spend on its other workers.
   */
  async addAsync(pid: number): Promise<void> {
    for (const file of this.procsFiles()) await writeFile(file, String(pid));
  }

  /** Processes still in the cgroup. */
  members(): number[] {
    return (read(join(this.dirs[0]!, 'cgroup.procs')) ?? '')
      .split('\n')
      .filter(Boolean)
      .map(Number);
  }

  /** Whether the memory limit killed a process of the tree (host-side evidence). */
  oomKilled(): boolean {
    const file = this.version === 'v2' ? 'memory.events' : 'memory.oom_control';
    const count = /oom_kill (\d+)/.exec(read(join(this.dirs[0]!, file)) ?? '')?.[1];
    return Number(count ?? 0) > 0;
  }

  /** Whether the pids limit refused a fork of the tree. */
  pidsRefused(): boolean {
    const count = /^max (\d+)/m.exec(read(join(this.dirs.at(-1)!, 'pids.events')) ?? '')?.[1];
    return Number(count ?? 0) > 0;
  }

  /** SIGKILLs every member until none is left, then removes the cgroup. */
  async remove(): Promise<void> {
    if (this.removed) return;
    this.removed = true;
    for (let attempt = 0; attempt < 100; attempt++) {
      for (const pid of this.members()) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {}
      }
      let left = 0;
      for (const dir of this.dirs) {
        try {
          rmdirSync(dir);
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOENT') left++;
        }
      }
      if (left === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    live--;
    removeParentsIfIdle();
  }
}
