/**
 * Kit topic "values": every sample of every declared type comes back
 * unchanged (lone surrogates, NUL, special numbers, nanoseconds), numbers
 * add, large results arrive whole, and bodies reach the interpreter byte for
 * byte.
 */
import { strict as assert } from 'node:assert';
import { Value as V, type ValueType } from '../value.js';
import {
  assertSame,
  type ConformanceBodies,
  type CreateRunner,
  kit,
  type SuiteOptions,
  show,
  type TestFunction,
  type VerbatimCase,
} from './harness.js';
import { LONE_SURROGATES, SAMPLES } from './samples.js';

export interface ValuesOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'identity' | 'add' | 'largeResult'>;
  /** Bodies that must reach the interpreter byte for byte: at least one. */
  verbatim: readonly VerbatimCase[];
  /** Text values with NUL characters are supported (default true). */
  textNul?: boolean;
  /** Fraction digits of seconds a datetime keeps (default 3). */
  datetimeDigits?: 0 | 3 | 6 | 9;
}

export function valuesSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: ValuesOptions,
): void {
  if (!options.verbatim?.length) {
    throw new TypeError(
      'runnerConformanceSuite: give at least one `verbatim` case (a body that must arrive byte for byte)',
    );
  }
  const k = kit(test, createRunner, options);
  const { bodies } = options;
  const samples = { ...options, loneSurrogates: !options.unsupported?.loneSurrogates };

  for (const type of k.types) {
    test(
      k.name(`identity returns every ${type} sample unchanged (eval and evalBatch)`),
      () =>
        k.withRegistry(async (registry, define) => {
          define(`identity_${type}`, bodies.identity, [type], type);
          const all = SAMPLES[type](samples);
          for (const sample of all) {
            const result = await registry.eval(`identity_${type}`, [sample]);
            assertSame(result, sample, `identity of ${show(sample)}`);
          }
          // A batch may take another path (binary columns): every sample must survive it too.
          const batch = await registry.evalBatch(
            `identity_${type}`,
            all.map((sample) => [sample]),
          );
          for (let i = 0; i < all.length; i++) {
            assertSame(batch[i], all[i]!, `evalBatch of ${show(all[i])}`);
          }
        }),
      k.perTest,
    );
  }

  if (k.types.includes('text')) {
    const what = 'lone surrogates in text arguments come back unchanged (eval and evalBatch)';
    const reason = options.unsupported?.loneSurrogates;
    if (reason) k.skip(what, reason);
    else {
      test(
        k.name(what),
        () =>
          k.withRegistry(async (registry, define) => {
            define('identity_surrogates', bodies.identity, ['text'], 'text');
            const values = LONE_SURROGATES.map(V.text);
            for (const value of values) {
              assertSame(await registry.eval('identity_surrogates', [value]), value, 'eval');
            }
            const batch = await registry.evalBatch(
              'identity_surrogates',
              values.map((v) => [v]),
            );
            values.forEach((value, i) => {
              assertSame(batch[i], value, `evalBatch row ${i}`);
            });
          }),
        k.perTest,
      );
    }
  }

  if (k.types.includes('number')) {
    test(
      k.name('adds two numbers (2 + 3 = 5)'),
      () =>
        k.withRegistry(async (registry, define) => {
          define('add', bodies.add, ['number', 'number'], 'number', true);
          assertSame(
            await registry.eval('add', [V.number(2), V.number(3)]),
            V.number(5),
            'add(2, 3)',
          );
        }),
      k.perTest,
    );
  }

  if (bodies.largeResult && k.types.includes('text')) {
    const body = bodies.largeResult;
    test(
      k.name('a 200 000-character text result comes back whole'),
      () =>
        k.withRegistry(async (registry, define) => {
          define('big', body, [], 'text');
          const result = await registry.eval('big', []);
          assert.equal(result.type, 'text');
          assert.equal((result as { value: string }).value, 'x'.repeat(200_000));
        }),
      k.perTest,
    );
  }

  for (const verbatim of options.verbatim) {
    test(
      k.name(`the body reaches the interpreter byte for byte: ${verbatim.name}`),
      () =>
        k.withRegistry(async (registry, define) => {
          define('verbatim', verbatim.body, [], verbatim.returnType as ValueType);
          assertSame(await registry.eval('verbatim', []), verbatim.expected, verbatim.name);
        }),
      k.perTest,
    );
  }
}
