/**
 * The conformance kit: one suite every runner must pass, first-party or
 * third-party. It takes the caller's `test` function (vitest, node:test,
 * jest…) and asserts with node:assert, so it is tied to no test framework.
 *
 *   runnerConformanceSuite(test, () => python(), { bodies: { … } });
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import { Registry } from '../registry.js';
import type { LanguageRunner } from '../runner.js';

export { engineSerdeFixture } from './engine-fixture.js';

import { sameValue, Value as V, type Value, type ValueType } from '../value.js';

/** Registers one test; `timeout` is in milliseconds. */
export type TestFunction = (name: string, fn: () => Promise<void>, timeout?: number) => unknown;

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
}

export interface ConformanceOptions {
  bodies: ConformanceBodies;
  /** Value types the runner accepts and returns (default: all five). */
  types?: readonly ValueType[];
  /** Text values with NUL characters are supported (default true). */
  textNul?: boolean;
  /** Fraction digits of seconds a datetime keeps (default 3). */
  datetimeDigits?: 0 | 3 | 6 | 9;
  /** Deadline for the runaway body (default 1 000 ms). */
  loopTimeoutMs?: number;
  /** How far past the deadline a Timeout may arrive (default 3 000 ms). */
  timeoutSlackMs?: number;
  /** Bodies that must reach the interpreter byte for byte: at least one. */
  verbatim: readonly VerbatimCase[];
  /** Prefix for test names (default `<language> runner conformance:`). */
  prefix?: string;
  /** Per-test timeout passed to `test` (default 60 000 ms). */
  testTimeoutMs?: number;
}

const SAMPLES: Record<ValueType, (o: ConformanceOptions) => Value[]> = {
  number: () =>
    [
      0,
      -0,
      1,
      -1.5,
      0.1,
      1e-300,
      1.7976931348623157e308,
      5e-324,
      Number.NaN,
      Infinity,
      -Infinity,
    ].map(V.number),
  boolean: () => [V.boolean(true), V.boolean(false)],
  text: (o) =>
    [
      '',
      'hello',
      'Résumé ✓ "quoted" \\ back\nslash',
      "it's '''triple''' and \"\"\"triple\"\"\"",
      '\t\r\n tabs and CRLF\r\n',
      'non-BMP: 𝄞 😀 𐍈',
      '$x #{y} %s {0} `z`',
      ...(o.textNul === false ? [] : ['nul:\u0000:end']),
    ].map(V.text),
  datetime: (o) => {
    const digits = o.datetimeDigits ?? 3;
    const fraction = digits === 0 ? '' : `.${'123456789'.slice(0, digits)}`;
    return [
      V.datetime('1969-07-20T20:17:40Z'),
      V.datetime('1970-01-01T00:00:00Z'),
      V.datetime(`2025-03-31T23:59:59${fraction}Z`),
      V.datetime('2000-02-29T12:00:00+02:00'),
    ];
  },
  enum: () => [0, 1, 7, 4_294_967_295].map(V.enum),
};

function assertSame(actual: unknown, expected: Value, what: string): void {
  assert.ok(
    typeof actual === 'object' && actual !== null && sameValue(actual as Value, expected),
    `${what}: expected ${show(expected)}, got ${show(actual)}`,
  );
}

function show(x: unknown): string {
  if (ExtFnError.isInstance(x)) return `${x.kind} error: ${x.message}`;
  return JSON.stringify(x, (_k, v) =>
    typeof v === 'number' && (!Number.isFinite(v) || Object.is(v, -0))
      ? Object.is(v, -0)
        ? '-0'
        : String(v)
      : v,
  );
}

async function rejection(promise: Promise<unknown>): Promise<ExtFnError> {
  let value: unknown;
  try {
    value = await promise;
  } catch (error) {
    if (ExtFnError.isInstance(error)) return error;
    assert.fail(`expected an ExtFnError, got ${String(error)}`);
  }
  assert.fail(`expected an ExtFnError, got the value ${show(value)}`);
}

