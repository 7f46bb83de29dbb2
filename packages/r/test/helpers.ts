/** Shared by the R tests: Rscript, sandbox availability and scoped registries. */
import { existsSync } from 'node:fs';
import { Registry, type Value } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { afterEach } from 'vitest';
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

export type Signature = [
  body: string,
  argTypes: Value['type'][],
  returnType: Value['type'],
  extras?: { vectorized?: boolean; pure?: boolean },
];

/** A registry with one R runner; `fns` maps name → [body, argTypes, returnType, extras?]. */
export function registryWith(fns: Record<string, Signature>, options: RRunnerOptions = {}) {
  const runnerInstance = runner(options);
  const registry = new Registry({ runners: [runnerInstance], timeoutMs: 10_000 });
  for (const [name, [body, argTypes, returnType, extras]] of Object.entries(fns)) {
    registry.register({
      name,
      language: 'r',
      body,
      argTypes,
      returnType,
      pure: false,
      ...extras,
    } as never);
  }
  return { registry, runner: runnerInstance };
}

const toClose: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of toClose.splice(0)) await close();
});

/** `registryWith`, closed after the current test. */
export function scopedRegistry(...args: Parameters<typeof registryWith>) {
  const made = registryWith(...args);
  toClose.push(() => made.registry.close());
  return made;
}

/** The ExtFnError a promise rejects with (the kit's helper, shared by every package's tests). */
export { rejection as failure } from '@improv/extfn-core/testing';
