/** The commands in-process, with a fake runner: the logic, without an interpreter. */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { ExitCode } from '../src/exit-codes.js';
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
        'short,3,,"MalformedRow: line 4: 2 cell(s), but the header has 3"',
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

  test('rows refused by the sandbox make the run exit 3, not 1', async () => {
    const runner = fakeRunner();
    runner.callBatch = async (fn, rows) =>
      rows.map(() =>
        ExtFnError.sandbox('bubblewrap is not installed', 'apt-get install bubblewrap', {
          functionName: fn.name,
        }),
      );
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n3,4\n');
    const io = fakeIo(withRunner(runner));
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Unavailable);
    expect(io.out()).toBe(
      '1,2,,Sandbox: bubblewrap is not installed; apt-get install bubblewrap\n3,4,,Sandbox: bubblewrap is not installed; apt-get install bubblewrap\n',
    );
    expect(io.err()).toContain('(Sandbox 2)');
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
      '{"args":[1,2],"result":1}\n{"args":["Infinity",1],"result":"Infinity"}\n' +
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

  test('a progress bar is drawn on a terminal when the run is long, and cleared', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n'.repeat(30));
    const io = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
      isTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows], io)).toBe(ExitCode.Ok);
    expect(io.err()).toMatch(/\r\[[#-]+\] +\d+% \d+\/30 rows · [\d,]+ rows\/s/);
    expect(io.err()).toContain('\r\u001b[K');
    const quiet = fakeIo(withRunner(fakeRunner('wasm', { delayMs: 10 })), {
      isTTY: true,
      progressDelayMs: 0,
    });
    expect(await main(['run', fn, rows, '--no-progress'], quiet)).toBe(ExitCode.Ok);
    expect(quiet.err()).not.toContain('\r');
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
