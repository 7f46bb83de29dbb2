import type { LanguageRunner } from '@improv/extfn-core';

export interface PythonRunnerOptions {}

/** The python runner. Not implemented yet: it throws until its issue lands. */
export function python(_options: PythonRunnerOptions = {}): LanguageRunner {
  throw new Error('@improv/extfn-python: the python runner is not implemented yet');
}
