/**
 * `callcols`, the binary columnar frame for every value type: the bytes the
 * host writes (to-driver.ts), how it reads and checks a response
 * (from-driver.ts) and refuses one of the wrong shape, the response limits,
 * which frame each row source sends (a driver without `columns: true` keeps
 * JSON), and, against a fixture driver, that malformed responses kill the
 * worker and fail as malformed frames do.
 */

import { readFileSync } from 'node:fs';
import {
  type Column,
  type ExternalFn,
  ExtFnError,
  Registry,
  type RowResult,
  Value,
  type ValueType,
} from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import type { Frame } from '../src/frames.js';
import { colsResultsInto, columnValue, ResponseShapeError, readNanos } from '../src/from-driver.js';
import { createInterpreterRunner } from '../src/index.js';
import { CHUNK_RESPONSE_CAP, responseForm, responseLimits } from '../src/response-limits.js';
import { typedColumnRows, valueRows } from '../src/row-sources.js';
import { rowsToCols, typedColumnsToCols, utf8Length, writeNanos } from '../src/to-driver.js';
import { BOOTSTRAP, hasPython, PYTHON, policy } from './helpers.js';

const fn = (argTypes: ValueType[], returnType: ValueType): ExternalFn =>
  ({ name: 'f', language: 'x', body: '', argTypes, returnType, pure: false }) as ExternalFn;

/** The payload parts joined, as the driver reads them. */
const joined = (parts: Uint8Array[]) => Buffer.concat(parts.map((p) => Buffer.from(p)));

describe('the callcols request', () => {
  test('columns follow one another in argument order, each padded to 8 bytes', () => {
    const f = fn(['number', 'boolean', 'enum', 'datetime', 'text'], 'number');
    const columns: Column[] = [
      Float64Array.from([1.5, Number.NaN, -0]),
      Uint8Array.from([1, 0, 1]),
      Uint32Array.from([0, 4_294_967_295, 7]),
      BigInt64Array.from([-(2n ** 63n), 0n, 2n ** 63n - 1n]),
      ['', 'nul:\0', '😀é'],
    ];
    const { header, payload } = typedColumnsToCols(f, columns, 0, 3);
    expect(header).toEqual({ op: 'callcols', rows: 3 });
    const bytes = joined(payload);
    let at = 0;
    expect([0, 1, 2].map((i) => bytes.readDoubleLE(at + 8 * i))).toEqual([1.5, Number.NaN, -0]);
    expect(Object.is(bytes.readDoubleLE(at + 16), -0)).toBe(true);
    at += 24;
    expect([...bytes.subarray(at, at + 8)]).toEqual([1, 0, 1, 0, 0, 0, 0, 0]);
    at += 8;
    expect([0, 1, 2].map((i) => bytes.readUInt32LE(at + 4 * i))).toEqual([0, 4_294_967_295, 7]);
    expect(bytes.readUInt32LE(at + 12)).toBe(0); // padding
    at += 16;
    expect([0, 1, 2].map((i) => bytes.readBigInt64LE(at + 8 * i))).toEqual([
      -(2n ** 63n),
      0n,
      2n ** 63n - 1n,
    ]);
    at += 24;
    const lengths = [0, 1, 2].map((i) => bytes.readUInt32LE(at + 4 * i));
    expect(lengths).toEqual([0, 5, 6]);
    expect(bytes.subarray(at + 12, at + 23).toString('utf8')).toBe('nul:\0😀é');
    expect(bytes.length).toBe(at + 24); // 12 + 11 = 23 bytes, padded to 24
  });

  test('a slice of the caller’s columns is sent as views of them, not copies', () => {
    const column = Float64Array.from({ length: 10 }, (_, i) => i);
    const { payload } = typedColumnsToCols(fn(['number'], 'number'), [column], 4, 3);
    expect(payload[0]!.buffer).toBe(column.buffer);
    expect([...new Float64Array(new Uint8Array(joined(payload)).buffer)]).toEqual([4, 5, 6]);
  });

  test('a text with a lone surrogate goes empty in the column and as itself in cells', () => {
    const { header, payload } = typedColumnsToCols(
      fn(['number', 'text'], 'text'),
      [Float64Array.from([1, 2]), ['\uD800', 'a\uDFFFb']],
      0,
      2,
    );
    expect(header.cells).toEqual({ 1: { 0: '\uD800', 1: 'a\uDFFFb' } });
    expect(JSON.stringify(header)).toContain('\\ud800');
    const bytes = joined(payload);
    expect(bytes.readUInt32LE(16)).toBe(0);
    expect(bytes.readUInt32LE(20)).toBe(0);
  });

  test('rows of Values: datetimes outside i64 nanoseconds go as cells, the ends inside as themselves', () => {
    const rows = [
      '0001-01-01T00:00:00Z',
      '1677-09-21T00:12:43.145224191Z',
      '1677-09-21T00:12:43.145224192Z',
      '2262-04-11T23:47:16.854775807Z',
      '2262-04-11T23:47:16.854775808Z',
      '9999-12-31T23:59:59.999999999Z',
    ].map((iso) => [Value.datetime(iso), Value.enum(4_294_967_295)]);
    const { header, payload } = rowsToCols(fn(['datetime', 'enum'], 'number'), rows, 0, 6);
    expect(header.cells).toEqual({
      0: {
        0: '0001-01-01T00:00:00Z',
        1: '1677-09-21T00:12:43.145224191Z',
        4: '2262-04-11T23:47:16.854775808Z',
        5: '9999-12-31T23:59:59.999999999Z',
      },
    });
    const bytes = joined(payload);
    expect(bytes.readBigInt64LE(16)).toBe(-(2n ** 63n));
    expect(bytes.readBigInt64LE(24)).toBe(2n ** 63n - 1n);
    expect(bytes.readBigInt64LE(0)).toBe(0n);
    expect(bytes.readUInt32LE(48)).toBe(4_294_967_295);
  });
});

