/**
 * Kit topic "columns": `evalColumns` gives what `evalBatch` gives, special
 * numbers, failing and hanging rows included, and reaches the runner's own
 * `callColumns` when it has one (core's fallback would hide a broken one).
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import { type Column, newColumn, readCell, writeCell } from '../typed-columns.js';
import { Value as V, type Value, type ValueType } from '../value.js';
import {
  assertSame,
  type ConformanceBodies,
  type CreateRunner,
  kit,
  type SuiteOptions,
  show,
  type TestFunction,
} from './harness.js';
import { SAMPLES } from './samples.js';

export interface ColumnsOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'add' | 'mixedBatch' | 'identity'>;
  /** Text values with NUL characters are supported (default true). */
  textNul?: boolean;
  /** Fraction digits of seconds a datetime keeps (default 3). */
  datetimeDigits?: 0 | 3 | 6 | 9;
  /** Deadline for the hanging row (default 1 000 ms). */
  loopTimeoutMs?: number;
}

export function columnsSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: ColumnsOptions,
): void {
  const k = kit(test, createRunner, options);
  const { bodies } = options;
  const samples = { ...options, loneSurrogates: !options.unsupported?.loneSurrogates };

  for (const type of k.types) {
    test(
      k.name(
        `typed ${type} columns give what evalBatch and eval give; error cells in are skipped and given back`,
      ),
      () =>
        k.withRegistry(async (registry, define, counts) => {
          define(`identity_${type}`, bodies.identity, [type], type);
          const fn = registry.get(`identity_${type}`)!;
          // A nanosecond column holds the years 1677–2262: the samples it can hold.
          const values = SAMPLES[type](samples).filter((value) =>
            writeCell(newColumn(type, 1), 0, value),
          );
          const column = newColumn(type, values.length + 1);
          for (let i = 0; i < values.length; i++) writeCell(column, i, values[i]!);
          const given = ExtFnError.runtime('upstream', 'an error cell');
          const before = counts.rows();
          const typedBefore = counts.typedColumnCalls();
          const out = await registry.evalColumns<Column>(`identity_${type}`, [column], {
            errors: new Map([[values.length, given]]),
          });
          assert.equal(counts.rows() - before, values.length, 'the error cell was evaluated');
          assert.equal(out.errors.get(values.length), given, 'the error cell did not come back');
          const whole = await registry.evalColumns<Column>(`identity_${type}`, [
            column.slice(0, values.length) as Column,
          ]);
          // With an error cell in (the other rows compacted) and without, the columns go to
          // the runner's own typed path where it has one (all-number functions: callColumns).
          if (counts.hasTypedColumns && type !== 'number') {
            assert.equal(
              counts.typedColumnCalls() - typedBefore,
              2,
              `evalColumns did not reach ${registry.languages[0]}'s own callTypedColumns both times`,
            );
          }
          const rows = values.map((_, i) => [readCell(fn, [column], 0, i) as Value]);
          const batch = await registry.evalBatch(`identity_${type}`, rows);
          for (let i = 0; i < values.length; i++) {
            const single = await registry.eval(`identity_${type}`, rows[i]!).catch((e) => e);
            for (const [how, got] of [
              ['with an error cell', out],
              ['without', whole],
            ] as const) {
              const error = got.errors.get(i);
              const cell = error ?? readCell(fn, [got.values], 0, i);
              for (const [what, other] of [
                ['evalBatch', batch[i]!],
                ['eval', single],
              ] as const) {
                if (ExtFnError.isInstance(other)) {
                  assert.equal(error?.message, other.message, `row ${i} (${how}) against ${what}`);
                } else {
                  assert.equal(
                    error,
                    undefined,
                    `row ${i} (${how}): ${show(error)} in columns only`,
                  );
                  assertSame(cell as Value, other, `row ${i} (${how}) against ${what}`);
                }
              }
            }
          }
        }),
      k.perTest,
    );
  }
  for (const type of k.types) {
    // The identity body with another return type: rows fail on the runner's
    // side (or convert, where its language does): the error cells and values
    // that come out must be those evalBatch and eval give.
    const returnType: ValueType = type === 'number' || type === 'enum' ? 'text' : 'number';
    if (!k.types.includes(returnType)) continue;
    test(
      k.name(
        `typed ${type} columns with a ${returnType} result give each row what evalBatch and eval give, errors included`,
      ),
      () =>
        k.withRegistry(async (registry, define, counts) => {
          define(`misfit_${type}`, bodies.identity, [type], returnType);
          const fn = registry.get(`misfit_${type}`)!;
          const values = SAMPLES[type](samples).filter((value) =>
            writeCell(newColumn(type, 1), 0, value),
          );
          const column = newColumn(type, values.length);
          for (let i = 0; i < values.length; i++) writeCell(column, i, values[i]!);
          const typedBefore = counts.typedColumnCalls();
          const out = await registry.evalColumns<Column>(`misfit_${type}`, [column]);
          if (counts.hasTypedColumns) {
            assert.equal(
              counts.typedColumnCalls() - typedBefore,
              1,
              `evalColumns did not reach ${registry.languages[0]}'s own callTypedColumns`,
            );
          }
          const rows = values.map((_, i) => [readCell(fn, [column], 0, i) as Value]);
          const batch = await registry.evalBatch(`misfit_${type}`, rows);
          const resultFn = { ...fn, argTypes: [returnType] };
          for (let i = 0; i < values.length; i++) {
            const single = await registry.eval(`misfit_${type}`, rows[i]!).catch((e) => e);
            const error = out.errors.get(i);
            const cell = error ?? readCell(resultFn, [out.values], 0, i);
            for (const [what, got] of [
              ['evalColumns', cell],
              ['evalBatch', batch[i]],
            ] as const) {
              if (ExtFnError.isInstance(single) || ExtFnError.isInstance(got)) {
                const message = (x: unknown) => (ExtFnError.isInstance(x) ? x.message : show(x));
                assert.equal(message(got), message(single), `row ${i}: ${what} against eval`);
              } else {
                assertSame(got as Value, single, `row ${i}: ${what} against eval`);
              }
            }
          }
        }),
      k.perTest,
    );
  }
  if (!k.types.includes('number')) return; // the rest is about number columns
  const loopMs = options.loopTimeoutMs ?? 1_000;

  test(
    k.name('evalColumns gives what evalBatch gives, special numbers included'),
    () =>
      k.withRegistry(async (registry, define, counts) => {
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
        const runner = registry.languages[0]!;
        const columns = await registry.evalColumns('add', [
          Float64Array.from(a),
          Float64Array.from(b),
        ]);
        const columnCalls = counts.columnCalls();
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
        if (counts.hasColumns) {
          assert.equal(columnCalls, 1, `evalColumns did not reach ${runner}'s own callColumns`);
        }
      }),
    k.perTest,
  );

  if (!bodies.mixedBatch) {
    k.skip(
      'evalColumns gives failing and hanging rows their own errors',
      'no bodies.mixedBatch given',
    );
    return;
  }
  const body = bodies.mixedBatch;
  test(
    k.name('evalColumns gives failing and hanging rows their own errors'),
    () =>
      k.withRegistry(async (registry, define) => {
        define('mixed', body, ['number'], 'number');
        const inputs = [1, -1, 13, 2, -3, 0.5];
        const out = await registry.evalColumns('mixed', [Float64Array.from(inputs)], {
          timeoutMs: loopMs,
        });
        assert.equal(out.values.length, inputs.length);
        inputs.forEach((x, i) => {
          const error = out.errors.get(i);
          if (x === 13) assert.equal(error?.kind, 'Timeout', `row ${i} (13): ${show(error)}`);
          else if (x < 0) {
            assert.equal(
              error?.kind,
              'Runtime',
              `row ${i} (${x}): expected its error, got ${show(error)}`,
            );
            assert.match(error.message, /nope/);
            assert.ok(Number.isNaN(out.values[i]), `row ${i}: a failed row reads NaN`);
          } else {
            assert.equal(error, undefined, `row ${i} (${x}): ${show(error)}`);
            assert.equal(out.values[i], 2 * x, `row ${i}`);
          }
        });
      }),
    k.perTest,
  );
}
