/**
 * How a tree is ended, per what the host knows of it: the pid namespace's
 * init (restricted), every process of its own uid (root host), its process
 * group, an environment marker (non-root without namespaces), and its
 * cgroup where it has one. Each strategy reaches setsid() children too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { childrenOf } from './proc.js';
import { runCommand } from './run-command.js';

/** The base environment: nothing of the host's, whatever it holds. */
export const BASE_ENV = Object.freeze({ HOME: '/tmp', PATH: '/usr/bin:/bin', LANG: 'C.UTF-8' });

/** Marks every process of one tree where no uid or pid namespace can (non-root, no bwrap). */
export const RUN_TOKEN_VARIABLE = 'IMPROV_EXTFN_SANDBOX_RUN';

export function sigkill(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {}
}

/**
 * Restricted: kill bwrap's child, the pid namespace's pid 1; the kernel then
 * kills every process inside, and bwrap exits and is reaped by us. Killing
 * bwrap first would orphan that child, and a host init that reaps late or
 * never (some containers) would keep it as a zombie charged to the uid.
 * bwrap itself is killed only if no init shows up, or 250 ms later.
 */
export async function killNamespace(
  bwrapPid: number,
  exited: () => boolean,
  exitEvent: Promise<void>,
): Promise<void> {
  if (exited()) return;
  const inits = childrenOf(bwrapPid);
  for (const init of inits) sigkill(init);
  if (inits.length === 0) return sigkill(bwrapPid);
  const fallback = setTimeout(() => {
    if (!exited()) sigkill(bwrapPid);
  }, 250);
  await exitEvent.finally(() => clearTimeout(fallback));
}

/** Root host: kill(-1) sent as the tree's own uid ends every process of it, atomically. */
export async function killUid(kill: string, uid: number): Promise<void> {
  await runCommand(kill, ['-KILL', '-1'], { uid, gid: uid, env: { ...BASE_ENV }, cwd: '/' });
}

/** Every process whose environment carries `token`, killed until none is left. */
export async function killToken(token: string, firstPid: number): Promise<void> {
  const needle = `${RUN_TOKEN_VARIABLE}=${token}\0`;
  // descendants got pids after the tree's first one, unless the counter wrapped
  let lastPid = Number.POSITIVE_INFINITY;
  try {
    lastPid = Number(readFileSync('/proc/sys/kernel/ns_last_pid', 'utf8'));
  } catch {}
  const from = lastPid >= firstPid ? firstPid : 0;
  for (let pass = 0; pass < 50; pass++) {
    let found = 0;
    for (const name of readdirSync('/proc')) {
      const pid = Number(name);
      if (!(pid >= from) || pid === process.pid) continue;
      try {
        if (!readFileSync(`/proc/${name}/environ`, 'latin1').includes(needle)) continue;
        sigkill(pid);
        found++;
      } catch {}
    }
    if (found === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
