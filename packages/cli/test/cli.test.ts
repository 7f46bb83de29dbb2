/** The real `improv-extfn` bin as a subprocess, with the real runners (skipped, with the reason, where one is missing). */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BIN, cli, EXAMPLES, languageStatus, scratch, skipNote, TEST_ENV } from './helpers.js';

const wasm = await languageStatus('wasm');
const python = await languageStatus('python');
const r = await languageStatus('r');
const julia = await languageStatus('julia');
/** The fastest real runner here, for the big run. */
const bulk = wasm.ready ? 'wasm' : python.ready ? 'python' : undefined;

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeAll(async () => {
  tmp = await scratch();
});
afterAll(async () => {
  await tmp.cleanup();
});

const spin = {
  name: 'spin',
  language: 'wasm',
  body: 'wat:(module (func (export "improv_call") (param f64) (result f64) (loop $l (br $l)) (local.get 0)))',
  argTypes: ['number'],
  returnType: 'number',
};

describe('help and usage', () => {
  test('--help on every command, with an example, exit 0', async () => {
    for (const args of [
      ['--help'],
      ['eval', '--help'],
      ['run', '-h'],
      ['doctor', '--help'],
      ['help', 'run'],
    ]) {
      const result = await cli(args);
      expect(result.exitCode, args.join(' ')).toBe(0);
      expect(result.stdout).toMatch(/^Usage: improv-extfn/);
      expect(result.stdout).toContain('Example');
      expect(result.stdout).toContain('Exit codes:');
      expect(result.stderr).toBe('');
    }
  });

  test('unknown commands and flags exit 2; no flag loosens the sandbox', async () => {
    expect(await cli(['launch'])).toMatchObject({ exitCode: 2, stdout: '' });
    const flag = await cli(['eval', 'distance.json', '3', '4', '--unsandboxed']);
    expect(flag.exitCode).toBe(2);
    expect(flag.stderr).toContain("Unknown option '--unsandboxed'");
    expect(flag.stderr).toContain('fix: see improv-extfn eval --help;');
  });
});

describe('bad descriptor files', () => {
  test('a missing field is named (exit 2)', async () => {
    const file = await tmp.file(
      'nobody.json',
      JSON.stringify({ name: 'f', language: 'python', argTypes: [], returnType: 'number' }),
    );
    const result = await cli(['eval', file]);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain('invalid descriptor "f":\n  body: missing (expected string)');
    expect(result.stdout).toBe('');
  });

  test('a wrong type name lists the type names (exit 2)', async () => {
    const file = await tmp.file(
      'float.json',
      JSON.stringify({
        name: 'f',
        language: 'python',
        body: '',
        argTypes: ['float'],
        returnType: 'number',
      }),
    );
    const result = await cli(['run', file, 'rows.csv']);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toContain(
      'argTypes[0]: expected one of number, boolean, text, datetime, enum',
    );
  });

  test('an unknown language names the known ones (exit 2)', async () => {
    const file = await tmp.file(
      'cobol.json',
      JSON.stringify({
        name: 'f',
        language: 'cobol',
        body: '',
        argTypes: [],
        returnType: 'number',
      }),
    );
    const result = await cli(['eval', file, '--json']);
    expect(result.exitCode).toBe(2);
    expect(JSON.parse(result.stdout)).toEqual({
      ok: false,
      error: {
        kind: 'BadInput',
        message: `${file}: function f has language "cobol", which improv-extfn does not know`,
        fix: 'use one of python, r, julia, pure, wasm',
      },
    });
  });

  test('a file that is not there, or not JSON (exit 2)', async () => {
    const missing = await cli(['eval', 'nope.json']);
    expect(missing.exitCode).toBe(2);
    expect(missing.stderr).toContain('cannot read descriptor file nope.json: no such file');
    const notJson = await cli(['eval', 'rows.csv']);
    expect(notJson.exitCode).toBe(2);
    expect(notJson.stderr).toContain('rows.csv is not valid JSON');
  });
});

