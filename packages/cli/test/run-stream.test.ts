/**
 * `run` end to end, as a subprocess: rows stream out while later rows still
 * run, a closed pipe ends the run, Ctrl-C or SIGTERM at any moment leaves an
 * earlier output file as it was, a machine that cannot run the function
 * stops at the first row with the reason and its fix, and the function's
 * worker starts while the first rows are still on their way.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, readdir, readFile, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { readProcessTree } from '@improv/extfn-sandbox';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { parseCsv } from '../src/csv.js';
import { BIN, cli, EXAMPLES, languageStatus, scratch, skipNote, TEST_ENV } from './helpers.js';

const wasm = await languageStatus('wasm');
const python = await languageStatus('python');

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeAll(async () => {
  tmp = await scratch();
});
afterAll(async () => {
  await tmp.cleanup();
});

/** Identity on x >= 0; spins forever on a negative x (until --timeout). */
const maybeSpin = {
  name: 'maybe',
  language: 'wasm',
  body: 'wat:(module (func (export "improv_call") (param f64) (result f64) (if (f64.lt (local.get 0) (f64.const 0)) (then (loop $l (br $l)))) (local.get 0)))',
  argTypes: ['number'],
  returnType: 'number',
};

function start(
  args: readonly string[],
  cwd = EXAMPLES,
  stdin: 'ignore' | 'pipe' = 'ignore',
): ChildProcess {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [key, value] of Object.entries(TEST_ENV)) {
    if (value === undefined) delete env[key];
    else env[key] = value;
  }
  return spawn(process.execPath, [BIN, ...args], { cwd, env, stdio: [stdin, 'pipe', 'pipe'] });
}

function collect(child: ChildProcess) {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk) => {
    stdout += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })),
  );
  return { stdout: () => stdout, stderr: () => stderr, exit };
}

