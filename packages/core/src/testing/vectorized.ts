/**
 * Kit topic "vectorized": a `vectorized: true` function keeps per-cell
 * semantics. `evalBatch` and `evalColumns` of it give every row exactly what
 * `eval` (a column of length one) gives: a missing cell in the result is that
 * row's error, a chunk the body raises for is re-run row by row so only the
 * guilty rows fail, and a hanging chunk costs only the row that hangs.
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import { Value as V, type Value } from '../value.js';
import {
  assertSameOutcome,
  type ConformanceBodies,
  type CreateRunner,
  kit,
  type SuiteOptions,
  settle,
  show,
  type TestFunction,
} from './harness.js';

export interface VectorizedOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'vectorizedMixed'>;
  /** Deadline for the hanging row (default 1 000 ms). */
  loopTimeoutMs?: number;
}

/** Inputs of the mixed check: good rows, a missing cell (7), failing rows (< 0), a hanging row (13). */
const INPUTS = [1, 7, -1, 2, 3.5, 13, -2, 4, 0];

/** What a correct runner gives `vectorizedMixed` on one row. */
function expectOutcome(x: number, got: Value | ExtFnError, where: string): void {
  if (x >= 0 && x !== 7 && x !== 13) {
    if (ExtFnError.isInstance(got) || got.type !== 'number' || got.value !== 2 * x) {
      assert.fail(`${where} (${x}): expected number ${2 * x}, got ${show(got)}`);
    }
    return;
  }
  if (!ExtFnError.isInstance(got))
    assert.fail(`${where} (${x}): expected an error, got ${show(got)}`);
  const expected = x === 13 ? 'Timeout' : 'Runtime';
  assert.equal(got.kind, expected, `${where} (${x}): ${got.message}`);
}

export function vectorizedSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: VectorizedOptions,
): void {
  const k = kit(test, createRunner, options);
  if (!k.types.includes('number')) return;
  const what =
    'vectorized: evalBatch and evalColumns give each row what eval gives it (missing cells, raising and hanging chunks), or core refuses them for a runner without vectorized functions';
  if (options.unsupported?.vectorized !== undefined) {
    k.skip(what, options.unsupported.vectorized);
    return;
  }
  const body = options.bodies.vectorizedMixed;
  const timeoutMs = options.loopTimeoutMs ?? 1_000;
  test(
    k.name(what),
    () =>
      k.withRegistry(async (registry, define, counts) => {
        if (!counts.vectorized) {
          // A runner without the capability never sees a vectorized function.
          define('vector', body ?? '', ['number'], 'number', false, true);
          const refused = (e: unknown) =>
            ExtFnError.isInstance(e) && /no vectorized functions/.test(e.message);
          await assert.rejects(registry.eval('vector', [V.number(1)]), refused);
          await assert.rejects(registry.evalBatch('vector', [[V.number(1)]]), refused);
          await assert.rejects(registry.evalColumns('vector', [Float64Array.of(1)]), refused);
          assert.equal(counts.rows(), 0, 'a refused vectorized function reached the runner');
          return;
        }
        if (!body) {
          assert.fail(
            'the runner claims vectorized functions: give bodies.vectorizedMixed, or unsupported.vectorized with the reason',
          );
        }
        define('mixed', body, ['number'], 'number', false, true);
        const rows = INPUTS.map((x) => [V.number(x)]);
        const batch = await registry.evalBatch('mixed', rows, { timeoutMs });
        const columns = await registry.evalColumns('mixed', [Float64Array.from(INPUTS)], {
          timeoutMs,
        });
        assert.equal(batch.length, rows.length);
        for (let i = 0; i < rows.length; i++) {
          const x = INPUTS[i]!;
          const one = await settle(registry.eval('mixed', rows[i]!, { timeoutMs }));
          expectOutcome(x, one, `eval of row ${i}`);
          assertSameOutcome(batch[i], one, `evalBatch row ${i}`);
          const error = columns.errors.get(i);
          const cell: Value | ExtFnError = error ?? V.number(columns.values[i] as number);
          assertSameOutcome(cell, one, `evalColumns row ${i}`);
        }
      }),
    k.perTest,
  );
}
