/** Wire JSON (`json.ts`, `value-schema.ts`): every value survives the wire, the engine's fixture loads and writes back identically, and bad values say what was wrong. */
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import {
  decodeValue,
  ExtFnError,
  encodeValue,
  externalFnToEngineJson,
  parseExternalFns,
  sameValue,
  Value as V,
  type Value,
  type ValueType,
  valueFromEngineJson,
  valueFromJson,
  valueToEngineJson,
  valueToJson,
} from '../src/index.js';

const fixture = JSON.parse(
  readFileSync(new URL('./fixtures/engine-serde.json', import.meta.url), 'utf8'),
);

/** Through JSON text, as a file or a pipe would carry it. */
const viaText = (json: unknown) => JSON.parse(JSON.stringify(json));

const samples: Value[] = [
  V.number(5),
  V.number(-0),
  V.number(Number.NaN),
  V.number(Infinity),
  V.number(-Infinity),
  V.number(1e-300),
  V.number(5e-324),
  V.number(Number.MAX_VALUE),
  V.boolean(true),
  V.text('Résumé ✓ "quoted" \\ back\nslash \u0000 𝄞'),
  V.datetime('2025-03-31T23:59:59.123456789Z'),
  V.datetime('1969-07-20T20:17:40Z'),
  V.datetime('-000001-01-01T00:00:00Z'.replace('-000001', '0001')),
  V.enum(0),
  V.enum(4294967295),
];

describe('wire JSON (what runners receive)', () => {
  test.each(samples.map((v) => [JSON.stringify(encodeValue(v)), v] as const))(
    '%s round-trips',
    (_, value) => {
      const back = valueFromJson(viaText(valueToJson(value)), value.type as ValueType);
      expect(sameValue(back, value)).toBe(true);
    },
  );

  test('special numbers travel as strings JSON can hold', () => {
    expect(valueToJson(V.number(Number.NaN))).toBe('NaN');
    expect(valueToJson(V.number(-0))).toBe('-0');
    expect(valueToJson(V.number(-Infinity))).toBe('-Infinity');
    expect(valueToJson(V.datetime('2025-03-31T23:59:59.120Z'))).toBe('2025-03-31T23:59:59.12Z');
  });

  test('valueFromJson checks the declared type and names expected and received', () => {
    const cases: [unknown, ValueType, RegExp][] = [
      ['5', 'number', /result expected number, got string "5"/],
      [true, 'number', /expected number, got boolean/],
      [1, 'boolean', /expected boolean, got number 1/],
      [null, 'text', /expected text, got null/],
      ['2025-01-01T00:00:00', 'datetime', /not an ISO-8601 instant/],
      [-1, 'enum', /enum is an integer in \[0, 4294967295\]/],
      [2 ** 32, 'enum', /expected enum/],
      [1.5, 'enum', /expected enum/],
    ];
    for (const [json, type, message] of cases) {
      let error: unknown;
      try {
        valueFromJson(json, type, 'f');
      } catch (e) {
        error = e;
      }
      expect(ExtFnError.isInstance(error), `${JSON.stringify(json)} as ${type}`).toBe(true);
      expect((error as ExtFnError).kind).toBe('Runtime');
      expect((error as ExtFnError).message).toMatch(/^function f: /);
      expect((error as ExtFnError).message).toMatch(message);
    }
  });

  test('property: every number, text, datetime and enum survives the wire', () => {
    const value = fc.oneof(
      fc.double().map(V.number),
      fc.string({ unit: 'grapheme' }).map(V.text),
      fc.string({ unit: 'binary' }).map(V.text),
      fc
        .tuple(
          fc.date({
            min: new Date('0001-01-01T00:00:00Z'),
            max: new Date('9999-12-31T23:59:59Z'),
            noInvalidDate: true,
          }),
          fc.integer({ min: 0, max: 999_999 }),
        )
        .map(([d, ns]) => V.datetime(d, ns)),
      fc.integer({ min: 0, max: 4294967295 }).map(V.enum),
      fc.boolean().map(V.boolean),
    );
    fc.assert(
      fc.property(value, (v) => {
        const back = valueFromJson(viaText(valueToJson(v)), v.type as ValueType);
        return sameValue(back, v) && sameValue(decodeValue(viaText(encodeValue(v))), v);
      }),
      { numRuns: 2000 },
    );
  });
});

