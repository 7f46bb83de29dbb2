/**
 * What the host reads about a running tree from /proc: a process's stat
 * fields, its direct children, its CPU time, and a sampler that watches the
 * guest's CPU time so a CPU-limit label rests on what the host saw.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * The fields of /proc/PID/stat after the command name, which may itself hold
 * spaces and parentheses; index 0 is proc(5)'s field 3 (state), 1 the ppid.
 */
export function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

/** Direct children of a process (Linux 3.5+ with CONFIG_PROC_CHILDREN; else a /proc scan). */
export function childrenOf(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
      .split(' ')
      .filter(Boolean)
      .map(Number);
  } catch {}
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (Number(statFields(name)[1]) === pid) out.push(Number(name));
    } catch {}
  }
  return out;
}

/**
 * CPU time (user + system, all threads) of a live process in seconds, from
 * /proc/PID/stat; USER_HZ is 100 on every Linux ABI Node runs on.
 */
export function cpuSecondsOf(pid: number): number | undefined {
  try {
    const fields = statFields(pid);
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? ticks / 100 : undefined;
  } catch {
    return undefined;
  }
}

/** How often the guest's CPU time is sampled once RLIMIT_CPU could bind. */
const CPU_SAMPLE_MS = 100;

/**
 * Samples the guest's CPU time, so a death by SIGXCPU/SIGKILL is called a CPU
 * limit only when the host saw the CPU spent (a guest can signal itself or exit
 * with 137). CPU time cannot outrun wall time times the cores, so the next
 * sample waits until the limit could first bind: for most calls there is none,
 * and an idle warm worker is looked at rarely; near the limit, every 100 ms.
 */
export function sampleCpu(guest: () => number | undefined, cpuSeconds: number) {
  const cores = availableParallelism();
  let used: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  const schedule = () => {
    const remainingMs = (cpuSeconds - (used ?? 0)) * 1000;
    timer = setTimeout(tick, Math.max(CPU_SAMPLE_MS, remainingMs / cores - 2 * CPU_SAMPLE_MS));
    timer.unref();
  };
  const tick = () => {
    const pid = guest();
    const seconds = pid === undefined ? undefined : cpuSecondsOf(pid);
    if (seconds !== undefined) used = seconds;
    schedule();
  };
  schedule();
  return {
    stop: () => clearTimeout(timer),
    get used() {
      return used;
    },
  };
}

/** Processes of a real uid right now (zombies included): what RLIMIT_NPROC counts for it. */
export function processesOfUid(uid: number): number {
  let count = 0;
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const status = readFileSync(`/proc/${name}/status`, 'utf8');
      const real = /^Uid:\s+(\d+)/m.exec(status)?.[1];
      if (Number(real) !== uid) continue;
      // RLIMIT_NPROC counts threads too
      count += Number(/^Threads:\s+(\d+)/m.exec(status)?.[1] ?? 1);
    } catch {}
  }
  return count;
}

/**
 * The entries of `dir` left by host processes that are gone: `pattern`'s
 * first group is the pid of the process that made each. This process's own,
 * and those of a pid that exists (or is not ours to signal), are left out.
 */
export function namesOfDeadHosts(dir: string, pattern: RegExp): string[] {
  let names: string[] = [];
  try {
    names = readdirSync(dir);
  } catch {}
  return names.filter((name) => {
    const pid = Number(pattern.exec(name)?.[1]);
    return pid > 0 && pid !== process.pid && !processExists(pid);
  });
}

/** Whether a process `pid` exists (one we may not signal included). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}