/** A response frame: the header fields and the payload. */
function response(rows: number, payload: Buffer, extra: Record<string, unknown> = {}): Frame {
  return { header: { id: 1, rows, bytes: payload.length, ...extra }, payload };
}

const pad8 = (b: Buffer) => Buffer.concat([b, Buffer.alloc(-b.length & 7)]);
const textPayload = (texts: string[], bytes = texts.map((t) => Buffer.from(t, 'utf8'))) =>
  pad8(Buffer.concat([Buffer.from(Uint32Array.from(bytes.map((b) => b.length)).buffer), ...bytes]));

describe('UTF-8 lengths in JS', () => {
  test('utf8Length is Buffer.byteLength for well-formed texts and -1 for lone surrogates', () => {
    const units = [0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xffff, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0];
    let seed = 7;
    const wrong: string[] = [];
    for (let k = 0; k < 20_000; k++) {
      let text = '';
      const n = k % 7;
      for (let j = 0; j < n; j++) {
        seed = (seed * 48_271) % 2_147_483_647;
        text += String.fromCharCode(units[seed % units.length]!);
      }
      const wellFormed = (text as unknown as { isWellFormed(): boolean }).isWellFormed();
      const expected = wellFormed ? Buffer.byteLength(text, 'utf8') : -1;
      if (utf8Length(text) !== expected) wrong.push(JSON.stringify(text));
    }
    expect(wrong).toEqual([]);
    expect(utf8Length('\uD800')).toBe(-1);
    expect(utf8Length('😀é')).toBe(6);
  });
});

describe('datetimes as i64 nanoseconds without a BigInt per cell', () => {
  test('writeNanos and readNanos agree with BigInt arithmetic, at the ends of i64 and across 1970', () => {
    const I64_MIN = -(2n ** 63n);
    const I64_MAX = 2n ** 63n - 1n;
    const pairs: [number, number][] = [];
    for (const m of [0, -1, 1, -9_223_372_036_855, -9_223_372_036_854, 9_223_372_036_854]) {
      for (const n of [0, 1, 224_191, 224_192, 775_807, 775_808, 999_999]) pairs.push([m, n]);
    }
    let seed = 1;
    const random = () => {
      seed = (seed * 48_271) % 2_147_483_647;
      return seed / 2_147_483_647;
    };
    for (let k = 0; k < 20_000; k++) {
      pairs.push([Math.round((random() - 0.5) * 2 * 9.3e12), Math.floor(random() * 1e6)]);
    }
    const column = new BigInt64Array(1);
    const words = new Int32Array(column.buffer);
    const wrong: string[] = [];
    let outside = 0;
    for (const [m, n] of pairs) {
      const exact = BigInt(m) * 1_000_000n + BigInt(n);
      const fits = exact >= I64_MIN && exact <= I64_MAX;
      if (!fits) outside++;
      column[0] = 0n;
      const wrote = writeNanos(words, 0, m, n);
      const [backMs, backNs] = readNanos(words, 0);
      if (wrote !== fits || (fits && (column[0] !== exact || backMs !== m || backNs !== n))) {
        wrong.push(`${m} ms + ${n} ns`);
      }
    }
    expect(wrong).toEqual([]);
    expect(outside).toBeGreaterThan(10); // both sides of the range were tried
  });
});

