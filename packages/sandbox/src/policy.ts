/**
 * Who decides how much protection a body gets: the host, never the model.
 * What each policy keeps, numbered as the README's Security section numbers
 * the layers (launch.ts applies them):
 *
 * - `restricted` (default): all seven — bubblewrap namespaces and mounts (1),
 *   a uid of its own on a root host (2), seccomp (3), rlimits (4), a cgroup
 *   per tree where the host offers one (5), a clean environment and closed
 *   inherited descriptors (6), deadline and output caps (7).
 * - `unsandboxed`: no namespaces and no seccomp; keeps 2, 4, 5, 6 and 7,
 *   plus no_new_privs (setpriv). Chosen in code, or by the probe as the
 *   fallback of `restricted` where bubblewrap cannot start, when the host's
 *   environment holds IMPROV_EXTFN_ALLOW_UNSANDBOXED=1.
 * - `trusted` (IMPROV_EXTFN_TRUSTED=1): 6 and 7 only; bodies run with the
 *   host's privileges.
 */
export type SandboxPolicy = 'restricted' | 'unsandboxed' | 'trusted';

/**
 * The policy the host asked for through its environment: `trusted` when
 * IMPROV_EXTFN_TRUSTED=1, else `restricted`. IMPROV_EXTFN_ALLOW_UNSANDBOXED=1
 * does not change it: it only permits the fallback (`fallbackAllowed`).
 * A model file cannot reach this: it reads the host process's environment.
 */
export function policyFor(env: NodeJS.ProcessEnv = process.env): SandboxPolicy {
  if (env.IMPROV_EXTFN_TRUSTED === '1') return 'trusted';
  return 'restricted';
}

/** Whether `restricted` may fall back to `unsandboxed` where bubblewrap cannot start. */
export function fallbackAllowed(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.IMPROV_EXTFN_ALLOW_UNSANDBOXED === '1';
}
