/**
 * Hostile and careless input and output: cells a function cannot take are
 * that row's error (never an internal error that ends the run), files whose
 * lines end with a CR alone keep their rows apart, and an output that cannot
 * be written (a full disk, a device) is a clear error, never a stack trace,
 * and never a device replaced by a file.
 */
import { lstat, mkdir, readFile, stat, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { parseCell } from '../src/cells.js';
import { CsvReader, parseCsv } from '../src/csv.js';
import { ExitCode } from '../src/exit-codes.js';
import { librariesOption } from '../src/libraries-flag.js';
import { main } from '../src/main.js';
import { BIN, cli, fakeIo, fakeRunner, scratch } from './helpers.js';

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeEach(async () => {
  tmp = await scratch();
});
afterEach(async () => {
  await tmp.cleanup();
});

const withRunner = (runner = fakeRunner()) => ({ '@improv/extfn-wasm': { wasm: () => runner } });

const add = {
  name: 'add',
  language: 'wasm',
  body: 'args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
};

/** add in real WebAssembly, for the subprocess tests (the fake runner is in-process only). */
const wasmAdd = {
  ...add,
  body: 'wat:(module (func (export "improv_call") (param f64) (param f64) (result f64) (f64.add (local.get 0) (local.get 1))))',
};

/** The year of a datetime, through the fake runner (its values are Dates). */
const year = {
  name: 'year',
  language: 'wasm',
  body: 'args[0].getUTCFullYear()',
  argTypes: ['datetime'],
  returnType: 'number',
};

describe('cells a function cannot take are that row’s error', () => {
  test('a datetime outside years 1 to 9999 is refused, not thrown', () => {
    for (const text of ['0000-01-01', '0001-01-01T00:00:00+01:00', '9999-12-31T23:00:00-05:00']) {
      const cell = parseCell(text, 'datetime');
      expect(cell.ok, text).toBe(false);
      if (!cell.ok) expect(cell.problem).toMatch(/outside the datetimes a function can take/);
    }
    expect(parseCell('0001-01-01T00:00:00Z', 'datetime').ok).toBe(true);
    expect(parseCell('9999-12-31', 'datetime').ok).toBe(true);
  });

  test('a CSV run goes on past a datetime out of range (exit 1, not an internal error)', async () => {
    const fn = await tmp.file('year.json', JSON.stringify(year));
    const rows = await tmp.file('rows.csv', '2025-03-31\n0000-01-01\n1999-12-31T23:00:00Z\n');
    const io = fakeIo(withRunner());
    const code = await main(['run', fn, rows], io);
    expect(io.err()).not.toMatch(/internal error|RangeError/);
    expect(code).toBe(ExitCode.FunctionError);
    expect(io.out()).toBe(
      [
        '2025-03-31,2025,',
        '0000-01-01,,"MalformedRow: line 2: column 1, argument 1 (datetime): ""0000-01-01"" is outside the datetimes a function can take, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z; write an ISO-8601 instant with Z or an offset, such as 2025-03-31T12:00:00Z, or a date such as 2025-03-31 (midnight UTC)"',
        '1999-12-31T23:00:00Z,1999,',
        '',
      ].join('\n'),
    );
  });

  test('eval of a datetime out of range is a usage error naming the argument', async () => {
    const fn = await tmp.file('year.json', JSON.stringify(year));
    const io = fakeIo(withRunner());
    const code = await main(['eval', fn, '0001-01-01T00:00:00+01:00'], io);
    expect(code).toBe(ExitCode.BadInput);
    expect(io.err()).toMatch(/argument 1 \(datetime\): .* is outside the datetimes/);
    expect(io.err()).not.toMatch(/internal error/);
  });

  test('a CSV number beyond 64-bit floats is refused as in JSON lines, not read as Infinity', async () => {
    for (const [text, reads] of [
      ['1e999', 'Infinity'],
      ['-1e999', '-Infinity'],
    ] as const) {
      const cell = parseCell(text, 'number');
      expect(cell.ok).toBe(false);
      if (!cell.ok) expect(cell.problem).toContain(`(it would read as ${reads})`);
    }
    expect(parseCell('Infinity', 'number')).toEqual({
      ok: true,
      value: { type: 'number', value: Number.POSITIVE_INFINITY },
    });
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1e999,1\n2,3\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toMatch(
      /^1e999,1,,"MalformedRow: line 1: .*beyond the range of a 64-bit float/,
    );
    expect(io.out()).toMatch(/\n2,3,5,\n$/);
  });
});

describe('text that names a member of Object.prototype is text like any other', () => {
  const KEYS = ['constructor', '__proto__', 'toString', 'hasOwnProperty', 'valueOf'];

  test('a number cell "constructor" or "__proto__" is that row’s error, not an internal error', async () => {
    for (const key of KEYS) {
      expect(parseCell(key, 'number'), key).toMatchObject({
        ok: false,
        problem: `${JSON.stringify(key)} is not a number`,
      });
    }
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', 'constructor,1\n__proto__,2\n2,3\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.FunctionError);
    expect(io.err()).not.toMatch(/internal error/);
    expect(io.out()).toMatch(
      /^constructor,1,,"MalformedRow: line 1: .*""constructor"" is not a number/,
    );
    expect(io.out()).toMatch(
      /\n__proto__,2,,"MalformedRow: line 2: .*""__proto__"" is not a number/,
    );
    expect(io.out()).toMatch(/\n2,3,5,\n$/);
  });

  test('a JSON line without the key --columns names is "no key", whatever the key is called', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.jsonl', '{"a": 1}\n{"a": 2, "constructor": 3}\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'a,constructor'], io)).toBe(
      ExitCode.FunctionError,
    );
    expect(io.out()).toMatch(/"line 1: no key \\"constructor\\""/);
    expect(io.out()).toMatch(/"a": 2, "constructor": 3,"result":5/);
  });

  test('help for a topic, or a size unit, spelled like a member is unknown: a usage error', async () => {
    for (const topic of KEYS) {
      const io = fakeIo({});
      expect(await main(['help', topic], io), topic).toBe(ExitCode.BadInput);
      expect(io.err()).toContain(`no command named ${topic}`);
      expect(io.out()).toBe('');
    }
    const fn = await tmp.file('add.json', JSON.stringify(add));
    for (const unit of ['constructor', 'valueOf']) {
      const io = fakeIo(withRunner());
      expect(await main(['eval', fn, '1', '2', '--memory', `1${unit}`], io)).toBe(
        ExitCode.BadInput,
      );
      expect(io.err()).toContain(`--memory "1${unit}": unknown unit "${unit}"`);
    }
  });

  test('--libraries for a function whose language is "constructor": not python or r', () => {
    expect(librariesOption('constructor', { kind: 'system' })).toBeUndefined();
    expect(librariesOption('python', { kind: 'system' })).toEqual({ packages: 'system' });
  });
});

