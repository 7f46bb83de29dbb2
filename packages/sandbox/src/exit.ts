/**
 * How a tree ended, as the host can tell: the guest's exit code or signal
 * (bwrap's 128 + N read back as a signal where only a signal can explain it),
 * or a failure of the chain itself (its shell, prlimit, setpriv, bwrap, exec) before
 * the interpreter ran.
 */
import type { ResourceLimit } from '@improv/extfn-core';
import { type CpuEvidence, explainExit, signalFromBwrapStatus } from './explain.js';
import type { SandboxPolicy } from './policy.js';

/** How a sandboxed process tree ended. */
export interface SandboxExit {
  exitCode: number | null;
  signal: string | null;
  limit?: ResourceLimit;
}

/**
 * The exit as the launcher reports it: besides SandboxExit, the chain's own
 * failure, the guest's CPU time as last sampled, and what its cgroup saw.
 */
export interface TreeExit extends SandboxExit {
  setupError?: string;
  cpuUsedSeconds?: number;
  /** The tree's memory budget killed it or one of its processes: its cgroup's, or the host's look where it has none (memory-watch.ts). */
  oomKilled?: boolean;
  /** The cgroup's pids limit refused a fork. */
  pidsRefused?: boolean;
}

/** What the chain's programs print when they fail before the guest runs. */
const SETUP_MESSAGE = /^(bwrap|setpriv|prlimit|exec \/|extfn-cgroup-gate|extfn-chain):? /;

export function classifyExit(
  result: { exitCode?: number; signal?: string; failed?: boolean; message?: string },
  restricted: boolean,
  stderrHead: string,
): TreeExit {
  let exitCode = typeof result.exitCode === 'number' ? result.exitCode : null;
  let signal: string | null = result.signal ?? null;
  if (restricted && signal === null) {
    // bwrap reports a guest killed by signal N as status 128 + N: report it the
    // way an unsandboxed child's death is reported (no exit code, a signal)
    signal = signalFromBwrapStatus(exitCode);
    if (signal !== null) exitCode = null;
  }
  const out: TreeExit = { exitCode, signal };
  const spawnFailure = result.failed === true && exitCode === null && signal === null;
  // a status of 1 from bwrap, 125 from the gate, 126/127 from exec, with their message first
  const chainStatus = exitCode === 1 || (exitCode !== null && exitCode >= 125 && exitCode <= 127);
  if (spawnFailure) out.setupError = String(result.message);
  else if (chainStatus && SETUP_MESSAGE.test(stderrHead)) {
    out.setupError = stderrHead.split('\n')[0] || 'unknown';
  }
  return out;
}

/**
 * The limit that explains a failed exit; none under `trusted`, which sets no
 * limits. What the host saw (the cgroup's OOM kill, CPU time sampled from
 * /proc) comes before what the guest printed.
 */
export function limitOf(
  policy: SandboxPolicy,
  exit: TreeExit,
  stderrTail: string,
  cpu: CpuEvidence | undefined,
): ResourceLimit | undefined {
  if (policy === 'trusted') return undefined;
  if (exit.exitCode === 0 && exit.signal === null) return undefined;
  if (exit.oomKilled) return 'memory';
  const explained = explainExit(exit.exitCode, exit.signal, stderrTail, cpu);
  return explained ?? (exit.pidsRefused ? 'processes' : undefined);
}
