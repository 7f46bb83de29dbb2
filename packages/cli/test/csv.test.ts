/** The CSV reader and writer (`csv.ts`): records with their line numbers, quotes, CRLF and BOM, malformed lines that cost only themselves, text in pieces (property), and formatting. */
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { CsvReader, formatCsvRecord, parseCsv } from '../src/csv.js';

describe('parseCsv', () => {
  test('plain records, with their line numbers', () => {
    const { records } = parseCsv('a,b\n1,2\n3,4\n');
    expect(records).toEqual([
      { line: 1, cells: ['a', 'b'] },
      { line: 2, cells: ['1', '2'] },
      { line: 3, cells: ['3', '4'] },
    ]);
  });

  test('quoted cells hold commas, doubled quotes and line breaks; line numbers count them', () => {
    const { records } = parseCsv('"a,b","say ""hi""","two\nlines"\nnext,"",x\n');
    expect(records).toEqual([
      { line: 1, cells: ['a,b', 'say "hi"', 'two\nlines'] },
      { line: 3, cells: ['next', '', 'x'] },
    ]);
  });

  test('CRLF line ends are kept for the output, a BOM is dropped, the last newline is optional', () => {
    const table = parseCsv('\ufeffa,b\r\n1,2');
    expect(table.newline).toBe('\r\n');
    expect(table.records).toEqual([
      { line: 1, cells: ['a', 'b'] },
      { line: 2, cells: ['1', '2'] },
    ]);
  });

  test('blank lines are skipped but still counted; "" is one empty cell', () => {
    const { records } = parseCsv('1\n\n\n""\n2\n');
    expect(records).toEqual([
      { line: 1, cells: ['1'] },
      { line: 4, cells: [''] },
      { line: 5, cells: ['2'] },
    ]);
  });

  test('empty cells and trailing commas', () => {
    expect(parseCsv(',a,\n').records).toEqual([{ line: 1, cells: ['', 'a', ''] }]);
  });

  test('an unterminated quote loses only its own line; reading resumes on the next', () => {
    const { records } = parseCsv('1,2\n3,"oops\n5,6\n7,8\n');
    expect(records[0]).toEqual({ line: 1, cells: ['1', '2'] });
    expect(records[1]).toMatchObject({ line: 2, problem: expect.stringContaining('never closed') });
    expect(records.slice(2)).toEqual([
      { line: 3, cells: ['5', '6'] },
      { line: 4, cells: ['7', '8'] },
    ]);
  });

  test('a quote inside an unquoted cell, and text after a closing quote, are malformed', () => {
    const { records } = parseCsv('ab"c,1\n"ab"c,2\nok,3\n');
    expect(records[0]).toMatchObject({
      line: 1,
      problem: expect.stringContaining('quote inside unquoted column 1'),
    });
    expect(records[1]).toMatchObject({
      line: 2,
      problem: expect.stringContaining('after the closing quote in column 1'),
    });
    expect(records[2]).toEqual({ line: 3, cells: ['ok', '3'] });
  });

  test('a stray quote that swallows line breaks costs only its line', () => {
    const { records } = parseCsv('1,"2\n3,4\n"x"y,5\n6,7\n');
    expect(records.map((r) => [r.line, r.problem === undefined])).toEqual([
      [1, false],
      [2, true],
      [3, false],
      [4, true],
    ]);
    expect(records[0]!.problem).toContain('column 2 is not closed properly');
    expect(records[1]).toEqual({ line: 2, cells: ['3', '4'] });
    expect(records[2]!.problem).toContain('after the closing quote in column 1');
    expect(records[3]).toEqual({ line: 4, cells: ['6', '7'] });
  });

  test('an empty text has no records', () => {
    expect(parseCsv('').records).toEqual([]);
    expect(parseCsv('\n\n').records).toEqual([]);
  });
});

describe('CsvReader (text in pieces)', () => {
  test('any split of the text reads as the whole text does (property)', () => {
    const text = fc.string({
      unit: fc.constantFrom('a', '1', ',', '"', '\n', '\r', ' ', 'é', '😀'),
      maxLength: 60,
    });
    fc.assert(
      fc.property(text, fc.array(fc.nat(60), { maxLength: 6 }), (whole, cuts) => {
        const reader = new CsvReader();
        const records = [];
        let from = 0;
        for (const cut of [...cuts].sort((a, b) => a - b)) {
          records.push(...reader.push(whole.slice(from, Math.max(from, cut))));
          from = Math.max(from, cut);
        }
        records.push(...reader.push(whole.slice(from)), ...reader.end());
        const expected = parseCsv(whole);
        expect(records).toEqual(expected.records);
        expect(reader.newline).toBe(expected.newline);
      }),
    );
  });

  test('a record longer than the limit is reported, not held: reading resumes on the next line', () => {
    const reader = new CsvReader({ maxRecordChars: 100 });
    const records = reader.push(`1,2\n"${'x'.repeat(60)}\n`);
    records.push(...reader.push(`${'y'.repeat(60)}\n`));
    records.push(...reader.push('3,4\n'), ...reader.end());
    expect(records[0]).toEqual({ line: 1, cells: ['1', '2'] });
    expect(records[1]).toMatchObject({ line: 2, problem: expect.stringContaining('longer than') });
    expect(records.slice(2)).toEqual([
      { line: 3, cells: ['y'.repeat(60)] },
      { line: 4, cells: ['3', '4'] },
    ]);
    // One long line without a line end: dropped up to the next line end.
    const long = new CsvReader({ maxRecordChars: 100 });
    const got = [
      ...long.push('z'.repeat(150)),
      ...long.push('z'.repeat(150)),
      ...long.push('\n5\n'),
    ];
    got.push(...long.end());
    expect(got.map((r) => [r.line, r.problem === undefined])).toEqual([
      [1, false],
      [2, true],
    ]);
    expect(got[1]!.cells).toEqual(['5']);
  });
});

describe('formatCsvRecord', () => {
  test('quotes only what needs it', () => {
    expect(formatCsvRecord(['a', 'b c', 'x,y', 'say "hi"', 'two\nlines'])).toBe(
      'a,b c,"x,y","say ""hi""","two\nlines"',
    );
    expect(formatCsvRecord([''])).toBe('""');
  });

  test('what it writes, parseCsv reads back (property)', () => {
    const cell = fc.string({
      unit: fc.constantFrom('a', 'b', ',', '"', '\n', '\r', ' ', 'é', '😀', ''),
    });
    const record = fc.array(cell, { minLength: 1, maxLength: 5 });
    fc.assert(
      fc.property(fc.array(record, { maxLength: 6 }), (records) => {
        // A record of one empty cell is written as "", which reads back as one empty cell.
        const text = records.map(formatCsvRecord).join('\n');
        const parsed = parseCsv(text).records;
        expect(parsed.map((r) => r.problem)).toEqual(records.map(() => undefined));
        expect(parsed.map((r) => r.cells)).toEqual(records);
      }),
    );
  });
});
