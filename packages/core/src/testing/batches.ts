/**
 * Kit topic "batches": `evalBatch(name, rows)[i]` is exactly what
 * `eval(name, rows[i])` gives, for good rows, rows core refuses, failing rows
 * and a hanging row (which alone gets Timeout).
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import { Value as V, type Value } from '../value.js';
import {
  assertSame,
  assertSameOutcome,
  type ConformanceBodies,
  type CreateRunner,
  kit,
  type SuiteOptions,
  settle,
  show,
  type TestFunction,
} from './harness.js';

export interface BatchesOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'add' | 'mixedBatch'>;
  /** Deadline for the hanging row (default 1 000 ms). */
  loopTimeoutMs?: number;
}

export function batchesSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: BatchesOptions,
): void {
  const k = kit(test, createRunner, options);
  if (!k.types.includes('number')) return; // every batch body works on numbers
  const { bodies } = options;

  test(
    k.name('evalBatch gives exactly what eval gives on each row'),
    () =>
      k.withRegistry(async (registry, define) => {
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
          assertSameOutcome(batch[i], await settle(registry.eval('add', rows[i]!)), `row ${i}`);
        }
      }),
    k.perTest,
  );

  if (!bodies.mixedBatch) {
    k.skip(
      'a batch with failing and hanging rows gives each row what eval gives it',
      'no bodies.mixedBatch given',
    );
    return;
  }
  const body = bodies.mixedBatch;
  const loopMs = options.loopTimeoutMs ?? 1_000;
  test(
    k.name('a batch with failing and hanging rows gives each row what eval gives it'),
    () =>
      k.withRegistry(async (registry, define) => {
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
          const single = await settle(registry.eval('mixed', rows[i]!, { timeoutMs: loopMs }));
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
    k.perTest,
  );
}