describe('reading a callcols response', () => {
  test('every type into its column; errors and cells by row, cells checked like JSON', () => {
    const f = fn(['number'], 'text');
    const values: string[] = ['', '', '', ''];
    const out = colsResultsInto(
      f,
      response(3, textPayload(['a', '', 'nul:\0😀']), {
        errors: { 1: { type: 'ValueError', message: 'nope' }, 9: { type: 'X', message: '' } },
        cells: { 2: '\uDC00', 0: 5 },
      }),
      3,
      values,
      1,
    );
    expect(values).toEqual(['', 'a', '', 'nul:\0😀']);
    expect(out.errors.map(([i, e]) => [i, e.message])).toEqual([
      [1, 'function f: ValueError: nope'],
    ]);
    const cells = new Map(out.cells);
    expect(cells.get(2)).toEqual(Value.text('\uDC00'));
    expect((cells.get(0) as ExtFnError).message).toBe(
      'function f: result expected text, got number 5',
    );

    const dt = new BigInt64Array(2);
    colsResultsInto(
      fn([], 'datetime'),
      response(2, Buffer.from(BigInt64Array.from([-(2n ** 63n), 1n]).buffer)),
      2,
      dt,
      0,
    );
    expect(columnValue('datetime', dt, 0)).toEqual(
      Value.datetime('1677-09-21T00:12:43.145224192Z'),
    );
    expect(columnValue('datetime', dt, 1)).toEqual(Value.datetime('1970-01-01T00:00:00Z', 1));

    const flags = new Uint8Array(3);
    colsResultsInto(fn([], 'boolean'), response(3, pad8(Buffer.from([1, 0, 1]))), 3, flags, 0);
    expect(
      [0, 1, 2].map((i) => (columnValue('boolean', flags, i) as { value: boolean }).value),
    ).toEqual([true, false, true]);
    const members = new Uint32Array(1);
    const enumBytes = pad8(Buffer.from(Uint32Array.from([4_294_967_295]).buffer));
    colsResultsInto(fn([], 'enum'), response(1, enumBytes), 1, members, 0);
    expect(members[0]).toBe(4_294_967_295);
  });

  const malformed: [string, ValueType, number, Buffer, RegExp][] = [
    ['a column one byte short', 'number', 2, Buffer.alloc(15), /15 payload bytes, expected 16/],
    ['a boolean byte above 1', 'boolean', 2, pad8(Buffer.from([1, 2])), /boolean byte above 1/],
    ['padding missing', 'enum', 1, Buffer.alloc(4), /4 payload bytes, expected 8/],
    [
      'text bytes that are not UTF-8',
      'text',
      1,
      textPayload([], [Buffer.from([0x61, 0xff])]),
      /not UTF-8/,
    ],
    [
      'a character split across two strings',
      'text',
      2,
      textPayload([], [Buffer.from([0xc3]), Buffer.from([0xa9])]),
      /split inside a character/,
    ],
    [
      'lengths that do not add up to the payload',
      'text',
      1,
      pad8(Buffer.concat([Buffer.from(Uint32Array.from([9]).buffer), Buffer.from('abc')])),
      /payload bytes for 9 text bytes/,
    ],
  ];
  test.each(malformed)('%s is a malformed response', (_, type, rows, payload, why) => {
    const values = type === 'text' ? new Array<string>(rows) : undefined;
    const column =
      values ??
      (type === 'boolean'
        ? new Uint8Array(rows)
        : type === 'enum'
          ? new Uint32Array(rows)
          : new Float64Array(rows));
    const read = () => colsResultsInto(fn([], type), response(rows, payload), rows, column, 0);
    expect(read).toThrow(ResponseShapeError);
    expect(read).toThrow(why);
  });

  test('a response for another row count, or without a payload, is malformed', () => {
    const column = new Float64Array(2);
    const f = fn([], 'number');
    expect(() => colsResultsInto(f, response(1, Buffer.alloc(8)), 2, column, 0)).toThrow(
      ResponseShapeError,
    );
    expect(() => colsResultsInto(f, { header: { id: 1, rows: 2 } }, 2, column, 0)).toThrow(
      /no result column/,
    );
  });
});

