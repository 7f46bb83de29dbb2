import type { LanguageRunner } from '@improv/extfn-core';

export interface RRunnerOptions {}

/** The r runner. Not implemented yet: it throws until its issue lands. */
export function r(_options: RRunnerOptions = {}): LanguageRunner {
  throw new Error('@improv/extfn-r: the r runner is not implemented yet');
}
