/**
 * The slice of the WebAssembly JavaScript API this package uses. Neither
 * lib ES2023 nor @types/node 20 declare it, and pulling in the DOM lib would
 * leak browser globals into every consumer's types.
 */

/** A compiled module: opaque here, structured-cloneable to worker threads. */
export interface CompiledWasmModule {
  readonly [Symbol.toStringTag]: string;
}

interface WebAssemblyNamespace {
  compile(bytes: Uint8Array): Promise<CompiledWasmModule>;
}

/** `globalThis.WebAssembly`, or undefined in a runtime without it. */
export const webAssembly = (globalThis as { WebAssembly?: WebAssemblyNamespace }).WebAssembly;

export function compileWasm(bytes: Uint8Array): Promise<CompiledWasmModule> {
  if (!webAssembly) return Promise.reject(new Error('this JavaScript runtime has no WebAssembly'));
  return webAssembly.compile(bytes);
}