describe('callcols response limits', () => {
  const MB = 1024 * 1024;
  test('fixed-width result columns may be exactly their size, texts their lengths plus the cap a row', () => {
    expect(responseForm('callcols')).toBe('cols');
    expect(responseLimits('number', 1000, MB, 'cols').payload).toBe(8000);
    expect(responseLimits('boolean', 1001, MB, 'cols').payload).toBe(1008);
    expect(responseLimits('enum', 3, MB, 'cols').payload).toBe(16);
    expect(responseLimits('datetime', 3, MB, 'cols').payload).toBe(24);
    expect(responseLimits('text', 1, MB, 'cols').payload).toBeGreaterThan(MB);
    expect(responseLimits('text', 4, 1024, 'cols').payload).toBe(4 * (4 + 1024 + 16) + 8);
    expect(responseLimits('text', 100_000, MB, 'cols').payload).toBe(CHUNK_RESPONSE_CAP);
    // cells and errors in the header are bounded as JSON results are
    expect(responseLimits('text', 8, MB, 'cols').line).toBe(
      responseLimits('text', 8, MB, 'json').line,
    );
  });
});

describe('which frame a batch sends', () => {
  const rows = [[Value.text('a')], [Value.text('b')]];
  const numberRows = [[Value.number(1)], [Value.number(2)]];
  const results: RowResult[] = [];
  test('rows: JSON without columns, callf64 for all numbers, callcols with columns', () => {
    const text = fn(['text'], 'text');
    const number = fn(['number'], 'number');
    expect(valueRows(text, rows, results, false).encode(0, 2).header.op).toBe('call');
    expect(valueRows(text, rows, results, false, false).encode(0, 2).header.op).toBe('call');
    expect(valueRows(text, rows, results, false, true).encode(0, 2).header.op).toBe('callcols');
    expect(valueRows(number, numberRows, results, true, true).encode(0, 2).header.op).toBe(
      'callf64',
    );
  });
  test('typed columns: JSON without columns, callcols with columns', () => {
    const text = fn(['text'], 'text');
    const values: string[] = ['', ''];
    const errors = new Map<number, ExtFnError>();
    expect(typedColumnRows(text, [['a', 'b']], values, errors).encode(0, 2).header.op).toBe('call');
    expect(typedColumnRows(text, [['a', 'b']], values, errors, true).encode(0, 2).header.op).toBe(
      'callcols',
    );
  });
});

describe('evalBatch number results over callf64 are made when the batch is scheduled', () => {
  const number = fn(['number'], 'number');
  const rows = [1, 2, 3, 4].map((x) => [Value.number(x)]);
  const f64Response = (numbers: number[], errors?: Record<string, unknown>): Frame => ({
    header: { ok: true, rows: numbers.length, ...(errors ? { errors } : {}) },
    payload: Buffer.from(new Float64Array(numbers).buffer),
  });

  test('a malformed response fails when it comes, not at finish', () => {
    const source = valueRows(number, rows, [], true, false);
    expect(() => source.decode(f64Response([1]), 0, 2)).toThrow(ResponseShapeError);
  });

  test('held until finish; a row failed after its chunk was read keeps its failure; errors land', () => {
    const results: RowResult[] = new Array(4);
    const source = valueRows(number, rows, results, true, false);
    source.decode(f64Response([10, 20]), 0, 2);
    source.decode(f64Response([30, 0], { 1: { type: 'ValueError', message: 'bad' } }), 2, 2);
    const failure = ExtFnError.runtime('f', 'failed later');
    source.fail(0, failure);
    expect(results[1]).toBeUndefined(); // nothing made during the batch
    source.finish?.();
    expect(results.slice(0, 3)).toEqual([failure, Value.number(20), Value.number(30)]);
    expect((results[3] as ExtFnError).message).toMatch(/ValueError: bad/);
  });

  test('a failure with nothing held lands at once', () => {
    const results: RowResult[] = new Array(4);
    const source = valueRows(number, rows, results, true, false);
    const failure = ExtFnError.runtime('f', 'now');
    source.fail(2, failure);
    expect(results[2]).toBe(failure);
  });
});

