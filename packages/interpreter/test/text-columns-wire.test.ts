/**
 * Text columns on the callcols wire, host side: a request with a text
 * column is one buffer (texts written straight into it, other columns
 * copied), whatever mix of ASCII, non-ASCII, empty and lone-surrogate texts
 * a chunk holds; reading a text result column gives back exactly the strings
 * written, and bytes that are not UTF-8 are a malformed response, never
 * decoded with U+FFFD. Results go into evalBatch's rows as Values directly.
 */
import {
  type Column,
  type ExternalFn,
  type ExtFnError,
  type RowResult,
  Value,
  type ValueType,
  valueToJson,
} from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import type { Frame } from '../src/frames.js';
import {
  colsResultsInto,
  colsValuesInto,
  columnValuesInto,
  ResponseShapeError,
} from '../src/from-driver.js';
import { typedColumnRows, valueRows } from '../src/row-sources.js';
import { rowsToCols, typedColumnsToCols } from '../src/to-driver.js';

const fn = (argTypes: ValueType[], returnType: ValueType): ExternalFn =>
  ({ name: 'f', language: 'x', body: '', argTypes, returnType, pure: false }) as ExternalFn;

/** The text column at `at` of a request payload: its lengths and its bytes, and where the next column starts. */
function textColumnAt(bytes: Buffer, at: number, rows: number) {
  const lengths = Array.from({ length: rows }, (_, i) => bytes.readUInt32LE(at + 4 * i));
  const total = lengths.reduce((a, b) => a + b, 0);
  const start = at + 4 * rows;
  return {
    lengths,
    text: bytes.subarray(start, start + total),
    end: start + total,
    next: (start + total + 7) & ~7,
  };
}

/** A text column as a driver would answer it (lengths, bytes, padding), in a response frame. */
function textResponse(rows: number, parts: Buffer[]): Frame {
  const body = Buffer.concat([
    Buffer.from(Uint32Array.from(parts.map((p) => p.length)).buffer),
    ...parts,
  ]);
  const payload = Buffer.concat([body, Buffer.alloc(-body.length & 7)]);
  return { header: { id: 1, rows, bytes: payload.length }, payload };
}

const CHUNKS: [string, string[]][] = [
  ['ASCII only', ['row1', 'a b', '', 'nul:\0', '~'.repeat(300)]],
  ['non-ASCII only', ['-é1', 'ÉÀ', '日本語', '😀', 'ß']],
  ['ASCII but one non-ASCII row', ['row0', 'row1', 'row2-é', 'row3', '']],
  ['empty strings only', ['', '', '']],
];

/** Encodes `texts` chunk after chunk (one kept buffer): each request holds its own rows only. */
function expectChunks(texts: string[], ranges: [start: number, count: number][]): void {
  for (const [start, count] of ranges) {
    const { payload } = typedColumnsToCols(fn(['text'], 'text'), [texts], start, count);
    const column = textColumnAt(Buffer.from(payload[0]!), 0, count);
    const want = texts.slice(start, start + count);
    expect(column.lengths).toEqual(want.map((t) => Buffer.byteLength(t)));
    expect(column.text.toString()).toBe(want.join(''));
  }
}

