/** The small text helpers: terminal escaping, CSV formula neutralisation, JSON error positions, lines in pieces. */
import { describe, expect, test } from 'vitest';
import { neutraliseFormula } from '../src/formula.js';
import { describeJsonError } from '../src/json-error.js';
import { LineSplitter } from '../src/lines.js';
import { escapeForTerminal, isInteractive } from '../src/terminal.js';

describe('escapeForTerminal', () => {
  test('ESC, BEL, a bare CR, C1 controls and bidi overrides are escaped; text, tabs and line ends are not', () => {
    expect(escapeForTerminal('a\u001b[2Jb\u0007c\rd\u009be\u202ef')).toBe(
      'a\\u001b[2Jb\\u0007c\\u000dd\\u009be\\u202ef',
    );
    expect(escapeForTerminal('résumé\t✓ 😀\r\nnext\n')).toBe('résumé\t✓ 😀\r\nnext\n');
  });

  test('an escaped JSON text still parses to the same value', () => {
    const value = 'x\u009b31m\u202ey';
    expect(JSON.parse(escapeForTerminal(JSON.stringify({ value }))).value).toBe(value);
  });

  test('interactive: a terminal, not TERM=dumb, not under CI', () => {
    const io = (env: NodeJS.ProcessEnv, isTTY = true) => ({
      stdout: { write: () => true },
      stderr: { write: () => true, isTTY },
      env,
      cwd: '/',
    });
    expect(isInteractive(io({}))).toBe(true);
    expect(isInteractive(io({ CI: 'false' }))).toBe(true);
    expect(isInteractive(io({}, false))).toBe(false);
    expect(isInteractive(io({ TERM: 'dumb' }))).toBe(false);
    expect(isInteractive(io({ CI: 'true' }))).toBe(false);
    expect(isInteractive(io({ CI: '1' }))).toBe(false);
  });
});

describe('neutraliseFormula', () => {
  test('text starting with = + - @ tab or CR gets a leading apostrophe', () => {
    for (const cell of ['=1+1', '+cmd', '-x', '@SUM(A1)', '\t=1', '\r=1', '-', '+']) {
      expect(neutraliseFormula(cell), JSON.stringify(cell)).toBe(`'${cell}`);
    }
  });

  test('numbers, and text starting otherwise, are left alone', () => {
    for (const cell of [
      '-5',
      '+1e3',
      '-3.5',
      '-Infinity',
      '-inf',
      'NaN',
      'a=b',
      ' =1',
      '',
      "'=1",
    ]) {
      expect(neutraliseFormula(cell), JSON.stringify(cell)).toBe(cell);
    }
  });
});

describe('describeJsonError', () => {
  const describe_ = (text: string) => {
    try {
      JSON.parse(text);
    } catch (error) {
      return describeJsonError(error, text);
    }
    throw new Error('parsed');
  };

  test('a position becomes line and column', () => {
    expect(describe_('{\n  "a": 1,\n}')).toBe(
      'line 3, column 1: Expected double-quoted property name',
    );
    expect(describe_('[1,\n2')).toMatch(/^line 2, column 2: /);
    expect(describe_('{"a":')).toBe('line 1, column 6: Unexpected end of JSON input');
  });

  test('an unexpected token without a position is found', () => {
    expect(describe_('{\n  "a": nope\n}')).toBe("line 2, column 9: Unexpected token 'o'");
    expect(describe_('nope')).toBe("line 1, column 2: Unexpected token 'o'");
  });
});

describe('LineSplitter', () => {
  test('lines across pieces, CRLF, a last line without a line end, a BOM', () => {
    const lines = new LineSplitter();
    const got = [
      ...lines.push('\ufeffab'),
      ...lines.push('c\r\nd'),
      ...lines.push('\n\ne'),
      ...lines.end(),
    ];
    expect(got).toEqual([
      { line: 1, text: 'abc' },
      { line: 2, text: 'd' },
      { line: 3, text: '' },
      { line: 4, text: 'e' },
    ]);
  });

  test('a line over the limit is reported once and skipped', () => {
    const lines = new LineSplitter({ maxLineChars: 10 });
    const got = [...lines.push('0123456789ab'), ...lines.push('cdef\nok\n'), ...lines.end()];
    expect(got).toEqual([
      { line: 1, tooLong: true, start: '0123456789ab' },
      { line: 2, text: 'ok' },
    ]);
  });
});
