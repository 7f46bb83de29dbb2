import type { LanguageRunner } from '@improv/extfn-core';

export interface WasmRunnerOptions {}

/** The wasm runner. Not implemented yet: it throws until its issue lands. */
export function wasm(_options: WasmRunnerOptions = {}): LanguageRunner {
  throw new Error('@improv/extfn-wasm: the wasm runner is not implemented yet');
}