describe('a text request is one buffer', () => {
  test.each(CHUNKS)(
    '%s: the texts and their UTF-8 byte lengths, after a number column',
    (_, texts) => {
      const numbers = Float64Array.from(texts, (_, i) => i + 0.5);
      const { header, payload } = typedColumnsToCols(
        fn(['number', 'text'], 'text'),
        [numbers, texts],
        0,
        texts.length,
      );
      expect(header).toEqual({ op: 'callcols', rows: texts.length });
      expect(payload).toHaveLength(1); // one write, not one per column part
      const bytes = Buffer.from(payload[0]!);
      expect(bytes.byteOffset % 8).toBe(0);
      expect(Array.from(texts, (_, i) => bytes.readDoubleLE(8 * i))).toEqual([...numbers]);
      const column = textColumnAt(bytes, (8 * texts.length + 7) & ~7, texts.length);
      expect(column.lengths).toEqual(texts.map((t) => Buffer.byteLength(t, 'utf8')));
      expect(column.text.toString('utf8')).toBe(texts.join(''));
      expect(bytes.length).toBe(column.next);
      expect([...bytes.subarray(column.end)].every((b) => b === 0)).toBe(true); // the padding
    },
  );

  test('a chunk from the middle of the columns; two text columns, ASCII then not', () => {
    const a = ['x0', 'x1', 'x2', 'x3'];
    const b = ['-é0', '-é1', '-é2', '-é3'];
    const { payload } = typedColumnsToCols(fn(['text', 'text'], 'text'), [a, b], 1, 2);
    const bytes = Buffer.from(payload[0]!);
    const first = textColumnAt(bytes, 0, 2);
    expect(first.text.toString()).toBe('x1x2');
    const second = textColumnAt(bytes, first.next, 2);
    expect(second.lengths).toEqual([4, 4]);
    expect(second.text.toString()).toBe('-é1-é2');
    expect(bytes.length).toBe(second.next);
  });

  test('lone surrogates go as cells and empty in the column; two of them never pair up across rows', () => {
    const texts = ['ok', '\uD83D', '\uDE00', 'é'];
    const { header, payload } = typedColumnsToCols(fn(['text'], 'text'), [texts], 0, 4);
    expect(header.cells).toEqual({ 0: { 1: '\uD83D', 2: '\uDE00' } });
    const column = textColumnAt(Buffer.from(payload[0]!), 0, 4);
    expect(column.lengths).toEqual([2, 0, 0, 2]);
    expect(column.text.toString()).toBe('oké');
  });

  test('lone surrogates in a chunk from the middle, or in a whole column: cells by row of the chunk, the caller’s column unchanged', () => {
    const texts = ['a', 'b', 'ok', '\uD83D', '\uDE00', 'é', 'z'];
    const before = [...texts];
    const middle = typedColumnsToCols(fn(['text'], 'text'), [texts], 2, 4);
    expect(middle.header.cells).toEqual({ 0: { 1: '\uD83D', 2: '\uDE00' } });
    const column = textColumnAt(Buffer.from(middle.payload[0]!), 0, 4);
    expect(column.lengths).toEqual([2, 0, 0, 2]);
    expect(column.text.toString()).toBe('oké');
    const whole = typedColumnsToCols(fn(['text'], 'text'), [texts], 0, texts.length);
    expect(whole.header.cells).toEqual({ 0: { 3: '\uD83D', 4: '\uDE00' } });
    expect(textColumnAt(Buffer.from(whole.payload[0]!), 0, texts.length).text.toString()).toBe(
      'abokéz',
    );
    expect(texts).toEqual(before);
  });

  test('chunk after chunk of one column (a kept buffer encodes each range): every chunk has its own rows only', () => {
    const texts = Array.from({ length: 50 }, (_, i) => (i % 7 ? `r${i}` : `é${i}`));
    expectChunks(texts, [
      [0, 30],
      [30, 5],
      [35, 15],
      [1, 48],
    ]);
  });

  // Texts are encoded to UTF-8 by the host itself (a loop for short ones, Buffer.write
  // for long ones): every kind of character, at every width, must come out as Buffer.from makes it.
  const EDGES = ['\0', '\x7f', '\x80', 'é', '\u07ff', '\u0800', '日', '\ud7ff', '\ue000', '\uffff'];
  const WIDE = [...EDGES, '😀', '\u{10ffff}', '\u{10000}'];
  const mixed = (i: number, units: number) => {
    let text = '';
    for (let j = 0; text.length < units; j++) text += WIDE[(i + j) % WIDE.length];
    return text;
  };
  test.each([
    ['short', 10],
    ['long (the native path)', 200],
  ])(
    '%s texts of every character width encode as Buffer.from does, as columns and as rows of Values',
    (_, units) => {
      const a = Array.from({ length: 40 }, (_, i) => (i % 9 === 0 ? '' : mixed(i, units)));
      const b = Array.from(
        { length: 40 },
        (_, i) => `r${i}${i % 5 ? '' : '\ud800'}${mixed(i + 3, units)}`,
      );
      const f = fn(['text', 'number', 'text'], 'text');
      const numbers = Float64Array.from(a, (_, i) => i);
      const fromColumns = typedColumnsToCols(f, [a, numbers, b], 0, a.length);
      const rows = a.map((t, i) => [Value.text(t), Value.number(i), Value.text(b[i]!)]);
      const fromRows = rowsToCols(f, rows, 0, rows.length);
      for (const { header, payload } of [fromColumns, fromRows]) {
        const bytes = Buffer.from(payload[0]!);
        const first = textColumnAt(bytes, 0, a.length);
        expect(first.lengths).toEqual(a.map((t) => Buffer.byteLength(t)));
        expect(first.text.equals(Buffer.from(a.join('')))).toBe(true);
        const second = textColumnAt(bytes, first.next + 8 * a.length, a.length);
        // A lone surrogate (every fifth row) makes the row empty in the column and a cell.
        const lone = b.map((t, i) => (i % 5 ? t : ''));
        expect(second.lengths).toEqual(lone.map((t) => Buffer.byteLength(t)));
        expect(second.text.equals(Buffer.from(lone.join('')))).toBe(true);
        expect(bytes.length).toBe(second.next);
        expect([...bytes.subarray(second.end)].every((x) => x === 0)).toBe(true);
        expect(Object.keys(header.cells?.[2] ?? {})).toEqual([
          '0',
          '5',
          '10',
          '15',
          '20',
          '25',
          '30',
          '35',
        ]);
        expect(header.cells?.[2]?.[5]).toBe(b[5]);
      }
    },
  );

  test('a chunk past what is kept across requests (rows and bytes), then small ones, from rows of Values', () => {
    const f = fn(['text', 'text'], 'text');
    const long = 'é'.repeat(40);
    const rows = Array.from({ length: 70_000 }, (_, i) => [
      Value.text(`${i}${long}`),
      Value.text(`r${i}`),
    ]);
    for (const [start, count] of [
      [0, 70_000],
      [5, 2],
      [69_990, 10],
    ] as const) {
      const bytes = Buffer.from(rowsToCols(f, rows, start, count).payload[0]!);
      const want = rows.slice(start, start + count);
      const first = textColumnAt(bytes, 0, count);
      expect(first.text.toString()).toBe(want.map((r) => r[0]!.value).join(''));
      const second = textColumnAt(bytes, first.next, count);
      expect(second.lengths).toEqual(want.map((r) => Buffer.byteLength(r[1]!.value as string)));
      expect(second.text.toString()).toBe(want.map((r) => r[1]!.value).join(''));
    }
  });

  test('chunks larger than the kept encoding buffer, one after another, each with its own rows only', () => {
    const texts = Array.from({ length: 30_000 }, (_, i) => `row${i}-${i % 3 ? 'é' : '日本'}${i}`);
    expectChunks(texts, [
      [0, 30_000],
      [7, 3],
      [20_000, 10_000],
    ]);
  });

  test('rows of Values: a datetime column is in the one buffer with its nanoseconds, cells for the years i64 cannot hold', () => {
    const rows = [
      [Value.text('é'), Value.datetime('2020-01-01T00:00:00.000000123Z')],
      [Value.text('a'), Value.datetime('1500-01-01T00:00:00Z')],
    ];
    const { header, payload } = rowsToCols(fn(['text', 'datetime'], 'text'), rows, 0, 2);
    expect(payload).toHaveLength(1);
    const bytes = Buffer.from(payload[0]!);
    const text = textColumnAt(bytes, 0, 2);
    expect(text.text.toString()).toBe('éa');
    expect(bytes.readBigInt64LE(text.next)).toBe(1_577_836_800_000_000_123n);
    expect(bytes.readBigInt64LE(text.next + 8)).toBe(0n);
    expect(header.cells).toEqual({ 1: { 1: valueToJson(rows[1]![1]!) } }); // as on the JSON path
  });

  test('without a text column the payload stays views of the caller’s columns', () => {
    const column = Float64Array.from([1, 2, 3]);
    const flags = Uint8Array.from([1, 0, 1]);
    const { payload } = typedColumnsToCols(
      fn(['number', 'boolean'], 'number'),
      [column, flags],
      0,
      3,
    );
    expect(payload[0]!.buffer).toBe(column.buffer);
    expect(payload[1]!.buffer).toBe(flags.buffer);
  });
});

