export type { SandboxExit } from './launch.js';
export { DEFAULT_LIMITS, type SandboxLimits } from './limits.js';
export { policyFor, type SandboxPolicy } from './policy.js';
export {
  assertSandboxAvailable,
  type ProbeOptions,
  probeSandbox,
  type SandboxProbe,
} from './probe.js';
export {
  runSandboxed,
  type SandboxedProcess,
  type SandboxOptions,
  type SandboxResult,
  spawnSandboxed,
} from './run.js';
export { DENIED_SYSCALLS, seccompProgram } from './seccomp.js';