describe('eval', () => {
  test('arguments that do not parse name the argument, the function and the fix (exit 2)', async () => {
    const result = await cli(['eval', 'distance.json', '3', '4km']);
    expect(result.exitCode).toBe(2);
    expect(result.stderr).toBe(
      'improv-extfn: function distance, argument 2 (number): "4km" is not a number\n' +
        '  fix: write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity\n',
    );
    const count = await cli(['eval', 'distance.json', '3']);
    expect(count.exitCode).toBe(2);
    expect(count.stderr).toContain('function distance takes 2 argument(s) (number, number), got 1');
  });

  test.skipIf(!wasm.ready)(
    `wasm: distance 3 -4 → 5, negative numbers are arguments${skipNote(wasm)}`,
    async () => {
      expect(await cli(['eval', 'distance.json', '3', '-4'])).toEqual({
        exitCode: 0,
        stdout: '5\n',
        stderr: '',
      });
      const json = await cli(['eval', 'distance.json', '-Infinity', '0', '--json']);
      expect(JSON.parse(json.stdout)).toMatchObject({
        ok: true,
        result: { type: 'number', value: 'Infinity' },
      });
    },
  );

  test.skipIf(!wasm.ready)(
    `wasm: --timeout stops a runaway loop, exit 1${skipNote(wasm)}`,
    async () => {
      const file = await tmp.file('spin.json', JSON.stringify(spin));
      const result = await cli(['eval', file, '1', '--timeout', '500ms']);
      expect(result.exitCode).toBe(1);
      expect(result.stderr).toContain('Timeout: function spin: timed out after 500 ms');
    },
  );

  test.skipIf(!python.ready)(
    `python: growth, and a raising body exits 1${skipNote(python)}`,
    async () => {
      expect(await cli(['eval', 'growth.json', '1000', '0.05', '10'])).toEqual({
        exitCode: 0,
        stdout: '1628.894626777442\n',
        stderr: '',
      });
      const failed = await cli(['eval', 'growth.json', '1000', '-2', '10']);
      expect(failed.exitCode).toBe(1);
      expect(failed.stderr).toContain(
        'Runtime: function growth: ValueError: rate must be above -1, got -2.0',
      );
    },
  );

  test.skipIf(!python.ready)(
    `python: datetime, enum and text arguments as typed${skipNote(python)}`,
    async () => {
      const stamp = await tmp.file(
        'stamp.json',
        JSON.stringify({
          name: 'stamp',
          language: 'Python',
          body: "result = args[0].isoformat() + ' / ' + str(args[1]) + ' / ' + args[2]",
          arg_types: ['DateTime', 'Enum', 'Text'],
          return_type: 'Text',
          pure: false,
        }),
      );
      const result = await cli(['eval', stamp, '2025-03-31T14:00:00+02:00', '3', '--', '-x, "y"']);
      expect(result).toEqual({
        exitCode: 0,
        stdout: '2025-03-31T12:00:00+00:00 / 3 / -x, "y"\n',
        stderr: '',
      });
      const badEnum = await cli(['eval', stamp, '2025-03-31', '-1', 'z']);
      expect(badEnum.exitCode).toBe(2);
      expect(badEnum.stderr).toContain(
        'function stamp, argument 2 (enum): "-1" is not an enum index',
      );
    },
  );

  test.skipIf(!r.ready)(
    `r: tax (engine serde descriptor), stop() exits 1${skipNote(r)}`,
    async () => {
      expect(await cli(['eval', 'tax.json', '52000'])).toEqual({
        exitCode: 0,
        stdout: '10800\n',
        stderr: '',
      });
      const failed = await cli(['eval', 'tax.json', '-5']);
      expect(failed.exitCode).toBe(1);
      expect(failed.stderr).toContain('income must be a non-negative number');
    },
  );

  test.skipIf(julia.ready)(
    'a language whose interpreter is missing is LanguageUnavailable, exit 3 (skipped: julia is installed here)',
    async () => {
      const file = await tmp.file(
        'jl.json',
        JSON.stringify({
          name: 'add_jl',
          language: 'Julia',
          body: 'result = args[1] + args[2]',
          arg_types: ['Number', 'Number'],
          return_type: 'Number',
        }),
      );
      const result = await cli(['eval', file, '1', '2', '--json']);
      expect(result.exitCode).toBe(3);
      expect(JSON.parse(result.stdout)).toMatchObject({
        ok: false,
        error: { kind: 'LanguageUnavailable' },
      });
    },
  );
});