/** A runner wrapper that counts calls, to show core rejects bad calls first. */
function counting(runner: LanguageRunner): { runner: LanguageRunner; calls: () => number } {
  let calls = 0;
  const wrapped: LanguageRunner = {
    specificationVersion: runner.specificationVersion,
    language: runner.language,
    packageName: runner.packageName,
    capabilities: runner.capabilities,
    probe: () => runner.probe(),
    call: (fn, args, options) => {
      calls++;
      return runner.call(fn, args, options);
    },
    close: () => runner.close?.() ?? Promise.resolve(),
  };
  if (runner.callBatch) {
    wrapped.callBatch = (fn, rows, options) => {
      calls += rows.length;
      return runner.callBatch!(fn, rows, options);
    };
  }
  return { runner: wrapped, calls: () => calls };
}

/**
 * Registers the conformance tests for a runner. `createRunner` is called once
 * per test; each test closes what it made.
 */
export function runnerConformanceSuite(
  test: TestFunction,
  createRunner: () => LanguageRunner | Promise<LanguageRunner>,
  options: ConformanceOptions,
): void {
  const types = options.types ?? (['number', 'boolean', 'text', 'datetime', 'enum'] as const);
  const bodies = options.bodies;
  const perTest = options.testTimeoutMs ?? 60_000;

  /** Registers a function of the runner's language (impure unless said). */
  type Define = (
    name: string,
    body: string,
    argTypes: ValueType[],
    returnType: ValueType,
    pure?: boolean,
  ) => void;

  const withRegistry = async (
    fn: (registry: Registry, define: Define, calls: () => number) => Promise<void>,
  ) => {
    const counted = counting(await createRunner());
    const registry = new Registry({ runners: [counted.runner], timeoutMs: 10_000 });
    const { language } = counted.runner;
    const define: Define = (name, body, argTypes, returnType, pure = false) => {
      registry.register({ name, language, body, argTypes, returnType, pure });
    };
    try {
      await fn(registry, define, counted.calls);
    } finally {
      await registry.close();
    }
  };
  const name = (what: string) => `${options.prefix ?? 'runner conformance:'} ${what}`;

  test(
    name('the runner declares the v1 specification and probes as available'),
    async () => {
      const runner = await createRunner();
      try {
        assert.equal(runner.specificationVersion, 'v1');
        assert.match(runner.language, /^[a-z][a-z0-9_-]*$/, 'language id is lower case');
        assert.equal(typeof runner.packageName, 'string');
        const probe = await runner.probe();
        assert.equal(probe.language, runner.language);
        assert.equal(probe.available, true, `probe says unavailable: ${probe.detail}`);
      } finally {
        await runner.close?.();
      }
    },
    perTest,
  );

  for (const type of types) {
    test(
      name(`identity returns every ${type} sample unchanged`),
      () =>
        withRegistry(async (registry, define) => {
          define(`identity_${type}`, bodies.identity, [type], type);
          for (const sample of SAMPLES[type](options)) {
            const result = await registry.eval(`identity_${type}`, [sample]);
            assertSame(result, sample, `identity of ${show(sample)}`);
          }
        }),
      perTest,
    );
  }

  if (types.includes('number')) {
    test(
      name('adds two numbers (2 + 3 = 5)'),
      () =>
        withRegistry(async (registry, define) => {
          define('add', bodies.add, ['number', 'number'], 'number', true);
          assertSame(
            await registry.eval('add', [V.number(2), V.number(3)]),
            V.number(5),
            'add(2, 3)',
          );
        }),
      perTest,
    );

    test(
      name('arity and argument types are checked before the runner is called'),
      () =>
        withRegistry(async (registry, define, calls) => {
          define('add', bodies.add, ['number', 'number'], 'number');
          const arity = await rejection(registry.eval('add', [V.number(1)]));
          assert.equal(arity.kind, 'ArityMismatch');
          assert.equal(arity.message, 'function add: expected 2 argument(s), got 1');
          const type = await rejection(registry.eval('add', [V.number(1), V.text('2')]));
          assert.equal(type.kind, 'TypeMismatch');
          assert.equal(type.position, 2);
          assert.equal(calls(), 0, 'the runner was called for an invalid call');
        }),
      perTest,
    );

    test(
      name('a result of the wrong type is a Runtime error naming the expected type'),
      () =>
        withRegistry(async (registry, define) => {
          define('wrong', bodies.wrongReturn, [], 'number');
          const error = await rejection(registry.eval('wrong', []));
          assert.equal(error.kind, 'Runtime');
          assert.match(error.message, /number/);
        }),
      perTest,
    );

    const loopMs = options.loopTimeoutMs ?? 1_000;
    const slack = options.timeoutSlackMs ?? 3_000;
    test(
      name(
        `a runaway body times out near its ${loopMs} ms deadline, and the runner still works after`,
      ),
      () =>
        withRegistry(async (registry, define) => {
          define('loop', bodies.loop, [], 'number');
          define('add', bodies.add, ['number', 'number'], 'number');
          const started = performance.now();
          const error = await rejection(registry.eval('loop', [], { timeoutMs: loopMs }));
          const elapsed = performance.now() - started;
          assert.equal(
            error.kind,
            'Timeout',
            `expected Timeout, got ${error.kind}: ${error.message}`,
          );
          assert.equal(error.ms, loopMs);
          assert.ok(elapsed < loopMs + slack, `Timeout came after ${Math.round(elapsed)} ms`);
          assertSame(
            await registry.eval('add', [V.number(2), V.number(3)]),
            V.number(5),
            'add after a timeout',
          );
        }),
      perTest,
    );

    test(
      name('evalBatch gives exactly what eval gives on each row'),
      () =>
        withRegistry(async (registry, define) => {
          define('add', bodies.add, ['number', 'number'], 'number');
          const rows: Value[][] = [
            [V.number(1), V.number(2)],
            [V.number(Number.NaN), V.number(1)],
            [V.number(1)],
            [V.number(1), V.text('x')],
            ...Array.from({ length: 50 }, (_, i) => [V.number(i), V.number(i * 0.5)]),
          ];
          const batch = await registry.evalBatch('add', rows);
          assert.equal(batch.length, rows.length);
          for (let i = 0; i < rows.length; i++) {
            let single: Value | ExtFnError;
            try {
              single = await registry.eval('add', rows[i]!);
            } catch (error) {
              single = error as ExtFnError;
            }
            const got = batch[i];
            if (ExtFnError.isInstance(single)) {
              if (!ExtFnError.isInstance(got))
                assert.fail(`row ${i}: expected ${show(single)}, got ${show(got)}`);
              assert.equal(got.kind, single.kind, `row ${i}`);
              assert.equal(got.message, single.message, `row ${i}`);
            } else {
              assertSame(got, single, `row ${i}`);
            }
          }
        }),
      perTest,
    );
  }

  test(
    name('a raising body is a Runtime error carrying the message'),
    () =>
      withRegistry(async (registry, define) => {
        define('boom', bodies.raise, [], types[0]!);
        const error = await rejection(registry.eval('boom', []));
        assert.equal(error.kind, 'Runtime');
        assert.match(error.message, /nope/);
        assert.match(error.message, /^function boom: /);
      }),
    perTest,
  );

  if (bodies.largeResult) {
    const body = bodies.largeResult;
    test(
      name('a 200 000-character text result comes back whole'),
      () =>
        withRegistry(async (registry, define) => {
          define('big', body, [], 'text');
          const result = await registry.eval('big', []);
          assert.equal(result.type, 'text');
          assert.equal((result as { value: string }).value, 'x'.repeat(200_000));
        }),
      perTest,
    );
  }

  if (bodies.flood) {
    const body = bodies.flood;
    test(
      name('printing 5 MB is a Runtime error: output too large'),
      () =>
        withRegistry(async (registry, define) => {
          define('flood', body, [], types[0]!);
          const error = await rejection(registry.eval('flood', []));
          assert.equal(error.kind, 'Runtime');
          assert.equal(error.limit, 'output');
          assert.match(error.message, /output too large/);
        }),
      perTest,
    );
  }

  if (types.includes('number')) {
    test(
      name('evalColumns gives what evalBatch gives, special numbers and failing rows included'),
      () =>
        withRegistry(async (registry, define) => {
          define('add', bodies.add, ['number', 'number'], 'number');
          const a = [
            1,
            -0,
            Number.NaN,
            Infinity,
            -Infinity,
            5e-324,
            1e308,
            ...Array.from({ length: 40 }, (_, i) => i / 3),
          ];
          const b = a.map((x, i) => (i % 2 ? -x : 0.25));
          const columns = await registry.evalColumns('add', [
            Float64Array.from(a),
            Float64Array.from(b),
          ]);
          const batch = await registry.evalBatch(
            'add',
            a.map((x, i) => [V.number(x), V.number(b[i]!)]),
          );
          assert.equal(columns.values.length, a.length);
          for (let i = 0; i < a.length; i++) {
            const row = batch[i]!;
            if (ExtFnError.isInstance(row)) {
              assert.equal(columns.errors.get(i)?.message, row.message, `row ${i}`);
            } else {
              assertSame(V.number(columns.values[i]!), row, `row ${i}`);
              assert.equal(columns.errors.has(i), false, `row ${i} has an error in columns only`);
            }
          }
          if (bodies.mixedBatch) {
            define('mixed', bodies.mixedBatch, ['number'], 'number');
            const loopMs = options.loopTimeoutMs ?? 1_000;
            const out = await registry.evalColumns('mixed', [Float64Array.from([1, -1, 13, 2])], {
              timeoutMs: loopMs,
            });
            assert.equal(out.values[0], 2);
            assert.equal(out.errors.get(1)?.kind, 'Runtime');
            assert.equal(out.errors.get(2)?.kind, 'Timeout');
            assert.equal(out.values[3], 4);
          }
        }),
      perTest,
    );
  }

  if (bodies.mixedBatch && types.includes('number')) {
    const body = bodies.mixedBatch;
    const loopMs = options.loopTimeoutMs ?? 1_000;
    test(
      name('a batch with failing and hanging rows gives each row what eval gives it'),
      () =>
        withRegistry(async (registry, define) => {
          define('mixed', body, ['number'], 'number');
          const inputs = [1, -1, 13, 2, 3.5, -2, 4];
          const rows = inputs.map((x) => [V.number(x)]);
          const batch = await registry.evalBatch('mixed', rows, { timeoutMs: loopMs });
          assert.equal(batch.length, rows.length);
          for (let i = 0; i < rows.length; i++) {
            const x = inputs[i]!;
            const got = batch[i];
            if (x === 13) {
              if (!ExtFnError.isInstance(got))
                assert.fail(`row ${i} (13): expected Timeout, got ${show(got)}`);
              assert.equal(got.kind, 'Timeout', `row ${i}: ${got.message}`);
              continue;
            }
            let single: Value | ExtFnError;
            try {
              single = await registry.eval('mixed', rows[i]!, { timeoutMs: loopMs });
            } catch (error) {
              single = error as ExtFnError;
            }
            if (x < 0) {
              if (!ExtFnError.isInstance(got) || !ExtFnError.isInstance(single)) {
                assert.fail(
                  `row ${i} (${x}): expected failures, got ${show(got)} and ${show(single)}`,
                );
              }
              assert.equal(got.kind, 'Runtime');
              assert.equal(got.message, single.message, `row ${i}: batch and eval disagree`);
            } else {
              assertSame(got, V.number(2 * x), `row ${i}`);
              assertSame(single, V.number(2 * x), `eval of row ${i}`);
            }
          }
        }),
      perTest,
    );
  }

  if (!options.verbatim?.length) {
    throw new TypeError(
      'runnerConformanceSuite: give at least one `verbatim` case (a body that must arrive byte for byte)',
    );
  }
  for (const verbatim of options.verbatim) {
    test(
      name(`the body reaches the interpreter byte for byte: ${verbatim.name}`),
      () =>
        withRegistry(async (registry, define) => {
          define('verbatim', verbatim.body, [], verbatim.returnType);
          assertSame(await registry.eval('verbatim', []), verbatim.expected, verbatim.name);
        }),
      perTest,
    );
  }

  test(
    name('close() ends the runner; later calls fail with an ExtFnError'),
    async () => {
      const runner = await createRunner();
      const registry = new Registry({ runners: [runner] });
      registry.register({
        name: 'id',
        language: runner.language,
        body: bodies.identity,
        argTypes: [types[0]!],
        returnType: types[0]!,
        pure: false,
      });
      await registry.eval('id', [SAMPLES[types[0]!](options)[0]!]);
      await registry.close();
      await registry.close(); // twice is fine
      const error = await rejection(registry.eval('id', [SAMPLES[types[0]!](options)[0]!]));
      assert.equal(error.kind, 'Runtime');
      assert.match(error.message, /closed/);
    },
    perTest,
  );
}