async function until(check: () => boolean | Promise<boolean>): Promise<void> {
  while (!(await check())) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe.skipIf(!wasm.ready)(`streaming${skipNote(wasm)}`, () => {
  test('the first rows are written while later rows still run', async () => {
    const fn = await tmp.file('maybe.json', JSON.stringify(maybeSpin));
    const quick = Array.from({ length: 1_000 }, (_, i) => `${i}`).join('\n');
    const rows = await tmp.file('slow-tail.csv', `${quick}\n-1\n-2\n`);
    const child = start(['run', fn, rows, '--timeout', '60s']);
    const run = collect(child);
    await until(() => run.stdout().split('\n').length > 3);
    // The last rows spin for a minute: the process has not ended, yet the first rows are out.
    expect(child.exitCode).toBeNull();
    expect(run.stdout().split('\n').slice(0, 3)).toEqual(['0,0,', '1,1,', '2,2,']);
    child.kill('SIGINT');
    expect((await run.exit).code).toBe(130);
  });

  test('a reader that stops early (| head -3) ends the run: the rows after are never run', async () => {
    const fn = await tmp.file('maybe.json', JSON.stringify(maybeSpin));
    // Were the run to go on, the last row would hold it for 60 s, past the test's timeout.
    const quick = Array.from({ length: 200_000 }, (_, i) => `${i}`).join('\n');
    const rows = await tmp.file('head.csv', `${quick}\n-1\n`);
    const child = start(['run', fn, rows, '--timeout', '60s']);
    const run = collect(child);
    await until(() => run.stdout().split('\n').length > 3);
    child.stdout!.destroy();
    const exit = await run.exit;
    expect(exit.code).toBe(0);
    expect(run.stderr()).toBe('');
  });

  test('Ctrl-C or SIGTERM mid-run: exit 130/143, the previous file intact, no temporary file left', async () => {
    const fn = await tmp.file('maybe.json', JSON.stringify(maybeSpin));
    const quick = Array.from({ length: 5_000 }, (_, i) => `${i}`).join('\n');
    const rows = await tmp.file('interrupt.csv', `${quick}\n-1\n`);
    for (const [signal, code] of [
      ['SIGINT', 130],
      ['SIGTERM', 143],
    ] as const) {
      const dir = join(tmp.dir, `out-${signal}`);
      await mkdir(dir);
      const previous = await tmp.file(`out-${signal}/prev.csv`, 'earlier results\n');
      const child = start(['run', fn, rows, '--timeout', '60s', '-o', previous]);
      const run = collect(child);
      // Interrupted once rows are being written to the temporary file.
      await until(async () => (await readdir(dir)).some((f) => f.endsWith('.partial')));
      child.kill(signal);
      expect((await run.exit).code).toBe(code);
      expect(await readFile(previous, 'utf8')).toBe('earlier results\n');
      expect(await readdir(dir)).toEqual(['prev.csv']);
      expect(run.stderr()).toMatch(
        new RegExp(
          `interrupted \\(${signal}\\) after [\\d,]+ row\\(s\\); .*prev\\.csv was not changed\\n$`,
        ),
      );
    }
  });

  test('Ctrl-C at any moment, from start-up on, never touches the previous file', async () => {
    const fn = await tmp.file('maybe.json', JSON.stringify(maybeSpin));
    const rows = await tmp.file(
      'any.csv',
      `${Array.from({ length: 3_000 }, (_, i) => i).join('\n')}\n-1\n`,
    );
    for (const delayMs of [0, 30, 100, 250, 500, 1000]) {
      const dir = join(tmp.dir, `any-${delayMs}`);
      await mkdir(dir);
      const previous = await tmp.file(`any-${delayMs}/prev.csv`, 'earlier\n');
      const child = start(['run', fn, rows, '--timeout', '60s', '-o', previous]);
      const run = collect(child);
      await new Promise((resolve) => setTimeout(resolve, delayMs));
      child.kill('SIGINT');
      const exit = await run.exit;
      // Before Node installs its handler the default action ends it (signal SIGINT); after, exit 130.
      expect(exit.code === 130 || exit.signal === 'SIGINT', JSON.stringify(exit)).toBe(true);
      expect(await readFile(previous, 'utf8')).toBe('earlier\n');
      expect(await readdir(dir)).toEqual(['prev.csv']);
    }
  });

  test('Ctrl-C while stdin is still open: exit 130, the rows computed before it written', async () => {
    const child = start(['run', 'distance.json', '-', '--format', 'csv'], EXAMPLES, 'pipe');
    const run = collect(child);
    child.stdin!.write('3,4\n6,8\n');
    // stdin stays open, as a terminal's or a waiting producer's does.
    await until(() => run.stdout() === '3,4,5,\n6,8,10,\n');
    child.kill('SIGINT');
    expect(await run.exit).toEqual({ code: 130, signal: null });
    expect(run.stdout()).toBe('3,4,5,\n6,8,10,\n');
    expect(run.stderr()).toBe(
      'improv-extfn: interrupted (SIGINT) after 2 row(s); the rows written above are not all of them\n',
    );
  });

  test('a finished run replaces the file; ragged rows keep every column in place', async () => {
    const rows = await tmp.file(
      'ragged.csv',
      'site,x,y\na,3,4\nb,6\nc,5,12,extra\n"d,8,15\ne,8,15\n',
    );
    const out = await tmp.file('ragged.out.csv', 'old\n');
    const result = await cli([
      'run',
      'distance.json',
      rows,
      '--header',
      '--columns',
      'x,y',
      '-o',
      out,
    ]);
    expect(result.exitCode).toBe(1);
    const records = parseCsv(await readFile(out, 'utf8')).records.map((r) => r.cells);
    expect(records.map((r) => r.length)).toEqual([5, 5, 5, 5, 5, 5]);
    const byHeader = records
      .slice(1)
      .map((r) => Object.fromEntries(records[0]!.map((h, i) => [h, r[i]])));
    expect(byHeader.map((r) => r.result)).toEqual(['5', '', '', '', '17']);
    expect(byHeader[1]!.error).toBe('MalformedRow: line 3: 2 cell(s), but the header has 3');
    expect(byHeader[2]!.error).toBe(
      'MalformedRow: line 4: 4 cell(s), but the header has 3 (left out of the output: extra)',
    );
    expect(byHeader[3]!.error).toMatch(
      /^MalformedRow: line 5: a quoted cell in column 1 is never closed/,
    );
  });

  test('JSON lines: an array row among objects is its own error; 1e400 is refused, echoed as written', async () => {
    const result = await cli(
      ['run', 'distance.json', '-', '--format', 'jsonl', '--columns', 'x,y'],
      {
        input: '{"x":3,"y":4}\n[6,8]\n{"x":1e400,"y":1}\n{"x":5,"y":12}\n',
      },
    );
    expect(result.exitCode).toBe(1);
    const lines = result.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe('{"x":3,"y":4,"result":5}');
    expect(JSON.parse(lines[1]!).error.kind).toBe('MalformedRow');
    expect(lines[2]).toMatch(/^\{"x":1e400,"y":1,"error":\{"kind":"MalformedRow"/);
    expect(lines[3]).toBe('{"x":5,"y":12,"result":13}');
  });

  test('CSV formula cells are neutralised by default, raw with --keep-formulas', async () => {
    const rows = await tmp.file('formula.csv', 'label,x,y\n=cmd|calc,3,-4\n@SUM(A1),-6,8\n');
    const safe = await cli(['run', 'distance.json', rows, '--header', '--columns', 'x,y']);
    expect(safe.stdout).toBe("label,x,y,result,error\n'=cmd|calc,3,-4,5,\n'@SUM(A1),-6,8,10,\n");
    const raw = await cli([
      'run',
      'distance.json',
      rows,
      '--header',
      '--columns',
      'x,y',
      '--keep-formulas',
    ]);
    expect(raw.stdout).toBe('label,x,y,result,error\n=cmd|calc,3,-4,5,\n@SUM(A1),-6,8,10,\n');
  });
});

describe('Ctrl-C while a descriptor is read from a standard input that stays open', () => {
  test('eval -: exit 130, saying so, instead of waiting for the end of stdin', async () => {
    // A runner file that says when it is loaded: the signal handlers are set by then.
    const marker = await tmp.file(
      'ready-runner.mjs',
      "process.stderr.write('ready\\n');\nexport default () => ({ specificationVersion: 'v1', language: 'ready', async probe() { return { language: 'ready', available: true, detail: '' }; }, async call() { return { type: 'number', value: 0 }; } });\n",
    );
    const child = start(['eval', '-', '3', '--runner', marker], EXAMPLES, 'pipe');
    const run = collect(child);
    child.stdin!.write('{"name":');
    await until(() => run.stderr().includes('ready\n'));
    child.kill('SIGINT');
    expect(await run.exit).toEqual({ code: 130, signal: null });
    expect(run.stderr()).toBe(
      'ready\nimprov-extfn: interrupted (SIGINT) before the call finished\n',
    );
  });
});

describe('a machine that cannot run the function', () => {
  test.skipIf(!python.ready)(
    `without bubblewrap: one Sandbox error with its fix, at once, exit 3${skipNote(python)}`,
    async () => {
      // A PATH without bwrap (node is started by its absolute path).
      const bin = join(tmp.dir, 'no-bwrap-bin');
      await mkdir(bin);
      for (const tool of ['prlimit', 'setpriv']) {
        await symlink(`/usr/bin/${tool}`, join(bin, tool)).catch(() => {});
      }
      const rows = await tmp.file('many.csv', '1000,0.05,10\n'.repeat(2_000));
      const out = await tmp.file('kept.csv', 'kept\n');
      const result = await cli(['run', 'growth.json', rows, '-o', out], { env: { PATH: bin } });
      expect(result.exitCode).toBe(3);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(/^improv-extfn: Sandbox: function growth: .*bubblewrap/);
      expect(result.stderr.match(/apt-get install bubblewrap/g)).toHaveLength(1);
      expect(result.stderr).toContain('stopped at line 1: every row needs this; ');
      expect(result.stderr).toContain('kept.csv was not changed');
      expect(await readFile(out, 'utf8')).toBe('kept\n');
    },
  );

  test('an interpreter that is missing: LanguageUnavailable once, naming the variable, exit 3', async () => {
    const rows = await tmp.file('tax.csv', '52000\n'.repeat(1_000));
    const result = await cli(['run', 'tax.json', rows], {
      env: { IMPROV_EXTFN_R: join(tmp.dir, 'no-such-Rscript') },
    });
    expect(result.exitCode).toBe(3);
    expect(result.stdout).toBe('');
    expect(result.stderr).toMatch(/^improv-extfn: LanguageUnavailable: /);
    expect(result.stderr).toContain(
      `IMPROV_EXTFN_R is set to ${join(tmp.dir, 'no-such-Rscript')}, which does not exist; set IMPROV_EXTFN_R to an Rscript executable, or unset it to use Rscript from PATH`,
    );
    expect(result.stderr).not.toContain('`interpreter` option');
    expect(
      result.stderr.split('\n').filter((l) => l.startsWith('improv-extfn:')).length,
    ).toBeLessThanOrEqual(2);
  });
});

describe('a function that cannot load', () => {
  test.skipIf(!wasm.ready)(
    `a wasm body its runner refuses: the error once, the run stopped at line 1, the output untouched, exit 1${skipNote(wasm)}`,
    async () => {
      const fn = await tmp.file(
        'unloadable.json',
        JSON.stringify({
          name: 'unloadable',
          language: 'wasm',
          argTypes: ['number'],
          returnType: 'number',
          body: '(module)',
        }),
      );
      const rows = await tmp.file('unloadable.csv', '1\n'.repeat(20_000));
      const out = await tmp.file('unloadable-out.csv', 'kept\n');
      const result = await cli(['run', fn, rows, '-o', out]);
      expect(result.exitCode).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr).toMatch(
        /^improv-extfn: Runtime: function unloadable: a wasm body must start with "wat:"/,
      );
      expect(result.stderr).toContain(
        'stopped at line 1: the function cannot load, so every row would fail the same way; ',
      );
      expect(result.stderr).not.toMatch(/row\(s\): 0 ok/);
      expect(await readFile(out, 'utf8')).toBe('kept\n');
    },
  );

  test.skipIf(!python.ready)(
    `a Python syntax error: the traceback once and no rows; a body that fails only on some rows still runs them all${skipNote(python)}`,
    async () => {
      const bad = await tmp.file(
        'syntax.json',
        JSON.stringify({
          name: 'syntax',
          language: 'python',
          argTypes: ['number'],
          returnType: 'number',
          body: 'result = (args[0] +',
        }),
      );
      const rows = await tmp.file('syntax.csv', '1\n2\n3\n');
      const result = await cli(['run', bad, rows]);
      expect(result.exitCode).toBe(1);
      expect(result.stdout).toBe('');
      expect(result.stderr.match(/SyntaxError: '\(' was never closed\n/g)).toHaveLength(1);
      expect(result.stderr).toContain('stopped at line 1: the function cannot load');
      // Control: a body that loads and fails some rows is not stopped.
      const some = await tmp.file(
        'some.json',
        JSON.stringify({
          name: 'some',
          language: 'python',
          argTypes: ['number'],
          returnType: 'number',
          body: 'if args[0] == 2:\n    raise ValueError("two")\nresult = args[0]',
        }),
      );
      const ran = await cli(['run', some, rows]);
      expect(ran.exitCode).toBe(1);
      expect(ran.stdout).toBe('1,1,\n2,,Runtime: ValueError: two\n3,3,\n');
      expect(ran.stderr).not.toContain('stopped at line');
    },
  );
});

/** The names (comm) of the processes below `root`, as the host sees them. */
/**
 * Names of the processes below `root` that are not its own children: a
 * worker runs inside a sandbox tree, while the python3 the CLI runs itself
 * (asked for its real path, compiling the driver) is its child, and ends.
 */
function deeperNames(root: number): string[] {
  const tree = readProcessTree(root)?.processes.slice(1) ?? [];
  return tree
    .filter(({ parentPid }) => parentPid !== root)
    .map(({ pid }) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
      } catch {
        return '?'; // gone meanwhile
      }
    });
}

describe.skipIf(!python.ready || process.platform !== 'linux')(`warm-up${skipNote(python)}`, () => {
  test('the worker starts while the first rows are still on their way (a slow pipe)', async () => {
    const fn = await tmp.file(
      'add-one.json',
      JSON.stringify({
        name: 'addOne',
        language: 'python',
        body: 'result = args[0] + 1',
        argTypes: ['number'],
        returnType: 'number',
      }),
    );
    const child = start(['run', fn, '-', '--format', 'csv'], EXAMPLES, 'pipe');
    const run = collect(child);
    // not one row written yet: an interpreter runs below the CLI all the same
    const deadline = Date.now() + 20_000;
    await until(
      () =>
        deeperNames(child.pid!).some((name) => name.startsWith('python')) || Date.now() > deadline,
    );
    expect(deeperNames(child.pid!).filter((name) => name.startsWith('python'))).not.toEqual([]);
    expect(run.stdout()).toBe('');
    child.stdin!.end('1\n2\n');
    expect((await run.exit).code, run.stderr()).toBe(0);
    expect(run.stdout()).toBe('1,2,\n2,3,\n');
  }, 30_000);
});
