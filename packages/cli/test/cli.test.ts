/** The real `improv-extfn` bin as a subprocess, with the real runners (skipped, with the reason, where one is missing). */
import { cp, mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { BIN, cli, EXAMPLES, languageStatus, scratch, skipNote, TEST_ENV } from './helpers.js';

const JS_RUNNER_DIR = fileURLToPath(new URL('./fixtures/extfn-js/', import.meta.url));

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

describe('the command line', () => {
  test('help --help, -V and --version work, and the help lists them', async () => {
    const help = await cli(['help', '--help']);
    expect(help.exitCode).toBe(0);
    expect(help.stdout).toContain('-V, --version');
    const { version } = JSON.parse(await readFile(join(BIN, '../../package.json'), 'utf8'));
    expect(await cli(['-V'])).toEqual({ exitCode: 0, stdout: `${version}\n`, stderr: '' });
    expect(await cli(['--version'])).toEqual({ exitCode: 0, stdout: `${version}\n`, stderr: '' });
  });

  test('invalid JSON names the line and column', async () => {
    const file = await tmp.file('broken.json', '{\n  "name": "f",\n  "body": nope\n}\n');
    const result = await cli(['eval', file]);
    expect(result.exitCode).toBe(2);
    // "n" could start null: V8 stops at the "o".
    expect(result.stderr).toContain(
      "broken.json is not valid JSON: line 3, column 12: Unexpected token 'o'\n",
    );
  });

  test.skipIf(!wasm.ready)(`a descriptor from standard input${skipNote(wasm)}`, async () => {
    const result = await cli(['eval', '-', '6', '8'], {
      input: await readFile(join(EXAMPLES, 'distance.json'), 'utf8'),
    });
    expect(result).toEqual({ exitCode: 0, stdout: '10\n', stderr: '' });
  });

  test.skipIf(!wasm.ready)(
    `the engine's model file: --name picks a function, a missing name lists them${skipNote(wasm)}`,
    async () => {
      const model = await tmp.file('model.json', JSON.stringify(engineSerdeFixture));
      expect(await cli(['eval', model, '--name', 'double', '21'])).toEqual({
        exitCode: 0,
        stdout: '42\n',
        stderr: '',
      });
      const unnamed = await cli(['eval', model, '21']);
      expect(unnamed.exitCode).toBe(2);
      expect(unnamed.stderr).toContain(
        'fix: pick one with --name: hypot, hyp_r, add_jl, add_pure, double, stamp',
      );
    },
  );

  test('the --help examples work wherever the package is, from any directory', async () => {
    const elsewhere = await tmp.file('elsewhere.txt', '');
    const cwd = join(elsewhere, '..');
    const help = (await cli(['--help'], { cwd })).stdout;
    const commands = [...help.matchAll(/^ {2}improv-extfn (eval|run) (.+)$/gm)].map((m) => [
      m[1]!,
      ...m[2]!.split(' '),
    ]);
    expect(commands.length).toBeGreaterThanOrEqual(2);
    for (const command of commands) {
      const result = await cli(command, { cwd });
      // The Wasm examples need no interpreter: they run wherever this test does.
      expect(result.exitCode, `${command.join(' ')}: ${result.stderr}`).toBe(wasm.ready ? 0 : 3);
    }
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
        fix: 'use one of python, r, julia, pure, wasm, or load a runner package for it with --runner PACKAGE',
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
      expect(result.stderr).toContain(
        'fix: if the function needs longer, raise the limit with --timeout',
      );
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
    `python: a body over the memory limit says to raise it with --memory, which does${skipNote(python)}`,
    async () => {
      const hog = await tmp.file(
        'hog.json',
        JSON.stringify({
          name: 'hog',
          language: 'python',
          body: 'x = bytearray(int(args[0]) * 1024 * 1024)\nresult = len(x)',
          argTypes: ['number'],
          returnType: 'number',
        }),
      );
      const refused = await cli(['eval', hog, '1500']);
      expect(refused.exitCode).toBe(1);
      expect(refused.stderr).toContain('MemoryError');
      expect(refused.stderr).toContain(
        'fix: if the function needs more memory, raise the limit with --memory',
      );
      // Zeroing 1.5 GiB is 384 k first-touch page faults: seconds on a VM, so the
      // deadline is not what this checks.
      expect(await cli(['eval', hog, '1500', '--memory', '3GiB', '--timeout', '60s'])).toEqual({
        exitCode: 0,
        stdout: `${1500 * 1024 * 1024}\n`,
        stderr: '',
      });
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
          '"5,""12",,,"MalformedRow: line 3: the quoted cell in column 2 is not closed properly (its closing quote is not followed by a comma or a line end, read up to line 6)"',
          '6,8,,"MalformedRow: line 4: 3 cell(s), but the header has 2 (left out of the output: 9)"',
          'nine,12,,"MalformedRow: line 5: column 1 (x), argument 1 (number): ""nine"" is not a number; write a decimal number such as 42, -3.5, 1e-3, NaN, Infinity or -Infinity"',
          '8,15,17,',
          '',
        ].join('\n'),
      );
      expect(result.stderr).toContain(
        '  MalformedRow: line 3: the quoted cell in column 2 is not closed properly',
      );
      expect(result.stderr).toContain(
        '  MalformedRow: line 4: 3 cell(s), but the header has 2 (left out of the output: 9)\n',
      );
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

  test.skipIf(!wasm.ready)(
    `Ctrl-C cancels a running batch and exits 130${skipNote(wasm)}`,
    async () => {
      const body =
        'wat:(module (func (export "improv_call") (param f64) (result f64) (if (f64.lt (local.get 0) (f64.const 0)) (then (loop $l (br $l)))) (local.get 0)))';
      const file = await tmp.file('spin2.json', JSON.stringify({ ...spin, body }));
      // Quick rows, written as their batch is done, then rows that spin until the 60 s deadline.
      const quick = Array.from({ length: 100 }, (_, i) => i).join('\n');
      const rows = await tmp.file('spin2.csv', `${quick}\n-1\n-2\n-3\n`);
      const child = execa(process.execPath, [BIN, 'run', file, rows, '--timeout', '60s'], {
        reject: false,
        env: TEST_ENV,
        timeout: 30_000,
        buffer: { stdout: true, stderr: true },
      });
      let out = '';
      child.stdout!.on('data', (chunk) => {
        out += chunk;
      });
      while (!out.includes('\n')) await new Promise((resolve) => setTimeout(resolve, 20));
      child.kill('SIGINT');
      const result = await child;
      expect(result.exitCode).toBe(130);
      expect(result.timedOut).toBe(false);
      expect(result.stderr).toMatch(/interrupted \(SIGINT\) after [1-9][\d,]* row\(s\)/);
    },
  );
});

describe('third-party runners', () => {
  /** The fixture runner installed as a package in a project directory. */
  async function project(): Promise<string> {
    const dir = join(tmp.dir, 'project');
    await mkdir(join(dir, 'node_modules'), { recursive: true });
    await cp(JS_RUNNER_DIR, join(dir, 'node_modules', 'extfn-js'), { recursive: true }).catch(
      () => {},
    );
    await writeFile(
      join(dir, 'twice.json'),
      JSON.stringify({
        name: 'twice',
        language: 'js',
        body: 'args[0] * 2',
        argTypes: ['number'],
        returnType: 'number',
      }),
    );
    await writeFile(join(dir, 'rows.csv'), '1\n2\n');
    return dir;
  }

  test('--runner PACKAGE, PACKAGE#NAME, a path, and IMPROV_EXTFN_RUNNERS', async () => {
    const cwd = await project();
    expect(
      await cli(['run', 'twice.json', 'rows.csv', '--runner', 'extfn-js'], { cwd }),
    ).toMatchObject({
      exitCode: 0,
      stdout: '1,2,\n2,4,\n',
    });
    expect(
      await cli(['eval', 'twice.json', '5', '--runner', 'extfn-js#named'], { cwd }),
    ).toMatchObject({
      exitCode: 0,
      stdout: '10\n',
    });
    expect(
      await cli(['eval', 'twice.json', '6', '--runner', './node_modules/extfn-js/index.js'], {
        cwd,
      }),
    ).toMatchObject({ exitCode: 0, stdout: '12\n' });
    expect(
      await cli(['eval', 'twice.json', '7'], { cwd, env: { IMPROV_EXTFN_RUNNERS: 'extfn-js' } }),
    ).toMatchObject({ exitCode: 0, stdout: '14\n' });
    const unknown = await cli(['eval', 'twice.json', '7'], { cwd });
    expect(unknown.exitCode).toBe(2);
    expect(unknown.stderr).toContain('--runner PACKAGE');
    const missing = await cli(['eval', 'twice.json', '7', '--runner', 'extfn-nope'], { cwd });
    expect(missing.exitCode).toBe(3);
    expect(missing.stderr).toContain('runner package extfn-nope is not installed');
    // a built-in language taken for a package: said so, with the fix to drop the flag
    const builtIn = await cli(['eval', 'twice.json', '7', '--runner', 'python'], { cwd });
    expect(builtIn.exitCode).toBe(3);
    expect(builtIn.stderr).toContain('python is a built-in language, not a runner package');
    expect(builtIn.stderr).toContain('drop --runner python: its runner (@improv/extfn-python)');
    expect(builtIn.stderr).not.toContain('npm install python');
  });

  test('doctor lists a third-party runner like ours', async () => {
    const cwd = await project();
    const text = await cli(['doctor', '--runner', 'extfn-js'], { cwd });
    expect(text.stdout).toMatch(/^js +ok +\(extfn-js, third-party\)$/m);
    const json = await cli(['doctor', '--json'], {
      cwd,
      env: { IMPROV_EXTFN_RUNNERS: 'extfn-js' },
    });
    expect(JSON.parse(json.stdout).languages.at(-1)).toMatchObject({
      language: 'js',
      packageName: 'extfn-js',
      external: true,
      available: true,
    });
  });
});

describe('doctor', () => {
  test.skipIf(!python.ready)(
    `without bubblewrap the sandbox's fix is printed once, not once per language${skipNote(python)}`,
    async () => {
      const bin = join(tmp.dir, 'empty-bin');
      await mkdir(bin, { recursive: true });
      const result = await cli(['doctor'], { env: { PATH: bin } });
      expect(result.stdout).toMatch(/^sandbox \(policy restricted\): NOT AVAILABLE$/m);
      expect(result.stdout.match(/apt-get install bubblewrap/g)).toHaveLength(1);
      expect(result.stdout).toMatch(/^python +unavailable/m);
      expect(result.stdout).toContain('(the sandbox, above)');
      expect(result.stdout).not.toContain('`interpreter` option');
    },
  );

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
