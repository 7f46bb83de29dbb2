/**
 * What every topic of the conformance kit shares: the option types, the
 * registry a test runs against (with a wrapper that counts what reaches the
 * runner), and assertions that say what differed.
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import type { LanguageRunner } from '../language-runner.js';
import { Registry } from '../registry.js';
import { sameValue, type Value, type ValueType } from '../value.js';

/**
 * Registers one test; `timeout` is in milliseconds. vitest's, jest's and
 * node:test's `test` all fit. When it has a `skip` of the same shape, tests a
 * runner opted out of are registered through it, the reason in their name.
 */
export type TestFunction = ((
  name: string,
  fn: () => Promise<void>,
  timeout?: number,
) => unknown) & {
  skip?: (name: string, fn: () => Promise<void>, timeout?: number) => unknown;
};

export type CreateRunner = () => LanguageRunner | Promise<LanguageRunner>;

export interface VerbatimCase {
  /** What the case shows, e.g. "triple quotes and backslashes". */
  name: string;
  body: string;
  returnType: ValueType;
  expected: Value;
}

export interface ConformanceBodies {
  /** Sets the result to its only argument, unchanged (any declared type). */
  identity: string;
  /** Adds its two number arguments. */
  add: string;
  /** Fails with an error whose message contains "nope". */
  raise: string;
  /**
   * Does not load: its runner refuses it before any row runs (a body that
   * does not parse or compile). Every call fails with the same Runtime
   * error, marked `loadFailed`.
   */
  noLoad?: string;
  /** Sets the result to a text (the suite declares a number return). */
  wrongReturn: string;
  /** Never finishes. */
  loop: string;
  /** Sets the result to a text of 200 000 "x" characters. */
  largeResult?: string;
  /** Writes at least 5 MB to standard output (runners that cap output). */
  flood?: string;
  /**
   * One number argument: sets the result to 2 × args[0] when args[0] ≥ 0,
   * fails when args[0] < 0, and never finishes when args[0] is 13. Checks
   * that a batch isolates failing and hanging rows exactly as `eval` does.
   */
  mixedBatch?: string;
  /**
   * One number argument. Sets the result to the number an earlier call left
   * in a global variable (the language's most widely shared kind), or to -1
   * when there is none; then leaves args[0] in that variable. A runner that
   * gives every row fresh variables returns -1 on every row.
   */
  remember?: string;
  /**
   * One number argument, ignored. Sets the result to a number drawn from the
   * language's default random generator, unseeded by the body. A runner that
   * reseeds per row returns the same draw on every row.
   */
  random?: string;
  /**
   * Vectorized (`vectorized: true`), one number column: sets the result
   * column to 2 × each cell, except that the cell for 7 is missing (None,
   * NA, nothing); fails when the column holds a negative number and never
   * finishes when it holds 13. Checks that whole-column functions keep
   * per-cell semantics in batches and columns.
   */
  vectorizedMixed?: string;
}

/**
 * Checks a runner says it cannot pass, each with the reason, which is shown
 * in the name of the skipped test. Opting out is explicit: a check without
 * its body and without a reason here is reported as not checked.
 */
export interface Unsupported {
  /** Per-row isolation of variables (`bodies.remember`). */
  isolation?: string;
  /** Reseeding the default random generator per row (`bodies.random`). */
  random?: string;
  /** Lone UTF-16 surrogates in text values. */
  loneSurrogates?: string;
  /** Vectorized descriptors (`bodies.vectorizedMixed`). */
  vectorized?: string;
  /** Telling a body that does not load from one that fails its rows (`bodies.noLoad`). */
  loadFailed?: string;
}

/** Options every topic takes. */
export interface SuiteOptions {
  /** Value types the runner accepts and returns (default: all five). */
  types?: readonly ValueType[];
  /** Prefix for test names (default `runner conformance:`). */
  prefix?: string;
  /** Per-test timeout passed to `test` (default 60 000 ms). */
  testTimeoutMs?: number;
  unsupported?: Unsupported;
}

export const ALL_TYPES: readonly ValueType[] = ['number', 'boolean', 'text', 'datetime', 'enum'];

/** Registers a function of the runner's language (impure unless said). */
export type Define = (
  name: string,
  body: string,
  argTypes: ValueType[],
  returnType: ValueType,
  pure?: boolean,
  vectorized?: boolean,
) => void;

/** What reached the runner, counted by the kit's wrapper. */
export interface Counts {
  /** Rows that reached `call`, `callBatch` or `callColumns`. */
  rows(): number;
  /** Calls of the runner's own `callColumns`. */
  columnCalls(): number;
  /** Calls of the runner's own `callTypedColumns`. */
  typedColumnCalls(): number;
  /** Calls of the runner's own `prepare` (the hint before a batch). */
  prepares(): number;
  /** The runner has its own `callColumns`. */
  readonly hasColumns: boolean;
  /** The runner has its own `callTypedColumns`. */
  readonly hasTypedColumns: boolean;
  /** The runner claims vectorized functions (`capabilities.vectorized`). */
  readonly vectorized: boolean;
}

/**
 * A wrapper that counts what reaches the runner, and passes every method
 * the runner has straight through — `callBatch`, `callColumns`,
 * `callTypedColumns`, `cacheSalt`, `onRegister`, `prepare` and `warmUp`
 * included, so the kit tests the runner's own paths, not core's fallbacks.
 */
