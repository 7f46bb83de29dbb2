/**
 * An in-memory runner for testing the conformance kit itself: a correct one,
 * and the broken variants the kit must catch. Bodies are command words
 * (`identity`, `add`, `mixed`, `remember`, `random`, `text:<literal>`…); each
 * call gets fresh variables and a reseeded generator unless a defect says
 * otherwise.
 */
import {
  type BatchOptions,
  type CallOptions,
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  type RowResult,
  rowResultsToColumns,
  Value as V,
  type Value,
} from '../src/index.js';

export type Defect =
  /** callColumns loses the failed rows' errors: they read as plain NaN. */
  | 'columns-drop-errors'
  /** One namespace for every call: a variable set by one row is there in the next. */
  | 'shared-namespace'
  /** The random generator is seeded once, not per row. */
  | 'no-reseed'
  /** Text goes through a UTF-8 round trip, which turns lone surrogates into U+FFFD. */
  | 'surrogates-mangled'
  /** A vectorized chunk the body raises for fails every row, instead of being re-run row by row. */
  | 'vectorized-no-fallback'
  /** warmUp rejects although the function's calls work. */
  | 'warm-up-fails'
  /** A body that does not load fails its calls without saying so (no `loadFailed`). */
  | 'load-unmarked';

/** A small seeded generator (mulberry32), standing in for a language's default one. */
function generator(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const num = (v: Value | undefined) => (v as { value: number } | undefined)?.value ?? Number.NaN;

export function kitRunner(defect?: Defect): LanguageRunner {
  const shared: Record<string, number> = {};
  const sharedRandom = generator(0);
  let closed = false;

  function evaluate(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
    if (closed) return Promise.reject(ExtFnError.runtime(fn.name, 'the runner is closed'));
    const globals = defect === 'shared-namespace' ? shared : {};
    const random = defect === 'no-reseed' ? sharedRandom : generator(0);
    const never = () =>
      new Promise<Value>((_, reject) => {
        setTimeout(() => reject(ExtFnError.timeout(fn.name, options.timeoutMs)), options.timeoutMs);
      });
    const x = num(args[0]);
    switch (fn.body.split(':')[0]) {
      case 'identity': {
        const arg = args[0]!;
        if (defect === 'surrogates-mangled' && arg.type === 'text') {
          return Promise.resolve(V.text(Buffer.from(arg.value, 'utf8').toString('utf8')));
        }
        return Promise.resolve(arg);
      }
      case 'add':
        return Promise.resolve(V.number(x + num(args[1])));
      case 'raise':
        return Promise.reject(ExtFnError.runtime(fn.name, 'Error: nope'));
      case 'unparsable':
        return Promise.reject(
          ExtFnError.runtime(fn.name, 'SyntaxError: unexpected end', {
            ...(defect === 'load-unmarked' ? {} : { loadFailed: true }),
          }),
        );
      case 'wrong':
        return Promise.resolve(V.text('five'));
      case 'loop':
        return never();
      case 'large':
        return Promise.resolve(V.text('x'.repeat(200_000)));
      case 'flood':
        return Promise.reject(ExtFnError.runtime(fn.name, 'output too large', { limit: 'output' }));
      case 'mixed':
        if (x < 0) return Promise.reject(ExtFnError.runtime(fn.name, 'Error: nope'));
        return x === 13 ? never() : Promise.resolve(V.number(2 * x));
      case 'vmixed': // vectorized: a column of length one
        if (x < 0) return Promise.reject(ExtFnError.runtime(fn.name, 'Error: nope'));
        if (x === 7) return Promise.reject(ExtFnError.runtime(fn.name, 'result row 0 is missing'));
        return x === 13 ? never() : Promise.resolve(V.number(2 * x));
      case 'remember': {
        const before = globals.leaked ?? -1;
        globals.leaked = x;
        return Promise.resolve(V.number(before));
      }
      case 'random':
        return Promise.resolve(V.number(random()));
      case 'text':
        return Promise.resolve(V.text(fn.body.slice('text:'.length)));
      default:
        return Promise.reject(ExtFnError.runtime(fn.name, `unknown body ${fn.body}`));
    }
  }

  async function callBatch(
    fn: ExternalFn,
    rows: readonly (readonly Value[])[],
    options: BatchOptions,
  ): Promise<RowResult[]> {
    let done = 0;
    if (defect === 'vectorized-no-fallback' && fn.vectorized && rows.some((r) => num(r[0]) < 0)) {
      return rows.map(() => ExtFnError.runtime(fn.name, 'Error: nope'));
    }
    return Promise.all(
      rows.map((args) =>
        evaluate(fn, args, options)
          .then(
            (value) => value,
            (error: ExtFnError) => error,
          )
          .finally(() => options.onProgress?.(++done, rows.length)),
      ),
    );
  }

  return {
    specificationVersion: 'v1',
    language: 'kit',
    packageName: '@test/kit-runner',
    capabilities: { isolated: false, warmWorkers: false, batch: true, vectorized: true },
    async probe() {
      return { language: 'kit', available: true, detail: 'in memory' };
    },
    async warmUp(fn) {
      if (closed) throw ExtFnError.runtime(fn.name, 'the runner is closed');
      if (defect === 'warm-up-fails') throw new Error('could not start');
      return undefined;
    },
    call: evaluate,
    callBatch,
    async callColumns(fn, columns, options) {
      const rows = Array.from({ length: columns[0]?.length ?? 0 }, (_, i) =>
        columns.map((column) => V.number(column[i]!)),
      );
      const out = rowResultsToColumns(fn, await callBatch(fn, rows, options));
      if (defect === 'columns-drop-errors') out.errors.clear();
      return out;
    },
    async close() {
      closed = true;
    },
  };
}

/** The kit's bodies for this runner's command words. */
export const kitBodies = {
  identity: 'identity',
  add: 'add',
  raise: 'raise',
  noLoad: 'unparsable',
  wrongReturn: 'wrong',
  loop: 'loop',
  largeResult: 'large',
  flood: 'flood',
  mixedBatch: 'mixed',
  remember: 'remember',
  random: 'random',
  vectorizedMixed: 'vmixed',
};