describe('reading a text result column', () => {
  test.each(CHUNKS)('%s: the strings exactly as written', (_, texts) => {
    const values = new Array<string>(texts.length + 1).fill('');
    const frame = textResponse(
      texts.length,
      texts.map((t) => Buffer.from(t, 'utf8')),
    );
    const out = colsResultsInto(fn([], 'text'), frame, texts.length, values, 1);
    expect(out).toEqual({ errors: [], cells: [] });
    expect(values).toEqual(['', ...texts]);
  });

  const notUtf8: [string, Buffer[]][] = [
    ['an ASCII column with one byte 0x80', [Buffer.from('abc'), Buffer.from([0x61, 0x80])]],
    ['a Latin-1 é (0xE9) in otherwise ASCII rows', [Buffer.from('row'), Buffer.from([0xe9])]],
    ['a CESU-8 surrogate (ED A0 80)', [Buffer.from([0xed, 0xa0, 0x80])]],
    ['a truncated character at the end', [Buffer.from('ok'), Buffer.from([0xc3])]],
  ];
  test.each(notUtf8)('%s is a malformed response, not U+FFFD', (_, parts) => {
    const values = new Array<string>(parts.length).fill('');
    const read = () =>
      colsResultsInto(fn([], 'text'), textResponse(parts.length, parts), parts.length, values, 0);
    expect(read).toThrow(ResponseShapeError);
    expect(read).toThrow(/not UTF-8/);
    expect(values.some((v) => v.includes('\uFFFD'))).toBe(false);
  });

  test('a string that starts inside another row’s character is malformed', () => {
    const parts = [Buffer.from([0x61, 0xe6, 0x97]), Buffer.from([0xa5, 0x62])]; // 日 split over two rows
    const read = () => colsResultsInto(fn([], 'text'), textResponse(2, parts), 2, ['', ''], 0);
    expect(read).toThrow(/split inside a character/);
  });

  // readTexts decodes 32 KiB of strings at a time: these cross several such groups.
  const LONG: [string, string[]][] = [
    ['many ASCII rows', Array.from({ length: 9000 }, (_, i) => `row${i}`)],
    [
      'many rows, some non-ASCII, some empty, some astral',
      Array.from({ length: 9000 }, (_, i) =>
        i % 7 === 0 ? '' : `r${i}-${['é', '日', '😀'][i % 3]}`,
      ),
    ],
    [
      'rows longer than a group',
      ['a'.repeat(40_000), 'é'.repeat(20_000), 'b', '日'.repeat(12_000)],
    ],
  ];
  test.each(LONG)('%s: read back exactly, as strings and as Values', (_, texts) => {
    const frame = textResponse(
      texts.length,
      texts.map((t) => Buffer.from(t, 'utf8')),
    );
    const values = new Array<string>(texts.length).fill('');
    colsResultsInto(fn([], 'text'), frame, texts.length, values, 0);
    expect(values).toEqual(texts);
    const out: RowResult[] = [];
    colsValuesInto(fn([], 'text'), frame, texts.length, out, 0);
    expect(out).toEqual(texts.map((t) => Value.text(t)));
  });

  test('a character split over two rows where a decoding group ends is malformed', () => {
    // Row 0 fills one group exactly and ends with the first byte of À (C3 80).
    const parts = [
      Buffer.concat([Buffer.from('x'.repeat(32 * 1024 - 1)), Buffer.from([0xc3])]),
      Buffer.from([0x80, 0x62]),
    ];
    const values = ['', ''];
    const read = () => colsResultsInto(fn([], 'text'), textResponse(2, parts), 2, values, 0);
    expect(read).toThrow(/split inside a character/);
    expect(values.some((v) => v.includes('\uFFFD'))).toBe(false);
  });

  test.each(CHUNKS)('%s: colsValuesInto gives the same strings as text Values', (_, texts) => {
    const frame = textResponse(
      texts.length,
      texts.map((t) => Buffer.from(t, 'utf8')),
    );
    const out: RowResult[] = [Value.number(1)];
    colsValuesInto(fn([], 'text'), frame, texts.length, out, 1);
    expect(out).toEqual([Value.number(1), ...texts.map((t) => Value.text(t))]);
  });

  test('colsValuesInto: a failed row and a cell replace their row’s Value', () => {
    const frame = textResponse(3, [Buffer.from('a'), Buffer.from(''), Buffer.from('')]);
    frame.header.errors = { 1: { type: 'ValueError', message: 'bad' } };
    frame.header.cells = { 2: '\ud800' };
    const out: RowResult[] = [];
    colsValuesInto(fn([], 'text'), frame, 3, out, 0);
    expect(out[0]).toEqual(Value.text('a'));
    expect((out[1] as ExtFnError).message).toMatch(/ValueError: bad/);
    expect(out[2]).toEqual(Value.text('\ud800'));
  });

  test('colsValuesInto: text that is not UTF-8 is a malformed response', () => {
    const frame = textResponse(2, [Buffer.from('ok'), Buffer.from([0xc3])]);
    expect(() => colsValuesInto(fn([], 'text'), frame, 2, [], 0)).toThrow(ResponseShapeError);
  });

  test('columnValuesInto writes one Value per row at the given offset', () => {
    const out: unknown[] = ['keep'];
    const texts: Column = ['', 'é', 'a'];
    columnValuesInto('text', texts, 3, out, 1);
    expect(out).toEqual([
      'keep',
      { type: 'text', value: '' },
      { type: 'text', value: 'é' },
      { type: 'text', value: 'a' },
    ]);
    const numbers: unknown[] = [];
    columnValuesInto('number', Float64Array.from([1.5, -0]), 2, numbers, 0);
    expect(numbers).toEqual([
      { type: 'number', value: 1.5 },
      { type: 'number', value: -0 },
    ]);
  });
});