export function counting(runner: LanguageRunner): { runner: LanguageRunner; counts: Counts } {
  let rows = 0;
  let columnCalls = 0;
  let typedColumnCalls = 0;
  let prepares = 0;
  const wrapped: LanguageRunner = {
    specificationVersion: runner.specificationVersion,
    language: runner.language,
    packageName: runner.packageName,
    capabilities: runner.capabilities,
    probe: () => runner.probe(),
    call: (fn, args, options) => {
      rows++;
      return runner.call(fn, args, options);
    },
    close: () => runner.close?.() ?? Promise.resolve(),
  };
  if (runner.callBatch) {
    const callBatch = runner.callBatch.bind(runner);
    wrapped.callBatch = (fn, batch, options) => {
      rows += batch.length;
      return callBatch(fn, batch, options);
    };
  }
  if (runner.prepare) {
    const prepare = runner.prepare.bind(runner);
    wrapped.prepare = (fn, options) => {
      prepares++;
      return prepare(fn, options); // core waits for it (a new runner's lookup and probe)
    };
  }
  if (runner.callColumns) {
    const callColumns = runner.callColumns.bind(runner);
    wrapped.callColumns = (fn, columns, options) => {
      rows += columns[0]?.length ?? 0;
      columnCalls++;
      return callColumns(fn, columns, options);
    };
  }
  if (runner.callTypedColumns) {
    const callTypedColumns = runner.callTypedColumns.bind(runner);
    wrapped.callTypedColumns = (fn, columns, options) => {
      rows += columns[0]?.length ?? 0;
      typedColumnCalls++;
      return callTypedColumns(fn, columns, options);
    };
  }
  if (runner.cacheSalt) wrapped.cacheSalt = runner.cacheSalt.bind(runner);
  if (runner.onRegister) wrapped.onRegister = runner.onRegister.bind(runner);
  if (runner.warmUp) wrapped.warmUp = runner.warmUp.bind(runner);
  return {
    runner: wrapped,
    counts: {
      rows: () => rows,
      columnCalls: () => columnCalls,
      typedColumnCalls: () => typedColumnCalls,
      prepares: () => prepares,
      hasColumns: runner.callColumns !== undefined,
      hasTypedColumns: runner.callTypedColumns !== undefined,
      vectorized: runner.capabilities.vectorized === true,
    },
  };
}

/** The pieces a topic registers its tests with. */
export interface Kit {
  types: readonly ValueType[];
  perTest: number;
  name(what: string): string;
  /** Registers a test the runner opted out of (or gave no body for), reason in the name. */
  skip(what: string, reason: string): void;
  /** Runs `fn` against a fresh runner in a fresh registry, closed afterwards. */
  withRegistry(
    fn: (registry: Registry, define: Define, counts: Counts) => Promise<void>,
  ): Promise<void>;
}

export function kit(test: TestFunction, createRunner: CreateRunner, options: SuiteOptions): Kit {
  const name = (what: string) => `${options.prefix ?? 'runner conformance:'} ${what}`;
  const perTest = options.testTimeoutMs ?? 60_000;
  return {
    types: options.types ?? ALL_TYPES,
    perTest,
    name,
    skip(what, reason) {
      // Without a skip function nothing is registered: a test that cannot fail is no test.
      test.skip?.(`${name(what)} — not checked: ${reason}`, async () => {}, perTest);
    },
    async withRegistry(fn) {
      const counted = counting(await createRunner());
      const registry = new Registry({ runners: [counted.runner], timeoutMs: 10_000 });
      const { language } = counted.runner;
      const define: Define = (fnName, body, argTypes, returnType, pure = false, vectorized) => {
        registry.register({
          name: fnName,
          language,
          body,
          argTypes,
          returnType,
          pure,
          ...(vectorized ? { vectorized } : {}),
        });
      };
      try {
        await fn(registry, define, counted.counts);
      } finally {
        await registry.close();
      }
    },
  };
}

export function assertSame(actual: unknown, expected: Value, what: string): void {
  assert.ok(
    typeof actual === 'object' && actual !== null && sameValue(actual as Value, expected),
    `${what}: expected ${show(expected)}, got ${show(actual)}`,
  );
}

/** A value or error as one line, special numbers and lone surrogates visible. */
export function show(x: unknown): string {
  if (ExtFnError.isInstance(x)) return `${x.kind} error: ${x.message}`;
  return JSON.stringify(x, (_k, v) =>
    typeof v === 'number' && (!Number.isFinite(v) || Object.is(v, -0))
      ? Object.is(v, -0)
        ? '-0'
        : String(v)
      : v,
  );
}

/** The ExtFnError `promise` rejects with; fails the test when it resolves or rejects with anything else. */
export async function rejection(promise: Promise<unknown>): Promise<ExtFnError> {
  let value: unknown;
  try {
    value = await promise;
  } catch (error) {
    if (ExtFnError.isInstance(error)) return error;
    assert.fail(`expected an ExtFnError, got ${String(error)}`);
  }
  assert.fail(`expected an ExtFnError, got the value ${show(value)}`);
}

/** What `eval` gives: its Value, or the ExtFnError it rejects with. */
export async function settle(promise: Promise<Value>): Promise<Value | ExtFnError> {
  try {
    return await promise;
  } catch (error) {
    if (ExtFnError.isInstance(error)) return error;
    assert.fail(`expected an ExtFnError, got ${String(error)}`);
  }
}

/** Asserts a batch row equals what `eval` gave for the same row. */
export function assertSameOutcome(got: unknown, single: Value | ExtFnError, what: string): void {
  if (ExtFnError.isInstance(single)) {
    if (!ExtFnError.isInstance(got))
      assert.fail(`${what}: expected ${show(single)}, got ${show(got)}`);
    assert.equal(got.kind, single.kind, what);
    assert.equal(got.message, single.message, what);
  } else {
    assertSame(got, single, what);
  }
}
