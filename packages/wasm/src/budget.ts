/**
 * One allocation budget per module, judged on the binary before it is
 * compiled. Per-table and per-memory ceilings alone let a module declare a
 * thousand tables; V8 allocates tables, memories, globals, segments and
 * export wrappers when it instantiates, and compiles a function lazily on its
 * first call with a copy of every local's state per block or branch. None of
 * that work can be interrupted by terminating the worker (it is C++, not
 * JavaScript or WebAssembly), so it has to be made small before it starts:
 * each declaration is given an estimated cost in bytes, summed, and the module
 * is refused when the sum passes the budget.
 */
import type { FuncType, ModuleInfo } from './binary.js';
import { formatBytes } from './body.js';

/**
 * Estimated bytes per declaration. Measured on Node 20 (V8 11.3) and rounded
 * up: a funcref table element ~28 bytes, an export ~126, a global ~9; V8's
 * baseline compiler ~12 bytes per local per block and ~23 per local per if.
 * The others (code, types, segments, tags) are generous guesses.
 */
export const COSTS = {
  /** V8 keeps a copy of the binary. */
  binaryByte: 1,
  type: 32,
  /** A function's metadata, jump-table slot and lazy-compile stub. */
  function: 64,
  /** Machine code per byte of function body. */
  codeByte: 8,
  /** A local's (or parameter's) slot in the function's frame; v128 takes twice this. */
  local: 8,
  /** Compile-time state: per local (parameters included) per control point, plus one for the body. */
  localPerControlPoint: 32,
  /** Per element, up to the table's ceiling (the maximum written into the module). */
  tableElement: 32,
  /** Per 64 KiB page, up to the memory's ceiling (the maximum written into the module). */
  memoryPage: 65_536,
  global: 32,
  /** A tag object per exception tag, like an export's wrapper. */
  tag: 128,
  export: 128,
  elementSegment: 32,
  elementEntry: 16,
  dataSegment: 32,
  dataByte: 1,
} as const;

export interface BudgetCeilings {
  memoryPages: number;
  tableElements: number;
  /** The budget, in bytes. */
  budgetBytes: number;
}

/** What a module is estimated to need, and the first declaration that took it past the budget. */
export interface BudgetEstimate {
  totalBytes: number;
  /** Bytes and count by kind of declaration, in the order first met. */
  byKind: Map<string, { bytes: number; count: number }>;
  /** The declaration at which the running total first passed the budget. */
  breaking?: { what: string; bytes: number; totalBytes: number };
}

const count = (n: number) => n.toLocaleString('en');

/** Sums the estimated cost of every declaration of a module, in section order. */
export function estimate(
  info: ModuleInfo,
  binaryBytes: number,
  ceilings: BudgetCeilings,
): BudgetEstimate {
  const result: BudgetEstimate = { totalBytes: 0, byKind: new Map() };
  const add = (kind: string, bytes: number, what: () => string) => {
    const entry = result.byKind.get(kind) ?? { bytes: 0, count: 0 };
    entry.bytes += bytes;
    entry.count++;
    result.byKind.set(kind, entry);
    result.totalBytes += bytes;
    if (!result.breaking && result.totalBytes > ceilings.budgetBytes) {
      result.breaking = { what: what(), bytes, totalBytes: result.totalBytes };
    }
  };

  add(
    'the binary',
    binaryBytes * COSTS.binaryByte,
    () => `the binary (${formatBytes(binaryBytes)})`,
  );
  info.types.forEach((type, i) => {
    add('types', COSTS.type + type.params.length + type.results.length, () => `type ${count(i)}`);
  });
  info.tables.forEach((table, i) => {
    const elements = Math.min(table.limits.max ?? Number.POSITIVE_INFINITY, ceilings.tableElements);
    add(
      'tables',
      elements * COSTS.tableElement,
      () => `table ${count(i)} (up to ${count(elements)} elements)`,
    );
  });
  info.memories.forEach((memory, i) => {
    const pages = Math.min(memory.max ?? Number.POSITIVE_INFINITY, ceilings.memoryPages);
    add(
      'memories',
      pages * COSTS.memoryPage,
      () => `memory ${count(i)} (up to ${count(pages)} pages of 64 KiB)`,
    );
  });
  info.globals.forEach((type, i) => {
    add('globals', COSTS.global * (type === 'v128' ? 2 : 1), () => `global ${count(i)}`);
  });
  for (let i = 0; i < info.tags; i++) add('tags', COSTS.tag, () => `tag ${count(i)}`);
  info.exports.forEach((e, i) => {
    add('exports', COSTS.export, () => `export ${count(i)} ("${e.name.slice(0, 40)}")`);
  });
  info.elementSegments.forEach((entries, i) => {
    add(
      'element segments',
      COSTS.elementSegment + entries * COSTS.elementEntry,
      () => `element segment ${count(i)} (${count(entries)} entries)`,
    );
  });
  info.bodies.forEach((body, i) => {
    const type: FuncType | undefined = info.types[info.functions[i] ?? -1];
    const params = type?.params.length ?? 0;
    const v128Params = type?.params.filter((t) => t === 'v128').length ?? 0;
    const slots = params + body.locals;
    const bytes =
      COSTS.function +
      body.bytes * COSTS.codeByte +
      (slots + v128Params + body.v128Locals) * COSTS.local +
      slots * (body.controlPoints + 1) * COSTS.localPerControlPoint;
    add(
      'functions',
      bytes,
      () =>
        `function ${count(i)} (${count(slots)} locals and parameters, up to ${count(body.controlPoints)} blocks and branches, ${formatBytes(body.bytes)} of code)`,
    );
  });
  info.dataSegments.forEach((length, i) => {
    add(
      'data segments',
      COSTS.dataSegment + length * COSTS.dataByte,
      () => `data segment ${count(i)} (${formatBytes(length)})`,
    );
  });
  return result;
}

/** Why a module is refused for its estimated allocations, or undefined when it fits the budget. */
export function budgetRefusal(
  info: ModuleInfo,
  binaryBytes: number,
  ceilings: BudgetCeilings,
): string | undefined {
  const { totalBytes, byKind, breaking } = estimate(info, binaryBytes, ceilings);
  if (!breaking) return undefined;
  const kinds = [...byKind]
    .filter(([, { bytes }]) => bytes >= 1_024)
    .sort(([, a], [, b]) => b.bytes - a.bytes)
    .slice(0, 4)
    .map(
      ([kind, { bytes, count: n }]) =>
        `${kind} ${formatBytes(bytes)}${n > 1 ? ` in ${count(n)}` : ''}`,
    )
    .join(', ');
  return (
    `the module would allocate an estimated ${formatBytes(totalBytes)} to compile and instantiate, above its budget of ${formatBytes(ceilings.budgetBytes)} (${count(ceilings.budgetBytes)} bytes): ` +
    `${breaking.what}, about ${formatBytes(breaking.bytes)}, takes the total to ${count(breaking.totalBytes)} bytes (largest: ${kinds}). ` +
    'Declare fewer or smaller tables, memories, segments and globals, or fewer locals in functions with many blocks; ' +
    'a host that trusts its models can raise the moduleBudgetBytes option of wasm()'
  );
}