describe('CSV lines that end with a CR alone (classic Mac files)', () => {
  test('each line is its own record, with its own line number', () => {
    const table = parseCsv('1,2\r3,4\r\r5,6');
    expect(table.records).toEqual([
      { line: 1, cells: ['1', '2'] },
      { line: 2, cells: ['3', '4'] },
      { line: 4, cells: ['5', '6'] },
    ]);
    expect(table.newline).toBe('\n');
  });

  test('the same records however the text is cut into pieces', () => {
    const text = '"a\rb",c\r1,"x""y"\r"never closed\rd,e\r';
    const whole = parseCsv(text).records;
    expect(whole.map((r) => r.line)).toEqual([1, 3, 4, 5]);
    expect(whole[3]).toEqual({ line: 5, cells: ['d', 'e'] });
    for (let size = 1; size <= text.length; size++) {
      const reader = new CsvReader();
      const records = [];
      for (let at = 0; at < text.length; at += size) {
        records.push(...reader.push(text.slice(at, at + size)));
      }
      records.push(...reader.end());
      expect(records, `pieces of ${size}`).toEqual(whole);
    }
  });

  test('in a file of LF or CR LF lines, a CR inside a cell stays in the cell', () => {
    expect(parseCsv('a\rb,c\n1,2\n').records).toEqual([
      { line: 1, cells: ['a\rb', 'c'] },
      { line: 2, cells: ['1', '2'] },
    ]);
    expect(parseCsv('a\rb,c\r\n1,2\r\n')).toEqual({
      records: [
        { line: 1, cells: ['a\rb', 'c'] },
        { line: 2, cells: ['1', '2'] },
      ],
      newline: '\r\n',
    });
  });

  test('run evaluates every row of a CR file', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\r3,4\r5,6\r');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('1,2,3,\n3,4,7,\n5,6,11,\n');
  });
});

