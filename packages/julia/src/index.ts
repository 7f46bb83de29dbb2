import type { LanguageRunner } from '@improv/extfn-core';

export interface JuliaRunnerOptions {}

/** The julia runner. Not implemented yet: it throws until its issue lands. */
export function julia(_options: JuliaRunnerOptions = {}): LanguageRunner {
  throw new Error('@improv/extfn-julia: the julia runner is not implemented yet');
}
