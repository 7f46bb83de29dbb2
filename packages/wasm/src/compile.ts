/**
 * From a body to a checked, compiled WebAssembly.Module. The checks here are
 * the runner's whole security boundary: no imports (so a module reaches
 * nothing outside its own memory), memory and tables capped, everything the
 * module makes V8 allocate within one budget (src/budget.ts), and the export
 * that will be called has the numeric ABI. `compileBody` runs in a compile
 * worker (src/compile-worker.ts), never on the host's main thread: how long
 * it takes depends on the body.
 */
import { createHash } from 'node:crypto';
import { capLimits, type FuncType, formatFuncType, type ModuleInfo, readModule } from './binary.js';
import { BodyError, moduleBytes, screenBody } from './body.js';
import { budgetRefusal } from './budget.js';
import { type CompiledWasmModule, compileWasm } from './webassembly.js';

export const WASM_PAGE_BYTES = 65_536;

export interface Ceilings {
  memoryPages: number;
  tableElements: number;
  /** Estimated bytes everything the module declares may allocate (see src/budget.ts). */
  budgetBytes: number;
}

export interface CompileOptions extends Ceilings {
  /** Keep one instance per worker even for stateful modules (see WasmRunnerOptions.reuseInstances). */
  reuseInstances: boolean;
  /** Largest `wat:` text or decoded `wasm:` binary, in bytes (see WasmRunnerOptions.maxBodyBytes). */
  maxBodyBytes: number;
}

/** A module ready to post to a worker. */
export interface CompiledModule {
  /** sha256 of the body: how workers know which modules they already hold. */
  readonly key: string;
  readonly module: CompiledWasmModule;
  /** The type of `improv_call`, already checked to be f64s in, one f64 out. */
  readonly signature: FuncType;
  /** The module can carry state from one call to the next (memory, tables, mutable globals). */
  readonly stateful: boolean;
  /**
   * Each call gets a new instance: true for a stateful module unless the
   * runner was told to reuse instances, so that a result never depends on
   * which calls ran before on the same worker.
   */
  readonly fresh: boolean;
}

export type Compiled = { ok: true; value: CompiledModule } | { ok: false; message: string };

export const ENTRY_POINT = 'improv_call';

/** Judges a module's structure; returns why it is refused, or undefined. */
export function refusal(info: ModuleInfo, ceilings: Ceilings): string | undefined {
  if (info.imports.length) {
    const list = info.imports
      .slice(0, 5)
      .map((i) => `${i.module}.${i.name} (${i.kind})`)
      .join(', ');
    return `the module imports ${list}${info.imports.length > 5 ? ', …' : ''}; wasm bodies may not import anything (no WASI, no host functions)`;
  }
  for (const memory of info.memories) {
    const ceiling = `the ceiling of ${ceilings.memoryPages} pages (${formatBytes(ceilings.memoryPages * WASM_PAGE_BYTES)})`;
    if (memory.memory64) return 'the module declares a 64-bit memory, which is not supported';
    if (memory.min > ceilings.memoryPages) {
      return `the module declares ${memory.min} pages of initial memory, above ${ceiling}`;
    }
    if (memory.max !== undefined && memory.max > ceilings.memoryPages) {
      return `the module declares a maximum memory of ${memory.max} pages, above ${ceiling}`;
    }
  }
  for (const table of info.tables) {
    if (table.limits.min > ceilings.tableElements) {
      return `the module declares a table of ${table.limits.min} elements, above the ceiling of ${ceilings.tableElements}`;
    }
    if (table.limits.max !== undefined && table.limits.max > ceilings.tableElements) {
      return `the module declares a table maximum of ${table.limits.max} elements, above the ceiling of ${ceilings.tableElements}`;
    }
  }
  return undefined;
}

/** The type of the `improv_call` export, or why there is none to call. */
export function entryPointType(info: ModuleInfo): FuncType | string {
  const entry = info.exports.find((e) => e.name === ENTRY_POINT);
  if (!entry) {
    const found = info.exports.map((e) => `${e.name} (${e.kind})`).join(', ') || 'none';
    return `the module has no export named ${ENTRY_POINT} (exports found: ${found}); export a function (func (export "${ENTRY_POINT}") (param f64 …) (result f64))`;
  }
  if (entry.kind !== 'function')
    return `the export ${ENTRY_POINT} is a ${entry.kind}, not a function`;
  const typeIndex = info.functions[entry.index];
  const type = typeIndex === undefined ? undefined : info.types[typeIndex];
  if (!type)
    return `the export ${ENTRY_POINT} refers to function ${entry.index}, which the module does not define`;
  const numeric =
    type.params.every((t) => t === 'f64') && type.results.length === 1 && type.results[0] === 'f64';
  if (!numeric) {
    return `${ENTRY_POINT} has the signature ${formatFuncType(type)}; the numeric ABI needs one f64 per number argument and an f64 for the number result, e.g. (param f64 f64) (result f64)`;
  }
  return type;
}

function formatBytes(bytes: number): string {
  return bytes % (1 << 20) === 0 ? `${bytes / (1 << 20)} MiB` : `${bytes} bytes`;
}

/** Compiles a body through every check; throws only on a failure of this program itself. */
export async function compileBody(body: string, options: CompileOptions): Promise<Compiled> {
  let bytes: Uint8Array;
  try {
    screenBody(body, options.maxBodyBytes);
    bytes = await moduleBytes(body);
  } catch (error) {
    if (error instanceof BodyError) return { ok: false, message: error.message };
    throw error;
  }
  let info: ModuleInfo;
  try {
    info = readModule(bytes);
  } catch (error) {
    // V8's validator gives the better message (offset and reason) for a malformed binary.
    try {
      await compileWasm(bytes);
    } catch (compileError) {
      return {
        ok: false,
        message: `invalid WebAssembly module: ${(compileError as Error).message}`,
      };
    }
    return { ok: false, message: `unsupported WebAssembly module: ${(error as Error).message}` };
  }
  // Judged before V8 sees the module: nothing it declares is allocated until this passes.
  const refused = refusal(info, options) ?? budgetRefusal(info, bytes.length, options);
  if (refused) return { ok: false, message: refused };
  const signature = entryPointType(info);
  if (typeof signature === 'string') return { ok: false, message: signature };
  try {
    const module = await compileWasm(capLimits(bytes, info, options));
    const stateful = info.memories.length > 0 || info.tables.length > 0 || info.mutableGlobals > 0;
    const key = createHash('sha256').update(body).digest('base64url');
    return {
      ok: true,
      value: { key, module, signature, stateful, fresh: stateful && !options.reuseInstances },
    };
  } catch (error) {
    return { ok: false, message: `invalid WebAssembly module: ${(error as Error).message}` };
  }
}
