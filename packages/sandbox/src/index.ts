/**
 * @improv/extfn-sandbox: the one way runners start an interpreter —
 * bubblewrap, seccomp, a uid of its own, rlimits, a cgroup per tree where
 * the host offers one, a scrubbed environment, deadline and output caps.
 */
export { ETC_ENTRIES, interpreterTree } from './binds.js';
export { type CgroupSupport, type CgroupVersion, cgroupSupport } from './cgroup.js';
export type { SandboxExit } from './exit.js';
export { APPARMOR_PROFILE } from './fixes.js';
export { DEFAULT_LIMITS, type SandboxLimits } from './limits.js';
export { fallbackAllowed, policyFor, type SandboxPolicy } from './policy.js';
export {
  assertSandboxAvailable,
  type ProbeOptions,
  probeSandbox,
  type SandboxProbe,
} from './probe.js';
export {
  type ProcessTree,
  ProcessTreeReader,
  readProcessTree,
  type TreeProcess,
} from './process-tree.js';
export {
  launchSandboxed,
  launchSandboxedAsync,
  runSandboxed,
  spawnSandboxed,
} from './sandboxed.js';
export { DENIED_SYSCALLS, seccompProgram, UNAVAILABLE_SYSCALLS } from './seccomp.js';
export { spawnerPid, spawnerReady } from './spawner.js';
export type {
  SandboxedProcess,
  SandboxedTree,
  SandboxOptions,
  SandboxResult,
} from './types.js';
export {
  Zygote,
  type ZygoteForkOptions,
  type ZygoteOptions,
  zygoteCannotServe,
  zygoteEnabled,
} from './zygote.js';
