/**
 * Properties: the identity body gives back every generated value unchanged
 * (text with quotes, backslashes, newlines, `$`, `#{}` and non-BMP
 * characters; any double, exactly), and a batch gives what eval gives.
 * NUL is left out of text: R strings cannot hold it (see r.test.ts).
 */
import { Registry, sameValue, Value, type ValueType } from '@improv/extfn-core';
import fc from 'fast-check';
import { afterAll, beforeAll, expect, test } from 'vitest';
import { restrictedOk, runner, skipReason } from './helpers.js';

const nasty = fc.constantFrom(
  '"',
  "'",
  '\\',
  '\n',
  '\r\n',
  '\t',
  '$',
  // biome-ignore lint/suspicious/noTemplateCurlyInString: the text a body must see literally
  '${x}',
  '#{y}',
  '`z`',
  '%s',
  '😀',
  '𝄞',
  '\u2028',
  'é',
  '{"id":1}',
  '\\u0041',
);
const text = fc
  .array(fc.oneof(nasty, fc.string({ unit: 'grapheme', maxLength: 6 })), { maxLength: 24 })
  .map((parts) => parts.join(''))
  .filter((s) => !s.includes('\u0000'));

const arbitraries: Partial<Record<ValueType, fc.Arbitrary<Value>>> = {
  text: text.map(Value.text),
  number: fc.double().map(Value.number),
  enum: fc.integer({ min: 0, max: 4_294_967_295 }).map(Value.enum),
  datetime: fc
    .date({
      min: new Date('0001-01-01T00:00:00Z'),
      max: new Date('9999-12-31T23:59:59.999Z'),
      noInvalidDate: true,
    })
    .map((d) => Value.datetime(d)),
};

let registry: Registry;
beforeAll(() => {
  if (!restrictedOk) return;
  registry = new Registry({ runners: [runner()], timeoutMs: 10_000 });
  for (const type of Object.keys(arbitraries)) {
    registry.register({
      name: `id_${type}`,
      language: 'r',
      body: 'result <- args[[1]]',
      argTypes: [type],
      returnType: type,
    });
  }
  registry.register({
    name: 'add',
    language: 'r',
    body: 'result <- args[[1]] + args[[2]]',
    argTypes: ['number', 'number'],
    returnType: 'number',
  });
});
afterAll(() => registry?.close());

for (const [type, arbitrary] of Object.entries(arbitraries)) {
  test.skipIf(!restrictedOk)(
    `identity returns every generated ${type} unchanged${restrictedOk ? '' : ` (${skipReason})`}`,
    async () => {
      await fc.assert(
        fc.asyncProperty(arbitrary, async (value) => {
          const back = await registry.eval(`id_${type}`, [value], { cache: false });
          expect(
            sameValue(back, value),
            `${JSON.stringify(value)} came back as ${JSON.stringify(back)}`,
          ).toBe(true);
        }),
        { numRuns: 200 },
      );
      const values = fc.sample(arbitrary, 2_000);
      const batch = await registry.evalBatch(
        `id_${type}`,
        values.map((v) => [v]),
      );
      batch.forEach((back, i) => {
        expect(sameValue(back as Value, values[i]!), `row ${i}: ${JSON.stringify(values[i])}`).toBe(
          true,
        );
      });
    },
  );
}

test.skipIf(!restrictedOk)(
  `a batch of sums equals per-row eval and JavaScript's own sum${restrictedOk ? '' : ` (${skipReason})`}`,
  async () => {
    const pairs = fc.sample(fc.tuple(fc.double(), fc.double()), 3_000);
    const batch = await registry.evalBatch(
      'add',
      pairs.map(([a, b]) => [Value.number(a), Value.number(b)]),
    );
    pairs.forEach(([a, b], i) => {
      expect(sameValue(batch[i] as Value, Value.number(a + b)), `row ${i}`).toBe(true);
    });
    for (const [a, b] of pairs.slice(0, 20)) {
      expect(
        await registry.eval('add', [Value.number(a), Value.number(b)], { cache: false }),
      ).toEqual(Value.number(a + b));
    }
  },
);
