import { existsSync } from 'node:fs';
import { ExtFnError, Registry, type Value } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { type RRunnerOptions, r } from '../src/index.js';

/** Debian's Rscript (`.ci/run` installs r-base-core); IMPROV_EXTFN_R points elsewhere. */
export const RSCRIPT = process.env.IMPROV_EXTFN_R || '/usr/bin/Rscript';
export const hasR = existsSync(RSCRIPT);

const restrictedProbe = await probeSandbox({ policy: 'restricted' });
export const restrictedOk = hasR && restrictedProbe.ok;
export const skipReason = hasR
  ? `skipped: Restricted sandbox unavailable here (${restrictedProbe.problem ?? restrictedProbe.summary})`
  : `skipped: R is not installed here (no ${RSCRIPT})`;

export function runner(options: RRunnerOptions = {}) {
  return r({ interpreter: RSCRIPT, policy: 'restricted', ...options });
}

export type Signature = [body: string, argTypes: Value['type'][], returnType: Value['type']];

/** A registry with one R runner; `fns` maps name → [body, argTypes, returnType]. */
export function registryWith(fns: Record<string, Signature>, options: RRunnerOptions = {}) {
  const runnerInstance = runner(options);
  const registry = new Registry({ runners: [runnerInstance], timeoutMs: 10_000 });
  for (const [name, [body, argTypes, returnType]] of Object.entries(fns)) {
    registry.register({ name, language: 'r', body, argTypes, returnType, pure: false } as never);
  }
  return { registry, runner: runnerInstance };
}

export async function failure(promise: Promise<unknown>): Promise<ExtFnError> {
  try {
    const value = await promise;
    throw new Error(`expected an ExtFnError, got ${JSON.stringify(value)}`);
  } catch (error) {
    if (ExtFnError.isInstance(error)) return error;
    throw error;
  }
}
