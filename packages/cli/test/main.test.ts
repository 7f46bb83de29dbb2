/** The commands in-process, with a fake runner: the logic, without an interpreter. */
import { EventEmitter } from 'node:events';
import { chmod, readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { parseCsv } from '../src/csv.js';
import { ExitCode } from '../src/exit-codes.js';
import { Interrupted } from '../src/io.js';
import { main } from '../src/main.js';
import { fakeIo, fakeRunner, scratch } from './helpers.js';

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeEach(async () => {
  tmp = await scratch();
});
afterEach(async () => {
  await tmp.cleanup();
});

const add = {
  name: 'add',
  language: 'wasm',
  body: 'args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
};
const failing = {
  ...add,
  name: 'picky',
  body: 'args[0] < 0 ? (() => { throw new Error("negative") })() : args[0]',
};

function withRunner(runner = fakeRunner()) {
  return { '@improv/extfn-wasm': { wasm: () => runner } };
}

/**
 * Standard input that gives `first`, then stays open (a terminal, or a pipe
 * whose writer waits) until destroyed, as process.stdin is; `onWaiting` is
 * called once it has nothing more to give.
 */
function openStdin(first: string, onWaiting?: () => void) {
  let wake: (() => void) | undefined;
  return {
    destroyed: false,
    destroy() {
      this.destroyed = true;
      wake?.();
    },
    async *[Symbol.asyncIterator]() {
      yield first;
      await new Promise<void>((resolve) => {
        wake = resolve;
        onWaiting?.();
      });
    },
  };
}

describe('eval', () => {
  test('prints the result and closes the runner', async () => {
    const runner = fakeRunner();
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo(withRunner(runner));
    expect(await main(['eval', fn, '2', '-3.5'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('-1.5\n');
    expect(runner.closed).toBe(1);
  });

  test('--json wraps the tagged result; NaN survives', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn, 'NaN', '1', '--json'], io)).toBe(ExitCode.Ok);
    expect(JSON.parse(io.out())).toEqual({
      ok: true,
      function: 'add(number, number) -> number',
      result: { type: 'number', value: 'NaN' },
    });
  });

  test('Ctrl-C or SIGTERM during the call says so on stderr, or as an Interrupted error with --json', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    for (const signal of ['SIGINT', 'SIGTERM'] as const) {
      for (const json of [false, true]) {
        const controller = new AbortController();
        const runner = fakeRunner();
        // A call that runs until it is cancelled, interrupted once it has started.
        runner.call = (f, _args, options) =>
          new Promise((_resolve, reject) => {
            options?.signal?.addEventListener('abort', () => reject(ExtFnError.aborted(f.name)));
            controller.abort(new Interrupted(signal));
          });
        const io = fakeIo(withRunner(runner), { signal: controller.signal });
        const code = await main(['eval', fn, '1', '2', ...(json ? ['--json'] : [])], io);
        expect(code).toBe(signal === 'SIGINT' ? ExitCode.Interrupted : ExitCode.Terminated);
        const message = `interrupted (${signal}) before the call finished`;
        if (json) {
          expect(JSON.parse(io.out())).toEqual({
            ok: false,
            error: { kind: 'Interrupted', message, interrupted: signal },
          });
          expect(io.err()).toBe('');
        } else {
          expect(io.err()).toBe(`improv-extfn: ${message}\n`);
          expect(io.out()).toBe('');
        }
      }
    }
  });

  test('a runner package whose factory throws makes the language unavailable (exit 3)', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo({
      '@improv/extfn-wasm': {
        wasm: () => {
          throw new Error('@improv/extfn-wasm: the wasm runner is not implemented yet');
        },
      },
    });
    expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.Unavailable);
    expect(io.err()).toContain(
      'LanguageUnavailable: function add: the wasm runner is not available: wasm() failed',
    );
    expect(io.err()).toContain(
      'fix: install a version of @improv/extfn-wasm that implements the runner',
    );
  });

  test('a missing runner package is LanguageUnavailable too, as JSON with --json', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo({});
    expect(await main(['eval', fn, '1', '2', '--json'], io)).toBe(ExitCode.Unavailable);
    expect(JSON.parse(io.out())).toMatchObject({
      ok: false,
      error: {
        kind: 'LanguageUnavailable',
        language: 'wasm',
        fix: 'install it: npm install @improv/extfn-wasm',
      },
    });
  });

  test('a failing body exits 1 with the Runtime error', async () => {
    const fn = await tmp.file('picky.json', JSON.stringify(failing));
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn, '-1', '0'], io)).toBe(ExitCode.FunctionError);
    expect(io.err()).toBe('improv-extfn: Runtime: function picky: Error: negative\n');
  });

  test('--name picks one function of several; none or a wrong one is a usage error', async () => {
    const fn = await tmp.file('both.json', JSON.stringify([add, failing]));
    let io = fakeIo(withRunner());
    expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('holds 2 functions');
    expect(io.err()).toContain('pick one with --name: add, picky');
    io = fakeIo(withRunner());
    expect(await main(['eval', fn, '--name', 'picky', '5', '0'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('5\n');
    io = fakeIo(withRunner());
    expect(await main(['eval', fn, '-n', 'nope', '5', '0'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('has no function named nope');
  });

  test('a file of 30 functions or one with a 1 MB name: messages stay short, names cut with their length', async () => {
    const long = 'n'.repeat(1 << 20);
    const one = await tmp.file('long.json', JSON.stringify({ ...add, name: long }));
    let io = fakeIo(withRunner());
    expect(await main(['eval', one, '1', '2'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain(`invalid descriptor "${'n'.repeat(100)}… (1048576 characters)"`);
    expect(io.err()).toContain('name: must have at most 256 characters, got 1048576');
    expect(io.err().length).toBeLessThan(2_000);
    const many = Array.from({ length: 30 }, (_, i) => ({ ...add, name: `f${i}` }));
    const list = await tmp.file('many.json', JSON.stringify([...many, { ...add, name: long }]));
    io = fakeIo(withRunner());
    const asked = 'm'.repeat(1 << 20);
    expect(await main(['eval', list, '-n', asked, '1', '2'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain(`has no function named ${'m'.repeat(100)}… (1048576 characters)`);
    expect(io.err()).toContain('one of: f0, f1,');
    expect(io.err()).toContain(', f19 and 11 more');
    expect(io.err().length).toBeLessThan(2_000);
  });

  test('--timeout must be a duration', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn, '1', '2', '--timeout', 'soon'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('--timeout "soon" is not a duration');
  });
});

describe('run', () => {
  test('CSV with a header: results beside rows, malformed rows with line numbers, others evaluated', async () => {
    const fn = await tmp.file('picky.json', JSON.stringify(failing));
    const rows = await tmp.file(
      'rows.csv',
      'label,a,b\nfirst,1,2\nbad,x,2\nshort,3\nneg,-4,0\n"quoted, label",5,1\n',
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--header', '--columns', 'a,b'], io)).toBe(
      ExitCode.FunctionError,
    );
    expect(io.out()).toBe(
      [
        'label,a,b,result,error',
        'first,1,2,1,',
        'bad,x,2,,"MalformedRow: line 3: column 2 (a), argument 1 (number): ""x"" is not a number; write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity"',
        'short,3,,,"MalformedRow: line 4: 2 cell(s), but the header has 3"',
        'neg,-4,0,,Runtime: Error: negative',
        '"quoted, label",5,1,5,',
        '',
      ].join('\n'),
    );
    expect(io.err()).toContain('  MalformedRow: line 3: column 2 (a)');
    expect(io.err()).toContain('  line 5: Runtime: Error: negative');
    expect(io.err()).toMatch(
      /5 row\(s\): 2 ok, 3 failed \(MalformedRow 2, Runtime 1\) in [\d.]+ s, [\d,]+ rows\/s\n$/,
    );
  });

  test('without --header, a first row of names gets a hint', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', 'a,b\n1,2\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toContain('(is line 1 a header? pass --header)');
    expect(io.out()).toContain('1,2,3,\n');
  });

  test('an empty table writes nothing and succeeds; a header alone is echoed', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const empty = await tmp.file('empty.csv', '');
    let io = fakeIo(withRunner());
    expect(await main(['run', fn, empty], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('');
    expect(io.err()).toMatch(/0 row\(s\): 0 ok, 0 failed/);
    const headerOnly = await tmp.file('header.csv', 'a,b\n');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, headerOnly, '--header'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('a,b,result,error\n');
  });

  test('-o writes the file; --json makes the summary one JSON object', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\r\n3,4\r\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '-o', join(tmp.dir, 'out.csv'), '--json'], io)).toBe(
      ExitCode.Ok,
    );
    expect(io.out()).toBe('');
    expect(await readFile(join(tmp.dir, 'out.csv'), 'utf8')).toBe('1,2,3,\r\n3,4,7,\r\n');
    expect(JSON.parse(io.err())).toMatchObject({
      rows: 2,
      ok: 2,
      failed: 0,
      errors: {},
      output: join(tmp.dir, 'out.csv'),
    });
  });

  test('a row refused by the sandbox stops the run at once: the cause and its fix once, exit 3, nothing written', async () => {
    const runner = fakeRunner();
    let rowsSent = 0;
    runner.callBatch = async (fn, rows) => {
      rowsSent += rows.length;
      return rows.map(() =>
        ExtFnError.sandbox('bubblewrap is not installed', 'apt-get install bubblewrap', {
          functionName: fn.name,
        }),
      );
    };
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(5_000));
    const io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Unavailable);
    expect(io.out()).toBe('');
    expect(io.err()).toBe(
      'improv-extfn: Sandbox: function add: bubblewrap is not installed; apt-get install bubblewrap\n' +
        'improv-extfn: stopped at line 1: every row needs this\n',
    );
    expect(rowsSent).toBeLessThan(5_000);
    expect(runner.closed).toBe(1);
  });

  test('an output path that cannot be written fails before any row runs (exit 2)', async () => {
    const runner = fakeRunner();
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n');
    const io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, rows, '-o', join(tmp.dir, 'missing', 'out.csv')], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain('its directory does not exist');
    expect(runner.closed).toBe(0);
  });

  test('JSON lines: arrays and objects, malformed lines with their numbers', async () => {
    const fn = await tmp.file('picky.json', JSON.stringify(failing));
    const rows = await tmp.file(
      'rows.jsonl',
      '{"id":"a","x":1,"y":2}\n\n{"id":"b","x":"oops","y":2}\nnot json\n{"id":"c","y":1}\n{"id":"d","x":-1,"y":0}\n{"id":"e","x":{"Number":7},"y":0}\n',
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'x,y'], io)).toBe(ExitCode.FunctionError);
    const lines = io
      .out()
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toEqual([
      { id: 'a', x: 1, y: 2, result: 1 },
      {
        id: 'b',
        x: 'oops',
        y: 2,
        line: 3,
        error: {
          kind: 'MalformedRow',
          message:
            'line 3: key "x", argument 1 (number): the string "oops" is not a number; write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity',
        },
      },
      {
        line: 4,
        input: 'not json',
        error: { kind: 'MalformedRow', message: expect.stringMatching(/^line 4: not valid JSON/) },
      },
      { id: 'c', y: 1, line: 5, error: { kind: 'MalformedRow', message: 'line 5: no key "x"' } },
      { id: 'd', x: -1, y: 0, error: { kind: 'Runtime', message: 'Error: negative' } },
      { id: 'e', x: { Number: 7 }, y: 0, result: 7 },
    ]);
    const arrays = await tmp.file('rows.ndjson', '[1, 2]\n["Infinity", 1]\n[1]\n');
    const io2 = fakeIo(withRunner());
    expect(await main(['run', fn, arrays], io2)).toBe(ExitCode.FunctionError);
    expect(io2.out()).toBe(
      '{"args":[1, 2],"result":1}\n{"args":["Infinity", 1],"result":"Infinity"}\n' +
        '{"args":[1],"error":{"kind":"MalformedRow","message":"line 3: 1 value(s), but picky takes 2 argument(s) (number, number)"},"line":3}\n',
    );
  });

  test('object rows without --columns are a usage error', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.jsonl', '{"x":1,"y":2}\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('pass --columns KEY,KEY');
  });

  test('usage errors: unknown format, --columns of the wrong length or name', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.txt', '1,2\n');
    let io = fakeIo(withRunner());
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('pass --format csv|jsonl');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--format', 'csv', '--columns', '1'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain('--columns names 1 column(s), but add takes 2 argument(s)');
    const csv = await tmp.file('rows.csv', 'a,b\n1,2\n');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, csv, '--header', '--columns', 'a,c'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain('--columns: no column named "c" in the header (a, b)');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, csv, '--columns', '2,1'], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toContain('1,2,3,\n');
  });

  test('--columns numbers beyond the header, or from 0, are usage errors before any row runs', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const csv = await tmp.file('rows.csv', 'a,b,c\n1,2,3\n');
    const runner = fakeRunner();
    let io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, csv, '--header', '--columns', '2,99'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toBe(
      'improv-extfn: --columns: column 99 is beyond the header, which has 3 column(s) (a, b, c)\n' +
        '  fix: use header names or column numbers from 1 to 3\n',
    );
    expect(io.out()).toBe('');
    expect(runner.rowsEvaluated).toBe(0);
    const fixZero = '  fix: number the columns from 1 (the first column is 1): --columns 1,2\n';
    for (const header of [['--header'], []]) {
      io = fakeIo(withRunner());
      expect(await main(['run', fn, csv, ...header, '--columns', '0,1'], io)).toBe(
        ExitCode.BadInput,
      );
      expect(io.err()).toBe(
        `improv-extfn: --columns 0,1: column numbers start at 1, not 0\n${fixZero}`,
      );
    }
    const jsonl = await tmp.file('rows.jsonl', '[1,2]\n');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, jsonl, '--columns', '0,1'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('column numbers start at 1, not 0\n');
  });

  test('a file separated by semicolons or tabs: the row says only commas separate cells, never a --columns not given', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const fix = (file: string, by: string) =>
      `  fix: only commas separate CSV cells, and ${file} looks separated by ${by}: convert it to commas (save it from the spreadsheet as CSV with a comma delimiter), or write the rows as JSON lines\n`;
    const semi = await tmp.file('semi.csv', 'x;y\n3;4\n');
    let io = fakeIo(withRunner());
    expect(await main(['run', fn, semi, '--header'], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toBe(
      'x;y,result,error\n3;4,,"MalformedRow: line 2: 1 cell(s), but add takes 2 argument(s) (number, number) (only commas separate cells, and this line has semicolons)"\n',
    );
    expect(io.err()).not.toContain('--columns');
    expect(io.err()).toContain(fix(semi, 'semicolons'));
    const tabs = await tmp.file('tabs.csv', '3\t4\n');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, tabs], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toContain('(only commas separate cells, and this line has tabs)');
    expect(io.err()).toContain(fix(tabs, 'tabs'));
    // With --columns given, the count it needs is still named.
    const narrow = await tmp.file('narrow.csv', '5\n');
    io = fakeIo(withRunner());
    expect(await main(['run', fn, narrow, '--columns', '2,1'], io)).toBe(ExitCode.FunctionError);
    expect(io.out()).toBe('5,,"MalformedRow: line 1: 1 cell(s), but --columns needs 2"\n');
  });

  test('a progress bar is drawn on a terminal when the run is long, and cleared', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(30));
    const io = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
      isTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Ok);
    expect(io.err()).toMatch(/\r\[[#-]+\] +\d+% \d+ rows · [\d,]+ rows\/s/);
    expect(io.err()).toContain('\r\u001b[K');
    const quiet = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
      isTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows, '--no-progress'], quiet)).toBe(ExitCode.Ok);
    expect(quiet.err()).not.toContain('\r');
  });

  test('the bar moves as rows complete; none under TERM=dumb, CI=true, or when rows go to the terminal', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(30));
    const io = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 25 })), {
      isTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Ok);
    const drawn = new Set([...io.err().matchAll(/% (\d+) rows/g)].map((m) => m[1]));
    expect(drawn.size).toBeGreaterThan(1);
    for (const env of [{ TERM: 'dumb' }, { CI: 'true' }]) {
      const quiet = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
        isTTY: true,
        progressDelayMs: 0,
        env,
      });
      expect(await main(['run', fn, rows], quiet)).toBe(ExitCode.Ok);
      expect(quiet.err(), JSON.stringify(env)).not.toContain('\r');
    }
    const rowsOnTerminal = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
      isTTY: true,
      stdoutTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows], rowsOnTerminal)).toBe(ExitCode.Ok);
    expect(rowsOnTerminal.err()).not.toContain('\r');
  });

  test('ragged rows: every output row has the table width, then result and error', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', 'a,b,c\n1,2,x\n3\n4,5,y,extra,more\n"6,7\n8,9,z\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--header', '--columns', 'a,b'], io)).toBe(
      ExitCode.FunctionError,
    );
    const records = parseCsv(io.out()).records.map((r) => r.cells);
    for (const cells of records) expect(cells).toHaveLength(5);
    expect(records[0]).toEqual(['a', 'b', 'c', 'result', 'error']);
    expect(records[1]).toEqual(['1', '2', 'x', '3', '']);
    expect(records[2]).toEqual([
      '3',
      '',
      '',
      '',
      'MalformedRow: line 3: 1 cell(s), but the header has 3',
    ]);
    expect(records[3]).toEqual([
      '4',
      '5',
      'y',
      '',
      'MalformedRow: line 4: 5 cell(s), but the header has 3 (left out of the output: extra,more)',
    ]);
    expect(records[4]![3]).toBe('');
    expect(records[4]![4]).toMatch(/^MalformedRow: line 5: a quoted cell in column 1/);
    expect(records[5]).toEqual(['8', '9', 'z', '17', '']);
    // Without a header, the first row sets the width.
    const bare = await tmp.file('bare.csv', 'x,1,2\ny,3\nz,4,5,6\n');
    const io2 = fakeIo(withRunner());
    expect(await main(['run', fn, bare, '--columns', '2,3'], io2)).toBe(ExitCode.FunctionError);
    expect(io2.out()).toBe(
      'x,1,2,3,\ny,3,,,"MalformedRow: line 2: 2 cell(s), but the first row has 3"\n' +
        'z,4,5,,"MalformedRow: line 3: 4 cell(s), but the first row has 3 (left out of the output: 6)"\n',
    );
  });

  test('CSV text cells that start with = + - @ are neutralised, numbers are not; --keep-formulas keeps them raw', async () => {
    const fn = await tmp.file(
      'label.json',
      JSON.stringify({
        ...add,
        name: 'label',
        body: 'args[0] < 0 ? "-" + (-args[0]) : "=HYPERLINK(\\"http://x.invalid/?\\" & A1)"',
        returnType: 'text',
      }),
    );
    const rows = await tmp.file('rows.csv', 'name,a,b\n@SUM(A1),1,2\n+x,-5,0\n-1e3,-Infinity,0\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--header', '--columns', 'a,b'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe(
      'name,a,b,result,error\n' +
        `'@SUM(A1),1,2,"'=HYPERLINK(""http://x.invalid/?"" & A1)",\n` +
        "'+x,-5,0,-5,\n" +
        '-1e3,-Infinity,0,-Infinity,\n',
    );
    const raw = fakeIo(withRunner());
    expect(
      await main(['run', fn, rows, '--header', '--columns', 'a,b', '--keep-formulas'], raw),
    ).toBe(ExitCode.Ok);
    expect(raw.out()).toContain('@SUM(A1),1,2,"=HYPERLINK(');
    expect(raw.out()).toContain('\n+x,-5,0,-5,\n');
  });

  test('a CSV file that starts with a byte-order mark (Excel\'s "CSV UTF-8") gets one in its output; one without, none', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const cases: Array<[string, string[], string]> = [
      ['\uFEFFx,y\r\n1,2\r\n', ['--header'], '\uFEFFx,y,result,error\r\n1,2,3,\r\n'],
      ['\uFEFF1,2\n', [], '\uFEFF1,2,3,\n'],
      ['\uFEFF', [], '\uFEFF'],
      ['x,y\n1,2\n', ['--header'], 'x,y,result,error\n1,2,3,\n'],
    ];
    for (const [csv, flags, expected] of cases) {
      const rows = await tmp.file('bom.csv', csv);
      const io = fakeIo(withRunner());
      expect(await main(['run', fn, rows, ...flags], io)).toBe(ExitCode.Ok);
      expect(io.out(), JSON.stringify(csv)).toBe(expected);
      const out = join(tmp.dir, 'out.csv');
      expect(await main(['run', fn, rows, ...flags, '-o', out], fakeIo(withRunner()))).toBe(
        ExitCode.Ok,
      );
      expect(await readFile(out, 'utf8')).toBe(expected);
    }
    // JSON lines never start with one (RFC 8259), whatever the input did.
    const jsonl = await tmp.file('bom.jsonl', '\uFEFF[1,2]\n');
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, jsonl], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('{"args":[1,2],"result":3}\n');
  });

  test('JSON lines: a row is echoed from its first to its last character; the blanks around it go, none inside', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file(
      'spaced.jsonl',
      ' \t{ "x" : 1 ,\t"y":2, "note":"  two  spaces " }  \r\n  [ 3 , 4 ]\t\n',
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'x,y'], io)).toBe(ExitCode.FunctionError);
    const [object, array] = io.out().split('\n');
    expect(object).toBe('{ "x" : 1 ,\t"y":2, "note":"  two  spaces " ,"result":3}');
    expect(array).toMatch(/^\{"args":\[ 3 , 4 \],"error":/);
  });

  test('JSON lines: an array among object rows is that row error; 1e400 is refused and echoed as written', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file(
      'rows.jsonl',
      '{"x":1,"y":2}\n[3,4]\n{"x":1e400,"y":1, "id":12345678901234567890}\n{"x":5,"y":6}\n',
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'x,y'], io)).toBe(ExitCode.FunctionError);
    const lines = io.out().trimEnd().split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toBe('{"x":1,"y":2,"result":3}');
    expect(JSON.parse(lines[1]!)).toMatchObject({
      args: [3, 4],
      error: {
        kind: 'MalformedRow',
        message: expect.stringContaining('JSON array, but --columns names keys'),
      },
    });
    expect(lines[2]).toMatch(
      /^\{"x":1e400,"y":1, "id":12345678901234567890,"error":\{"kind":"MalformedRow","message":"line 3: key \\"x\\", argument 1 \(number\): the number is beyond the range of a 64-bit float/,
    );
    expect(lines[3]).toBe('{"x":5,"y":6,"result":11}');
    const arrays = await tmp.file('arrays.jsonl', '[1e400, 1]\n[1, 2]\n');
    const io2 = fakeIo(withRunner());
    expect(await main(['run', fn, arrays], io2)).toBe(ExitCode.FunctionError);
    expect(io2.out()).toMatch(/^\{"args":\[1e400, 1\],"error":\{"kind":"MalformedRow"/);
    expect(io2.out()).toContain('\n{"args":[1, 2],"result":3}\n');
  });

  test('Ctrl-C: exit 130, the previous -o file is left as it was and stderr says so', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(2_000));
    const out = await tmp.file('prev.csv', 'previous results\n');
    const controller = new AbortController();
    const runner = fakeRunner('wasm', { delayMs: 1 });
    const original = runner.callBatch!.bind(runner);
    runner.callBatch = async (f, r, b) => {
      const results = await original(f, r, b);
      controller.abort(new Interrupted('SIGINT'));
      return results;
    };
    const io = fakeIo(withRunner(runner), { signal: controller.signal });
    expect(await main(['run', fn, rows, '-o', out], io)).toBe(ExitCode.Interrupted);
    expect(await readFile(out, 'utf8')).toBe('previous results\n');
    expect(io.err()).toMatch(
      /interrupted \(SIGINT\) after [\d,]+ row\(s\); .*prev\.csv was not changed\n$/,
    );
    expect((await readdir(tmp.dir)).sort()).toEqual(['add.json', 'prev.csv', 'rows.csv']);
  });

  test('Ctrl-C while stdin is still open: standard input is let go of (so the process can exit), the rows written stay', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const controller = new AbortController();
    const stdin = openStdin('1,2\n');
    let out = '';
    const io = {
      ...fakeIo(withRunner(), { signal: controller.signal }),
      stdin: () => stdin,
      stdout: {
        write: (text: string) => {
          out += text;
          // Ctrl-C once the first row is out, while stdin has nothing more to say.
          controller.abort(new Interrupted('SIGINT'));
        },
      },
    };
    expect(await main(['run', fn, '-', '--format', 'csv'], io)).toBe(ExitCode.Interrupted);
    expect(out).toBe('1,2,3,\n');
    expect(io.err()).toBe(
      'improv-extfn: interrupted (SIGINT) after 1 row(s); the rows written above are not all of them\n',
    );
    expect(stdin.destroyed).toBe(true);
  });

  test('a reader that goes away (EPIPE) ends the run without evaluating the rest', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(20_000));
    const stdout = new EventEmitter() as EventEmitter & { write(s: string): boolean };
    let written = '';
    stdout.write = (text: string) => {
      written += text;
      setImmediate(() =>
        stdout.emit('error', Object.assign(new Error('write EPIPE'), { code: 'EPIPE' })),
      );
      return true;
    };
    const runner = fakeRunner();
    const io = fakeIo(withRunner(runner), { stdout });
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Ok);
    expect(written.startsWith('1,2,3,\n')).toBe(true);
    expect(runner.rowsEvaluated).toBeLessThan(20_000);
    expect(io.err()).toBe('');
  });

  test('-o replaces the file only at the end, keeping its permissions', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n');
    const out = await tmp.file('out.csv', 'old\n');
    await chmod(out, 0o640);
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '-o', out], io)).toBe(ExitCode.Ok);
    expect(await readFile(out, 'utf8')).toBe('1,2,3,\n');
    expect((await stat(out)).mode & 0o777).toBe(0o640);
    expect((await readdir(tmp.dir)).sort()).toEqual(['add.json', 'out.csv', 'rows.csv']);
  });

  test('a Timeout or memory failure says which flag raises the limit', async () => {
    const runner = fakeRunner();
    runner.call = async (f) => {
      throw ExtFnError.timeout(f.name, 5000);
    };
    const fn = await tmp.file('add.json', JSON.stringify(add));
    let io = fakeIo(withRunner(runner));
    expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.FunctionError);
    expect(io.err()).toContain('fix: if the function needs longer, raise the limit with --timeout');
    const rows = await tmp.file('rows.csv', '1,2\n3,4\n');
    io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.FunctionError);
    expect(io.err().match(/fix: .*--timeout/g)).toHaveLength(1);
    runner.call = async (f) => {
      throw ExtFnError.runtime(f.name, 'MemoryError', { limit: 'memory' });
    };
    io = fakeIo(withRunner(runner));
    expect(await main(['eval', fn, '1', '2'], io)).toBe(ExitCode.FunctionError);
    expect(io.err()).toContain('raise the limit with --memory');
  });

  test('--json gives the same limit and library fixes as stderr: eval in the error, run in the summary', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n3,4\n');
    const runner = fakeRunner();
    const failWith = (error: ExtFnError) => {
      runner.call = async () => {
        throw error;
      };
      runner.callBatch = async (_f, r) => r.map(() => error);
    };
    const cases: [ExtFnError, RegExp][] = [
      [
        ExtFnError.timeout('add', 1000),
        /^if the function needs longer, raise the limit with --timeout/,
      ],
      [
        ExtFnError.runtime('add', 'MemoryError', { limit: 'memory' }),
        /^if the function needs more memory, raise the limit with --memory/,
      ],
      [
        ExtFnError.runtime('add', "ModuleNotFoundError: No module named 'numpy'"),
        /^a Python body imports the standard library and what --libraries allows: .*numpy must be installed there$/,
      ],
    ];
    for (const [error, fix] of cases) {
      failWith(error);
      let io = fakeIo(withRunner(runner));
      expect(await main(['eval', fn, '1', '2', '--json'], io)).toBe(ExitCode.FunctionError);
      expect(JSON.parse(io.out()).error.fix).toMatch(fix);
      io = fakeIo(withRunner(runner));
      expect(await main(['run', fn, rows, '--json'], io)).toBe(ExitCode.FunctionError);
      const summary = JSON.parse(io.err().trim().split('\n').at(-1)!);
      expect(summary).toMatchObject({ rows: 2, failed: 2 });
      expect(summary.fixes).toHaveLength(1);
      expect(summary.fixes[0]).toMatch(fix);
    }
  });
});