describe('output that cannot be written', () => {
  const root = process.getuid?.() === 0;

  test.runIf(root)(
    '-o onto a device writes to it and never replaces it with a file (/dev/full: ENOSPC)',
    async () => {
      // A copy of /dev/full (char 1,7) in the scratch directory: the real one is not ours to risk.
      const full = join(tmp.dir, 'full');
      await execa('mknod', [full, 'c', '1', '7']);
      await tmp.file('add.json', JSON.stringify(wasmAdd));
      await tmp.file('rows.csv', '1,2\n3,4\n');
      const result = await cli(['run', 'add.json', 'rows.csv', '-o', full], { cwd: tmp.dir });
      expect(result.stderr).not.toMatch(/\n\s+at |internal error/);
      expect(result.stderr).toMatch(
        /cannot write .*full: no space left on the device \(ENOSPC\)\n {2}fix: .*-o FILE/,
      );
      expect(result.exitCode).toBe(ExitCode.Unavailable);
      expect((await stat(full)).isCharacterDevice()).toBe(true);
    },
  );

  test('-o onto a FIFO writes the rows into it', async () => {
    const fifo = join(tmp.dir, 'rows.fifo');
    await execa('mkfifo', [fifo]);
    await tmp.file('add.json', JSON.stringify(wasmAdd));
    await tmp.file('rows.csv', '1,2\n3,4\n');
    const reader = readFile(fifo, 'utf8');
    const result = await cli(['run', 'add.json', 'rows.csv', '-o', fifo], { cwd: tmp.dir });
    expect(result.exitCode).toBe(ExitCode.Ok);
    expect(await reader).toBe('1,2,3,\n3,4,7,\n');
    expect((await stat(fifo)).isFIFO()).toBe(true);
  });

  test('-o through a symbolic link replaces the file it names and keeps the link', async () => {
    await mkdir(join(tmp.dir, 'data'));
    const real = await tmp.file('data/out.csv', 'old\n');
    const link = join(tmp.dir, 'out.csv');
    await symlink(real, link);
    await tmp.file('add.json', JSON.stringify(wasmAdd));
    await tmp.file('rows.csv', '1,2\n');
    const result = await cli(['run', 'add.json', 'rows.csv', '-o', 'out.csv'], { cwd: tmp.dir });
    expect(result.exitCode).toBe(ExitCode.Ok);
    expect((await lstat(link)).isSymbolicLink()).toBe(true);
    expect(await readFile(real, 'utf8')).toBe('1,2,3,\n');
  });

  test('standard output on a full disk: a WriteFailed error, no stack trace (eval and run)', async () => {
    await tmp.file('add.json', JSON.stringify(wasmAdd));
    await tmp.file('rows.csv', '1,2\n3,4\n');
    for (const args of [
      ['eval', 'add.json', '1', '2'],
      ['run', 'add.json', 'rows.csv'],
    ]) {
      const result = await execa(
        'sh',
        ['-c', `exec "$0" "$@" > /dev/full`, process.execPath, BIN, ...args],
        { cwd: tmp.dir, reject: false, timeout: 60_000 },
      );
      expect(result.stderr, args[0]).not.toMatch(/\n\s+at |internal error|node:internal/);
      expect(result.stderr, args[0]).toMatch(
        /improv-extfn: cannot write standard output: no space left on the device \(ENOSPC\)\n {2}fix: /,
      );
      expect(result.exitCode, args[0]).toBe(ExitCode.Unavailable);
    }
  });

  test('in-process: a stream that fails with ENOSPC ends the run with WriteFailed (--json)', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n3,4\n');
    const listeners: ((e: unknown) => void)[] = [];
    let out = '';
    const stdout = {
      write: (s: string) => {
        out += s;
        const error = Object.assign(new Error('ENOSPC: no space left on device, write'), {
          code: 'ENOSPC',
        });
        queueMicrotask(() => {
          for (const l of listeners) l(error);
        });
        return true;
      },
      on: (event: string, l: (e: unknown) => void) => {
        if (event === 'error') listeners.push(l);
      },
      off: () => {},
    };
    const io = fakeIo(withRunner(), { stdout });
    const code = await main(['run', fn, rows, '--json'], io);
    expect(code).toBe(ExitCode.Unavailable);
    const last = out.trim().split('\n').at(-1)!;
    expect(JSON.parse(last)).toEqual({
      ok: false,
      error: {
        kind: 'WriteFailed',
        message: 'cannot write standard output: no space left on the device (ENOSPC)',
        fix: expect.stringContaining('-o FILE'),
      },
    });
  });
});