describe('evalBatch text results over callcols are made when the batch is scheduled', () => {
  const f = fn(['text'], 'text');
  const rows = ['a', 'b', 'c', 'd'].map((t) => [Value.text(t)]);
  const source = (results: RowResult[]) => valueRows(f, rows, results, false, true);
  const ok = (texts: string[]) =>
    textResponse(
      texts.length,
      texts.map((t) => Buffer.from(t)),
    );

  test('a malformed response fails when it comes, not at finish', () => {
    const bad = textResponse(2, [Buffer.from('ok'), Buffer.from([0xc3])]);
    expect(() => source([]).decode(bad, 0, 2)).toThrow(ResponseShapeError);
    const split = textResponse(2, [Buffer.from([0x61, 0xc3]), Buffer.from([0x80])]);
    expect(() => source([]).decode(split, 0, 2)).toThrow(/split inside a character/);
  });

  test('after finish: every chunk’s Values, cells and errors, as colsValuesInto writes them', () => {
    const results: RowResult[] = new Array(4);
    const rowSource = source(results);
    const second = ok(['É', '']);
    second.header.errors = { 1: { type: 'ValueError', message: 'bad' } };
    second.header.cells = { 0: '\ud800' };
    rowSource.decode(second, 2, 2);
    rowSource.decode(ok(['x', 'yé']), 0, 2);
    rowSource.finish?.();
    expect(results.slice(0, 3)).toEqual([Value.text('x'), Value.text('yé'), Value.text('\ud800')]);
    expect((results[3] as ExtFnError).message).toMatch(/ValueError: bad/);
    const direct: RowResult[] = new Array(4);
    colsValuesInto(f, second, 2, direct, 2);
    expect(results[2]).toEqual(direct[2]);
  });

  test('a row failed after its chunk was read keeps its failure; a later chunk over an earlier one wins', () => {
    const results: RowResult[] = new Array(4);
    const rowSource = source(results);
    rowSource.decode(ok(['a1', 'b1']), 0, 2);
    const failure = { name: 'ExtFnError', message: 'failed later' } as unknown as ExtFnError;
    rowSource.fail(1, failure);
    rowSource.decode(ok(['c1', 'd1']), 2, 2);
    rowSource.decode(ok(['c2', 'd2']), 2, 2);
    rowSource.finish?.();
    expect(results).toEqual([Value.text('a1'), failure, Value.text('c2'), Value.text('d2')]);
  });

  test('past 32 MiB of held payloads the held results are made at once, as Values or into a column', () => {
    const big = 'a'.repeat(17 * 1024 * 1024);
    const response = () => ok([big, 'é']);
    const results: RowResult[] = new Array(4);
    const rowSource = source(results);
    rowSource.decode(ok(['x', 'y']), 0, 2);
    rowSource.decode(response(), 2, 2);
    expect(results[0]).toBeUndefined(); // held: 17 MiB
    rowSource.decode(response(), 2, 2);
    expect(results[0]).toEqual(Value.text('x'));
    expect(results[3]).toEqual(Value.text('é'));
    const values = ['', '', '', ''];
    const columnSource = typedColumnRows(f, [['a', 'b', 'c', 'd']], values, new Map(), true);
    columnSource.decode(response(), 0, 2);
    expect(values[1]).toBe(''); // held
    columnSource.decode(response(), 2, 2);
    expect(values[0]!.length).toBe(big.length);
    expect(values[3]).toBe('é');
  });

  test('a row failed before any chunk was read is written at once', () => {
    const results: RowResult[] = new Array(4);
    const failure = { message: 'at once' } as unknown as ExtFnError;
    source(results).fail(3, failure);
    expect(results[3]).toBe(failure);
  });
});