describe("the Rust engine's serde JSON", () => {
  test('every value in the fixture loads and writes back identically', () => {
    for (const json of fixture.values) {
      const value = valueFromEngineJson(json);
      const back = valueToEngineJson(value);
      // serde writes 5.0 as 5 once parsed; compare as parsed JSON.
      expect(back).toEqual(json);
      expect(decodeValue(json)).toEqual(value);
    }
  });

  test('fixture values have the expected meaning', () => {
    const [five, negZero, tiny, yes, text, stamp, moon, e0, eMax, tm, div, custom] =
      fixture.values.map(valueFromEngineJson);
    expect(five).toEqual(V.number(5));
    expect(Object.is(negZero.value, -0)).toBe(true);
    expect(tiny.value).toBe(1e-300);
    expect(yes).toEqual(V.boolean(true));
    expect(text.value).toBe('Résumé ✓ "quoted" \\ back\nslash');
    expect(stamp.nanos).toBe(456789);
    expect(moon.value.toISOString()).toBe('1969-07-20T20:17:40.000Z');
    expect(e0).toEqual(V.enum(0));
    expect(eMax).toEqual(V.enum(4294967295));
    expect(tm).toEqual(V.error('TypeMismatch'));
    expect(div).toEqual(V.error('DivisionByZero', undefined, 100));
    expect(custom).toEqual(V.error('Custom', 'external function timed out after 5s', 200));
  });

  test('every descriptor in the fixture parses and writes back identically', () => {
    const fns = parseExternalFns(fixture.external_fns);
    expect(fns.map((f) => f.name)).toEqual([
      'hypot',
      'hyp_r',
      'add_jl',
      'add_pure',
      'double',
      'stamp',
    ]);
    expect(fns.map((f) => f.language)).toEqual(['python', 'r', 'julia', 'pure', 'wasm', 'python']);
    expect(fns[5]).toEqual({
      name: 'stamp',
      language: 'python',
      body: "result = args[0].isoformat() + ' / ' + str(args[1])",
      argTypes: ['datetime', 'enum'],
      returnType: 'text',
      pure: false,
    });
    expect(fns[2]!.body).toBe('    result = args[1] + args[2]');
    for (const fn of fns) expect(externalFnToEngineJson(fn)).toEqual(fixture.external_fns[fn.name]);
  });

  test('bad engine values say what was wrong', () => {
    expect(() => valueFromEngineJson({ Number: 1, Text: 'a' })).toThrow(/exactly one key/);
    expect(() => valueFromEngineJson({ Float: 1 })).toThrow(/unknown engine value tag "Float"/);
    expect(() => valueFromEngineJson({ Enum: -1 })).toThrow(/Enum: result expected enum/);
    expect(() => valueFromEngineJson({ Error: { kind: 'Oops' } })).toThrow(
      /error.kind must be one of/,
    );
    expect(() => decodeValue({ type: 'money', value: 1 })).toThrow(/value.type must be/);
    expect(() => decodeValue(5)).toThrow(/must be an object, got number 5/);
  });
});

test('the fixture shipped in @improv/extfn-core/testing is the engine file, -0 included', async () => {
  const { engineSerdeFixture } = await import('../src/testing/index.js');
  expect(engineSerdeFixture).toEqual(fixture);
  expect(Object.is(engineSerdeFixture.values[1].Number, -0)).toBe(true);
});

describe('zod value schemas', () => {
  test('read both forms into the same Value', async () => {
    const { valueSchema, engineValueSchema, encodedValueSchema } = await import(
      '../src/schemas.js'
    );
    for (const json of fixture.values) {
      const value = valueFromEngineJson(json);
      expect(engineValueSchema.parse(json)).toEqual(value);
      expect(valueSchema.parse(json)).toEqual(value);
      expect(encodedValueSchema.parse(viaText(encodeValue(value)))).toEqual(value);
    }
  });

  test('name the path of what is wrong', async () => {
    const { valueSchema, encodedValueSchema } = await import('../src/schemas.js');
    const bad = encodedValueSchema.safeParse({ type: 'enum', value: -1 });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(['value']);
    expect(
      encodedValueSchema.safeParse({ type: 'datetime', value: '2025-02-30T00:00:00Z' }).success,
    ).toBe(false);
    expect(valueSchema.safeParse({ Float: 1 }).success).toBe(false);
    expect(
      valueSchema.safeParse({ Error: { kind: { Custom: 3 }, source_measure: null } }).success,
    ).toBe(false);
  });
});
