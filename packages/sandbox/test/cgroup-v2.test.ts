/**
 * cgroup v2 delegation (cgroup.ts `delegateV2`): a cgroup other than the
 * root gives controllers to its children only while it holds no process,
 * and a host always lives in its own cgroup. Tried for real on a cgroup v2
 * of the test's own under this host's v2 hierarchy, with a controller that
 * hierarchy has (this kernel binds memory and pids to v1, so hugetlb here):
 * a host process alone with its children moves into a leaf and the
 * controller is given; one beside a process of someone else's moves nothing
 * and says why.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { isRoot, linux } from './helpers.js';

/** This host's cgroup v2 mount, if any (a hybrid host has one beside its v1 hierarchies). */
function v2Mount(): string | undefined {
  if (!linux) return undefined;
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    if (right?.startsWith('cgroup2 ')) return left?.split(' ')[4];
  }
  return undefined;
}

const mount = v2Mount();
const read = (path: string) => {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return '';
  }
};
/** A controller the v2 root offers (memory first, where a host gives v2 all of them). */
const controller = mount
  ? ['memory', 'pids', 'hugetlb', 'io', 'cpu'].find((c) =>
      read(join(mount, 'cgroup.controllers')).split(' ').includes(c),
    )
  : undefined;
const why = !isRoot
  ? 'needs root to make a cgroup v2 of its own'
  : !mount
    ? 'no cgroup v2 hierarchy on this host'
    : !controller
      ? 'the cgroup v2 hierarchy here has no controller to give'
      : undefined;

const MODULE = new URL('../dist/cgroup.js', import.meta.url).pathname;

/** The v2 path of a process, from /proc/PID/cgroup ('0::/path'). */
const v2PathOf = (pid: number) => /^0::(.*)$/m.exec(read(`/proc/${pid}/cgroup`))?.[1] ?? '(none)';

describe.skipIf(why !== undefined)(`cgroup v2 delegation${why ? ` (skipped: ${why})` : ''}`, () => {
  const root = mount!;
  const name = `improv-extfn-test-${process.pid}`;
  const own = join(root, name);
  let enabledAtRoot = false;
  const sleepers: ChildProcess[] = [];

  beforeAll(() => {
    if (!read(join(root, 'cgroup.subtree_control')).split(' ').includes(controller!)) {
      writeFileSync(join(root, 'cgroup.subtree_control'), `+${controller}`);
      enabledAtRoot = true;
    }
    // the test's cgroup holds no process: it gives the controller to each case's
    mkdirSync(own);
    writeFileSync(join(own, 'cgroup.subtree_control'), `+${controller}`);
  });

  afterAll(async () => {
    for (const sleeper of sleepers) sleeper.kill('SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 200));
    removeTree(own);
    if (enabledAtRoot) writeFileSync(join(root, 'cgroup.subtree_control'), `-${controller}`);
  });

  /** Removes a test cgroup, its children first (each must be empty by then). */
  function removeTree(dir: string) {
    if (!existsSync(dir)) return;
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.isDirectory()) removeTree(join(dir, entry.name));
    }
    try {
      rmdirSync(dir);
    } catch {}
  }

  /** Starts `sleep` and puts it in `cgroup` (a process that is not the host's). */
  function foreignSleeper(cgroup: string): number {
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    sleepers.push(sleeper);
    writeFileSync(join(cgroup, 'cgroup.procs'), String(sleeper.pid));
    return sleeper.pid!;
  }

  /**
   * A host process in `cgroup` with a child of its own: moves itself there,
   * starts `sleep`, calls delegateV2 and prints what became of both.
   */
  async function host(cgroup: string) {
    const program = `
      import { writeFileSync, readFileSync } from 'node:fs';
      import { spawn } from 'node:child_process';
      const { delegateV2 } = await import(${JSON.stringify(MODULE)});
      writeFileSync(${JSON.stringify(join(cgroup, 'cgroup.procs'))}, String(process.pid));
      const child = spawn('sleep', ['60'], { stdio: 'ignore' });
      await new Promise((resolve) => child.once('spawn', resolve));
      const refused = delegateV2(${JSON.stringify(cgroup)}, [${JSON.stringify(controller)}]);
      const path = (pid) => /^0::(.*)$/m.exec(readFileSync('/proc/' + pid + '/cgroup', 'utf8'))[1];
      console.log(JSON.stringify({ refused, pid: process.pid, self: path(process.pid), child: path(child.pid) }));
      child.kill('SIGKILL');
    `;
    const node = spawn(process.execPath, ['--input-type=module', '-e', program], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    node.stdout!.on('data', (data) => {
      out += data;
    });
    const code = await new Promise((resolve) => node.once('exit', resolve));
    expect(code).toBe(0);
    return JSON.parse(out) as { refused?: string; pid: number; self: string; child: string };
  }

  test('a host alone with its children moves into a leaf and gives the controller', async () => {
    const cgroup = join(own, 'alone');
    mkdirSync(cgroup, { recursive: true });
    // the leaf of a host that died is swept on the way
    const dead = spawn('true');
    await new Promise((resolve) => dead.once('exit', resolve));
    mkdirSync(join(cgroup, `improv-extfn-host-${dead.pid}`));

    const result = await host(cgroup);
    expect(result.refused).toBeUndefined();
    expect(read(join(cgroup, 'cgroup.subtree_control')).split(' ')).toContain(controller);
    const leaf = `/${name}/alone/improv-extfn-host-${result.pid}`;
    expect(result.self).toBe(leaf);
    expect(result.child).toBe(leaf);
    expect(existsSync(join(cgroup, `improv-extfn-host-${dead.pid}`))).toBe(false);
    // what the trees need of it: a child cgroup with the controller's files
    mkdirSync(join(cgroup, 'tree'));
    expect(readdirSync(join(cgroup, 'tree')).some((f) => f.startsWith(`${controller}.`))).toBe(
      true,
    );
  });

  test('a host beside a process of someone else moves nothing and says why', async () => {
    const cgroup = join(own, 'shared');
    mkdirSync(cgroup, { recursive: true });
    const other = foreignSleeper(cgroup);

    const result = await host(cgroup);
    expect(result.refused).toMatch(
      new RegExp(
        `holds processes other than this host and its children \\(${other}\\).*Delegate=yes`,
      ),
    );
    expect(read(join(cgroup, 'cgroup.subtree_control'))).toBe('');
    expect(result.self).toBe(`/${name}/shared`);
    expect(v2PathOf(other)).toBe(`/${name}/shared`);
    expect(readdirSync(cgroup).some((f) => f.startsWith('improv-extfn-host-'))).toBe(false);
  });

  test('without the EBUSY case nothing moves: a cgroup with no process gives the controller at once', async () => {
    const cgroup = join(own, 'empty');
    mkdirSync(cgroup, { recursive: true });
    const { delegateV2 } = await import(MODULE);
    expect(delegateV2(cgroup, [controller!])).toBeUndefined();
    expect(read(join(cgroup, 'cgroup.subtree_control')).split(' ')).toContain(controller);
    expect(readdirSync(cgroup).some((f) => f.startsWith('improv-extfn-host-'))).toBe(false);
  });
});