describe('descriptor files', () => {
  test('an engine model file: --name picks a function; a missing name lists them', async () => {
    const model = await tmp.file('model.json', JSON.stringify(engineSerdeFixture));
    const io = fakeIo(withRunner());
    expect(await main(['eval', model, '1'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('holds 6 functions');
    expect(io.err()).toContain(
      'pick one with --name: hypot, hyp_r, add_jl, add_pure, double, stamp',
    );
    const wrong = fakeIo(withRunner());
    expect(await main(['eval', model, '--name', 'triple', '1'], wrong)).toBe(ExitCode.BadInput);
    expect(wrong.err()).toContain('has no function named triple');
    expect(wrong.err()).toContain('use --name with one of: hypot, hyp_r');
    const picked = fakeIo(withRunner(), {});
    // The fake wasm runner evaluates JavaScript, so the WAT body fails to run; it was picked and loaded.
    await main(['eval', model, '--name', 'double', '21'], picked);
    expect(picked.err()).not.toContain('invalid descriptor');
  });

  test('functions that repeat a name: exit 2 naming the name and where, with or without --name', async () => {
    const file = await tmp.file(
      'two.json',
      JSON.stringify([add, { ...add, body: 'args[0] - args[1]' }]),
    );
    for (const pick of [[], ['--name', 'add']]) {
      const io = fakeIo(withRunner());
      expect(await main(['eval', file, ...pick, '1', '2'], io)).toBe(ExitCode.BadInput);
      expect(io.err()).toBe(
        `improv-extfn: ${file}: 2 functions are named "add" ([0], [1])\n` +
          '  fix: give each function its own name: --name picks a function by name\n',
      );
      expect(io.out()).toBe('');
    }
  });

  test('a descriptor from standard input (-)', async () => {
    const io = fakeIo(withRunner(), { stdin: JSON.stringify(add) });
    expect(await main(['eval', '-', '2', '3'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('5\n');
  });

  test('Ctrl-C while the descriptor is read from a standard input that stays open: interrupted, not waiting for its end', async () => {
    const controller = new AbortController();
    const stdin = openStdin('{"name":', () => controller.abort(new Interrupted('SIGINT')));
    const io = { ...fakeIo(withRunner(), { signal: controller.signal }), stdin: () => stdin };
    expect(await main(['eval', '-', '1', '2'], io)).toBe(ExitCode.Interrupted);
    expect(io.err()).toBe('improv-extfn: interrupted (SIGINT) before the call finished\n');
    expect(stdin.destroyed).toBe(true);
  });

  test('invalid JSON names the line and column', async () => {
    const fn = await tmp.file('bad.json', '{\n  "name": "f",\n  "body": x\n}\n');
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('bad.json is not valid JSON: line 3, column 11: Unexpected token');
  });

  test('a raw line break or tab in a body gets the fix to write it as \\n or \\t', async () => {
    const file = await tmp.file(
      'nl.json',
      '{"name": "f", "language": "python", "body": "x = 1\nresult = x", "argTypes": [], "returnType": "number"}',
    );
    let io = fakeIo(withRunner());
    expect(await main(['eval', file], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toBe(
      `improv-extfn: ${file} is not valid JSON: line 1, column 51: Bad control character in string literal\n` +
        '  fix: the value of "body" holds a line break as it is, which JSON does not allow: ' +
        'inside a string write line breaks as \\n and tabs as \\t ("body": "x = 1\\nresult = x * 2")\n',
    );
    const tab = await tmp.file('tab.json', '{"name": "f", "body": "\tresult = 1"}');
    io = fakeIo(withRunner(), {});
    expect(await main(['eval', tab, '--json'], io)).toBe(ExitCode.BadInput);
    expect(JSON.parse(io.out()).error.fix).toMatch(
      /^the value of "body" holds a tab as it is, .*write line breaks as \\n and tabs as \\t/,
    );
  });

  test('fix hints name environment variables, not API options', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const runner = fakeRunner();
    runner.callBatch = async (f, rows) =>
      rows.map(
        () =>
          new ExtFnError('LanguageUnavailable', `function ${f.name}: no python3 found`, {
            fix: 'install Python 3, or set IMPROV_EXTFN_PYTHON or the `interpreter` option to its path',
          }),
      );
    const rows = await tmp.file('rows.csv', '1,2\n');
    const io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Unavailable);
    expect(io.err()).toContain('fix: install Python 3, or set IMPROV_EXTFN_PYTHON to its path\n');
    expect(io.err()).not.toContain('option');
  });

  test('--json errors use the same wording as stderr; the other fields are unchanged', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const failWith = (error: ExtFnError) => {
      const runner = fakeRunner();
      runner.call = async () => {
        throw error;
      };
      runner.callBatch = async (_f, rows) => rows.map(() => error);
      return fakeIo(withRunner(runner));
    };
    let io = failWith(
      new ExtFnError(
        'LanguageUnavailable',
        'function add: no python3 found; install Python 3, or set IMPROV_EXTFN_PYTHON or the `interpreter` option to its path',
        {
          functionName: 'add',
          language: 'python',
          fix: 'install Python 3, or set IMPROV_EXTFN_PYTHON or the `interpreter` option to its path',
        },
      ),
    );
    expect(await main(['eval', fn, '1', '2', '--json'], io)).toBe(ExitCode.Unavailable);
    expect(JSON.parse(io.out())).toEqual({
      ok: false,
      error: {
        kind: 'LanguageUnavailable',
        message:
          'function add: no python3 found; install Python 3, or set IMPROV_EXTFN_PYTHON to its path',
        functionName: 'add',
        language: 'python',
        fix: 'install Python 3, or set IMPROV_EXTFN_PYTHON to its path',
      },
    });
    io = failWith(
      new ExtFnError(
        'Timeout',
        'function add: timed out after 5000 ms; raise the timeoutMs option',
        {
          functionName: 'add',
          ms: 5000,
          limit: 'wall-clock',
          fix: 'raise the timeoutMs option',
        },
      ),
    );
    expect(await main(['eval', fn, '1', '2', '--json'], io)).toBe(ExitCode.FunctionError);
    expect(JSON.parse(io.out())).toEqual({
      ok: false,
      error: {
        kind: 'Timeout',
        message: 'function add: timed out after 5000 ms; raise --timeout',
        functionName: 'add',
        ms: 5000,
        limit: 'wall-clock',
        // The error's own fix, then the one stderr adds for the limit.
        fix: 'raise --timeout; if the function needs longer, raise the limit with --timeout (e.g. --timeout 30s; default 5s)',
      },
    });
  });
});

describe('third-party runners', () => {
  const cobol = {
    name: 'twice',
    language: 'cobol',
    body: 'args[0] * 2',
    argTypes: ['number'],
    returnType: 'number',
  };

  test('--runner loads a package by its default export; the language is then known', async () => {
    const fn = await tmp.file('twice.json', JSON.stringify(cobol));
    let io = fakeIo({});
    expect(await main(['eval', fn, '4'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('load a runner package for it with --runner PACKAGE');
    const runner = fakeRunner('cobol');
    io = fakeIo({ 'extfn-cobol': { default: () => runner } });
    expect(await main(['eval', fn, '4', '--runner', 'extfn-cobol'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('8\n');
    expect(runner.closed).toBe(1);
  });

  test('IMPROV_EXTFN_RUNNERS, createRunner and PACKAGE#NAME', async () => {
    const fn = await tmp.file('twice.json', JSON.stringify(cobol));
    let io = fakeIo(
      { 'extfn-cobol': { createRunner: () => fakeRunner('cobol') } },
      { env: { IMPROV_EXTFN_RUNNERS: ' extfn-cobol ' } },
    );
    expect(await main(['eval', fn, '5'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('10\n');
    io = fakeIo({ 'extfn-cobol': { cobol: () => fakeRunner('cobol') } });
    expect(await main(['eval', fn, '6', '--runner', 'extfn-cobol#cobol'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toBe('12\n');
  });

  test('a runner package without a factory stops the command with the fix (exit 3)', async () => {
    const fn = await tmp.file('twice.json', JSON.stringify(cobol));
    const io = fakeIo({ 'extfn-cobol': { something: 1 } });
    expect(await main(['eval', fn, '4', '--runner', 'extfn-cobol'], io)).toBe(ExitCode.Unavailable);
    expect(io.err()).toContain('runner extfn-cobol: extfn-cobol exports no runner factory');
    expect(io.err()).toContain('fix: name the factory: --runner extfn-cobol#NAME');
  });

  test('doctor lists a third-party runner like ours', async () => {
    const io = fakeIo({ ...withRunner(), 'extfn-cobol': { default: () => fakeRunner('cobol') } });
    expect(await main(['doctor', '--runner', 'extfn-cobol'], io)).toBe(ExitCode.Ok);
    expect(io.out()).toMatch(/^cobol +ok +\(extfn-cobol, third-party\)$/m);
    expect(io.out()).toContain('can run: wasm, cobol');
  });
});

describe('terminal safety', () => {
  const evil = {
    ...add,
    name: 'evil',
    body: '"ok\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\\rX\\u009b31m"',
    returnType: 'text',
  };

  test('control characters are escaped on a terminal, kept exactly elsewhere', async () => {
    const fn = await tmp.file('evil.json', JSON.stringify(evil));
    const tty = fakeIo(withRunner(), { stdoutTTY: true });
    expect(await main(['eval', fn, '1', '2'], tty)).toBe(ExitCode.Ok);
    expect(tty.out()).toBe('ok\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\\u000dX\\u009b31m\n');
    const pipe = fakeIo(withRunner());
    expect(await main(['eval', fn, '1', '2'], pipe)).toBe(ExitCode.Ok);
    expect(pipe.out()).toBe('ok\u001b]52;c;ZXZpbA==\u0007\u001b[2J\rX\u009b31m\n');
    const json = fakeIo(withRunner(), { stdoutTTY: true });
    expect(await main(['eval', fn, '1', '2', '--json'], json)).toBe(ExitCode.Ok);
    expect(json.out()).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(JSON.parse(json.out()).result.value).toBe(
      'ok\u001b]52;c;ZXZpbA==\u0007\u001b[2J\rX\u009b31m',
    );
  });
});

describe('doctor', () => {
  test('reports each language, the fix for what is missing, and the sandbox package', async () => {
    const io = fakeIo({
      ...withRunner(),
      '@improv/extfn-r': {
        r: () => {
          throw new Error('not implemented yet');
        },
      },
    });
    expect(await main(['doctor'], io)).toBe(ExitCode.Ok);
    const text = io.out();
    expect(text).toMatch(/^wasm +ok +\(@improv\/extfn-wasm\)$/m);
    expect(text).toMatch(/^r +runner unusable +\(@improv\/extfn-r\)$/m);
    expect(text).toContain('r() failed: not implemented yet');
    expect(text).toMatch(/^python +not installed/m);
    expect(text).toContain('fix: install it: npm install @improv/extfn-python');
    expect(text).toContain('sandbox package unavailable');
    expect(text).toContain('can run: wasm');
  });

  test('--json, and exit 3 when no language can run', async () => {
    const io = fakeIo({});
    expect(await main(['doctor', '--json'], io)).toBe(ExitCode.Unavailable);
    const report = JSON.parse(io.out());
    expect(report.ok).toBe(false);
    expect(report.languages.map((l: { language: string }) => l.language)).toEqual([
      'python',
      'r',
      'julia',
      'pure',
      'wasm',
    ]);
    expect(report.sandbox).toMatchObject({ probed: false, ok: false });
  });
});

describe('the command line', () => {
  test('no command prints help and exits 2; unknown commands exit 2', async () => {
    let io = fakeIo({});
    expect(await main([], io)).toBe(ExitCode.BadInput);
    expect(io.out()).toContain('Usage: improv-extfn <command>');
    io = fakeIo({});
    expect(await main(['frobnicate'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain('unknown command frobnicate');
  });

  test('help --help, -V and --version (listed in the help)', async () => {
    const help = fakeIo({});
    expect(await main(['help', '--help'], help)).toBe(ExitCode.Ok);
    expect(help.out()).toContain('Usage: improv-extfn <command>');
    expect(help.out()).toContain('-V, --version');
    const { version } = JSON.parse(
      await readFile(join(import.meta.dirname, '../package.json'), 'utf8'),
    );
    for (const flag of ['-V', '--version']) {
      const io = fakeIo({});
      expect(await main([flag], io)).toBe(ExitCode.Ok);
      expect(io.out()).toBe(`${version}\n`);
    }
  });

  test('help COMMAND equals COMMAND --help', async () => {
    for (const command of ['eval', 'run', 'doctor']) {
      const a = fakeIo({});
      const b = fakeIo({});
      expect(await main(['help', command], a)).toBe(ExitCode.Ok);
      expect(await main([command, '--help'], b)).toBe(ExitCode.Ok);
      expect(a.out()).toBe(b.out());
      expect(a.out()).toContain('Example');
    }
  });
});
