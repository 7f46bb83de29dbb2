/**
 * Property: the identity body gives back every generated value unchanged,
 * whatever characters a text holds. Warm workers, Restricted sandbox.
 */
import { Registry, sameValue, Value, type ValueType } from '@improv/extfn-core';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { noRestricted, restrictedOk, runner } from './helpers.js';

const nasty = fc.constantFrom(
  '"',
  "'",
  '\\',
  '\n',
  '\r\n',
  '\u0000',
  '\t',
  '"""',
  "'''",
  '\\x41',
  '😀',
  '𝄞',
  '\u2028',
  '\ud800',
  '{"id":1}',
);
const text = fc
  .array(fc.oneof(nasty, fc.string({ unit: 'binary', maxLength: 8 })), { maxLength: 24 })
  .map((parts) => parts.join(''));

const arbitraries: Record<Exclude<ValueType, 'boolean'>, fc.Arbitrary<Value>> = {
  text: text.map(Value.text),
  number: fc.double().map(Value.number),
  datetime: fc
    .date({
      min: new Date('0001-01-01T00:00:00Z'),
      max: new Date('9999-12-31T23:59:59.999Z'),
      noInvalidDate: true,
    })
    .map((d) => Value.datetime(d)),
  enum: fc.integer({ min: 0, max: 4_294_967_295 }).map(Value.enum),
};

let registry: Registry;
beforeAll(() => {
  registry = new Registry({ runners: [runner({ policy: 'restricted' })], timeoutMs: 10_000 });
  for (const type of Object.keys(arbitraries)) {
    registry.register({
      name: `id_${type}`,
      language: 'python',
      body: 'result = args[0]',
      argTypes: [type],
      returnType: type,
    });
  }
});
afterAll(() => registry?.close());

for (const [type, arbitrary] of Object.entries(arbitraries)) {
  test.skipIf(!restrictedOk)(
    `identity returns every generated ${type} unchanged${restrictedOk ? '' : ` (${noRestricted})`}`,
    async () => {
      await fc.assert(
        fc.asyncProperty(arbitrary, async (value) => {
          const back = await registry.eval(`id_${type}`, [value]);
          expect(
            sameValue(back, value),
            `${JSON.stringify(value)} came back as ${JSON.stringify(back)}`,
          ).toBe(true);
        }),
        { numRuns: 300 },
      );
      // The same values through a batch (JSON frames, or f64 columns for numbers).
      const values = fc.sample(arbitrary, 500);
      const batch = await registry.evalBatch(
        `id_${type}`,
        values.map((v) => [v]),
      );
      for (let i = 0; i < batch.length; i++) {
        expect(sameValue(batch[i] as Value, values[i]!), `row ${i}`).toBe(true);
      }
    },
  );
}