const COLS_DRIVER = readFileSync(new URL('./fixtures/cols-driver.py', import.meta.url), 'utf8');
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function colsRegistry(bodies: string[], columns = true) {
  const runner = createInterpreterRunner(
    {
      language: 'cols',
      packageName: '@improv/extfn-cols-fixture',
      resolveInterpreter: async () => (hasPython ? { path: PYTHON } : undefined),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: COLS_DRIVER,
      columns,
    },
    { policy, maxWorkers: 1 },
  );
  const registry = new Registry({ runners: [runner], timeoutMs: 5_000 });
  for (const body of bodies) {
    registry.register({
      name: body.replace('!', '_always'),
      language: 'cols',
      body,
      argTypes: ['text'],
      returnType: 'text',
      pure: false,
    });
  }
  cleanups.push(() => registry.close());
  return { registry, runner };
}

const texts = Array.from({ length: 40 }, (_, i) => `row ${i} é`);
const textRows = texts.map((t) => [Value.text(t)]);

describe.skipIf(!hasPython)('callcols against a driver (skipped: no /usr/bin/python3)', () => {
  test('a driver with columns gets callcols for batches and typed columns; without, JSON call', async () => {
    const on = colsRegistry(['op']).registry;
    expect(
      (await on.evalBatch('op', textRows)).every(
        (r) => (r as { value: unknown }).value === 'callcols',
      ),
    ).toBe(true);
    expect((await on.evalColumns('op', [texts])).values).toEqual(texts.map(() => 'callcols'));
    expect(await on.eval('op', [Value.text('x')])).toEqual(Value.text('call'));
    const off = colsRegistry(['op'], false).registry;
    expect(
      (await off.evalBatch('op', textRows)).every(
        (r) => (r as { value: unknown }).value === 'call',
      ),
    ).toBe(true);
    expect((await off.evalColumns('op', [texts])).values).toEqual(texts.map(() => 'call'));
  });

  test('texts, lone surrogates included, go through callcols and back', async () => {
    const { registry } = colsRegistry(['echo']);
    const odd = ['', 'nul:\0', '😀', '\uD800', 'a\uDFFFb', ...texts];
    expect((await registry.evalColumns('echo', [odd])).values).toEqual(odd);
    expect(
      await registry.evalBatch(
        'echo',
        odd.map((t) => [Value.text(t)]),
      ),
    ).toEqual(odd.map((t) => Value.text(t)));
  });

  test.each(['short', 'badutf8', 'split', 'oversize'])(
    'a chunk answered with %s kills the worker; its rows are re-run one by one and get their values',
    async (body) => {
      const { registry, runner } = colsRegistry([body]);
      const { values, errors } = await registry.evalColumns(body, [texts]);
      expect([...errors.values()].map((e) => e.message)).toEqual([]);
      expect(values).toEqual(texts);
      expect(runner.stats().killed).toBeGreaterThan(0);
    },
  );

  test.each([
    ['short!', /malformed callcols response for 1 rows \(\d+ payload bytes for \d+ text bytes\)/],
    ['badutf8!', /text that is not UTF-8/],
    ['oversize!', /output too large/],
  ])('a single row answered with %s fails as a malformed frame does', async (body, why) => {
    const { registry, runner } = colsRegistry([body]);
    const name = body.replace('!', '_always');
    const batch = await registry.evalBatch(name, textRows.slice(0, 3));
    for (const result of batch) {
      expect(ExtFnError.isInstance(result)).toBe(true);
      expect((result as ExtFnError).kind).toBe('Runtime');
      expect((result as ExtFnError).message).toMatch(why);
    }
    expect(runner.stats().killed).toBeGreaterThanOrEqual(3);
  });
});
