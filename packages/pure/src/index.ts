import type { LanguageRunner } from '@improv/extfn-core';

export interface PureRunnerOptions {}

/** The pure runner. Not implemented yet: it throws until its issue lands. */
export function pure(_options: PureRunnerOptions = {}): LanguageRunner {
  throw new Error('@improv/extfn-pure: the pure runner is not implemented yet');
}