describe('run', () => {
  test.skipIf(!wasm.ready)(
    `malformed CSV rows are reported with line numbers; the others are evaluated${skipNote(wasm)}`,
    async () => {
      const rows = await tmp.file('mixed.csv', 'x,y\n3,4\n5,"12\n6,8,9\nnine,12\n"8",15\n');
      const result = await cli(['run', 'distance.json', rows, '--header']);
      expect(result.exitCode).toBe(1);
      expect(result.stdout).toBe(
        [
          'x,y,result,error',
          '3,4,5,',
          '"5,""12",,"MalformedRow: line 3: the quoted cell in column 2 is not closed properly (its closing quote is not followed by a comma or a line end, read up to line 6)"',
          '6,8,9,,"MalformedRow: line 4: 3 cell(s), but the header has 2"',
          'nine,12,,"MalformedRow: line 5: column 1 (x), argument 1 (number): ""nine"" is not a number; write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity"',
          '8,15,17,',
          '',
        ].join('\n'),
      );
      expect(result.stderr).toContain(
        '  MalformedRow: line 3: the quoted cell in column 2 is not closed properly',
      );
      expect(result.stderr).toContain('  MalformedRow: line 4: 3 cell(s), but the header has 2\n');
      expect(result.stderr).toMatch(/5 row\(s\): 2 ok, 3 failed \(MalformedRow 3\)/);
    },
  );

  test.skipIf(!wasm.ready)(`an empty table: no rows, exit 0${skipNote(wasm)}`, async () => {
    const empty = await tmp.file('empty.csv', '');
    const result = await cli(['run', 'distance.json', empty]);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^improv-extfn: 0 row\(s\): 0 ok, 0 failed in [\d.]+ s/);
    const emptyLines = await cli(['run', 'distance.json', '-', '--format', 'jsonl', '--json'], {
      input: '\n',
    });
    expect(emptyLines.exitCode).toBe(0);
    expect(JSON.parse(emptyLines.stderr)).toMatchObject({ rows: 0, ok: 0, failed: 0 });
  });

  test.skipIf(!wasm.ready)(`rows from stdin as JSON lines${skipNote(wasm)}`, async () => {
    const result = await cli(
      ['run', 'distance.json', '-', '--format', 'jsonl', '--columns', 'x,y'],
      {
        input: '{"site":"a","x":6,"y":8}\n{"site":"b","x":"NaN","y":1}\n',
      },
    );
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe(
      '{"site":"a","x":6,"y":8,"result":10}\n{"site":"b","x":"NaN","y":1,"result":"NaN"}\n',
    );
  });

  test.skipIf(!wasm.ready)(
    `a row that hangs is a Timeout on that row only${skipNote(wasm)}`,
    async () => {
      const body =
        'wat:(module (func (export "improv_call") (param f64) (result f64) (if (f64.lt (local.get 0) (f64.const 0)) (then (loop $l (br $l)))) (local.get 0)))';
      const file = await tmp.file(
        'maybe-spin.json',
        JSON.stringify({ ...spin, name: 'maybe', body }),
      );
      const rows = await tmp.file('spin.csv', '1\n-1\n2\n');
      const result = await cli(['run', file, rows, '--timeout', '500ms']);
      expect(result.exitCode).toBe(1);
      expect(result.stdout).toBe('1,1,\n-1,,Timeout: timed out after 500 ms\n2,2,\n');
      expect(result.stderr).toContain('(Timeout 1)');
    },
  );

  test.skipIf(!bulk)(
    `100,000 rows finish with the right count (${bulk ?? 'no runner'})${bulk ? '' : ` (skipped: neither wasm (${wasm.reason}) nor python (${python.reason}) is available)`}`,
    async () => {
      const n = 100_000;
      const rows = await tmp.file(
        'big.csv',
        Array.from({ length: n }, (_, i) => `${i},${i % 7}`).join('\n'),
      );
      const fn =
        bulk === 'wasm'
          ? join(EXAMPLES, 'distance.json')
          : await tmp.file(
              'py.json',
              JSON.stringify({
                name: 'd',
                language: 'python',
                body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
                argTypes: ['number', 'number'],
                returnType: 'number',
                pure: true,
              }),
            );
      const out = join(tmp.dir, 'big.out.csv');
      const result = await cli(['run', fn, rows, '-o', out, '--json'], { timeout: 240_000 });
      expect(result.exitCode).toBe(0);
      const summary = JSON.parse(result.stderr);
      expect(summary).toMatchObject({ rows: n, ok: n, failed: 0, errors: {} });
      const lines = (await readFile(out, 'utf8')).trimEnd().split('\n');
      expect(lines).toHaveLength(n);
      expect(lines[0]).toBe('0,0,0,');
      expect(lines[n - 1]).toBe(`${n - 1},${(n - 1) % 7},${Math.hypot(n - 1, (n - 1) % 7)},`);
    },
    240_000,
  );

  test.skipIf(!wasm.ready || process.platform !== 'linux')(
    `Ctrl-C cancels a run and exits 130${process.platform === 'linux' ? skipNote(wasm) : ' (skipped: reads /proc)'}`,
    async () => {
      const file = await tmp.file('spin2.json', JSON.stringify(spin));
      const rows = await tmp.file('spin2.csv', '1\n2\n3\n4\n');
      const child = execa('node', [BIN, 'run', file, rows, '--timeout', '60s'], {
        reject: false,
        env: TEST_ENV,
        timeout: 30_000,
      });
      // Wait until the bin has installed its SIGINT handler (Linux shows caught signals in SigCgt).
      const caughtSigint = async () => {
        const status = await readFile(`/proc/${child.pid}/status`, 'utf8').catch(() => '');
        const mask = /^SigCgt:\s*([0-9a-f]+)$/m.exec(status)?.[1];
        return mask !== undefined && (BigInt(`0x${mask}`) & 2n) !== 0n;
      };
      for (let i = 0; i < 200 && !(await caughtSigint()); i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      await new Promise((resolve) => setTimeout(resolve, 300)); // into the run
      child.kill('SIGINT');
      const result = await child;
      expect(result.exitCode).toBe(130);
      expect(result.timedOut).toBe(false);
    },
  );
});

describe('doctor', () => {
  test('lists every language with its state and the sandbox; --json parses', async () => {
    const text = await cli(['doctor']);
    const anyReady = [wasm, python, r].some((s) => s.ready);
    expect(text.exitCode).toBe(anyReady ? 0 : 3);
    for (const language of ['python', 'r', 'julia', 'pure', 'wasm']) {
      expect(text.stdout).toMatch(
        new RegExp(
          `^${language} +(ok|not installed|runner unusable|unavailable) +\\(@improv/extfn-${language}\\)$`,
          'm',
        ),
      );
    }
    expect(text.stdout).toMatch(/^sandbox/m);
    const json = await cli(['doctor', '--json']);
    expect(json.exitCode).toBe(text.exitCode);
    const report = JSON.parse(json.stdout);
    expect(report.languages).toHaveLength(5);
    expect(
      report.languages.find((l: { language: string }) => l.language === 'wasm').available,
    ).toBe(wasm.ready);
    expect(
      report.languages.find((l: { language: string }) => l.language === 'python').available,
    ).toBe(python.ready);
    expect(typeof report.sandbox.summary).toBe('string');
    for (const l of report.languages)
      if (!l.available) expect(l.fix ?? l.detail, l.language).toBeTruthy();
  });
});
