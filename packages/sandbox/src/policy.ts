/** Who decides how much protection a body gets: the host, never the model. */
export type SandboxPolicy = 'restricted' | 'unsandboxed' | 'trusted';

/**
 * The policy the host asked for through its environment. Restricted unless the
 * operator opted out: `IMPROV_EXTFN_TRUSTED=1` → trusted (layers 4–6 only),
 * `IMPROV_EXTFN_ALLOW_UNSANDBOXED=1` → unsandboxed (layers 2–6, no namespaces).
 * A model file cannot reach this: it reads the host process's environment.
 */
export function policyFor(env: NodeJS.ProcessEnv = process.env): SandboxPolicy {
  if (env.IMPROV_EXTFN_TRUSTED === '1') return 'trusted';
  if (env.IMPROV_EXTFN_ALLOW_UNSANDBOXED === '1') return 'unsandboxed';
  return 'restricted';
}
