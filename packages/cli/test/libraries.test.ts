/**
 * `--libraries` on `eval` and `run`, through the real bin: what a Python or R
 * body may import besides its standard library (python `packages`, r
 * `libraries`), and the fix that names the flag when a body cannot import;
 * and on `worker`, serving a refresh through Redis. Flag errors need no
 * interpreter; the rest skip, with the reason, where Python, R, numpy, R's
 * digest or redis-server is missing.
 */
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { queue } from '@improv/extfn-queue';
import { execa, type ResultPromise } from 'execa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import {
  BIN,
  cli,
  hasRedis,
  languageStatus,
  REDIS_SERVER,
  scratch,
  skipNote,
  startRedis,
  TEST_ENV,
  until,
} from './helpers.js';

const python = await languageStatus('python');
const r = await languageStatus('r');

/** Whether `code` runs in the interpreter the tests use (a library installed, or not). */
function runs(command: string, args: string[]): boolean {
  try {
    execFileSync(command, args, { stdio: 'ignore', timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}
const numpy = python.ready
  ? runs(TEST_ENV.IMPROV_EXTFN_PYTHON ?? 'python3', ['-c', 'import numpy'])
  : false;
const digest = r.ready ? runs('Rscript', ['-e', 'library(digest)']) : false;

let tmp: Awaited<ReturnType<typeof scratch>>;
let modules: string;
const json = (fn: object) => JSON.stringify(fn);
beforeAll(async () => {
  tmp = await scratch();
  // readable by the unprivileged uid the sandbox runs bodies as (mkdtemp makes 0700)
  await chmod(tmp.dir, 0o755);
  modules = join(tmp.dir, 'pylib');
  await mkdir(modules, { mode: 0o755 });
  await writeFile(join(modules, 'extfn_lib_probe.py'), 'VALUE = 42\n', { mode: 0o644 });
  await tmp.file(
    'mine.json',
    json({
      name: 'mine',
      language: 'python',
      body: 'import extfn_lib_probe\nresult = extfn_lib_probe.VALUE + args[0]',
      argTypes: ['number'],
      returnType: 'number',
    }),
  );
  await tmp.file(
    'hypot.json',
    json({
      name: 'hypot',
      language: 'python',
      body: 'import numpy as np\nresult = float(np.hypot(args[0], args[1]))',
      argTypes: ['number', 'number'],
      returnType: 'number',
    }),
  );
  await tmp.file(
    'md5.json',
    json({
      name: 'md5',
      language: 'r',
      body: 'library(digest)\nresult <- digest(args[[1]], algo = "md5", serialize = FALSE)',
      argTypes: ['text'],
      returnType: 'text',
    }),
  );
  await tmp.file(
    'wat.json',
    json({
      name: 'wat',
      language: 'wasm',
      body: 'wat:(module (func (export "improv_call") (param f64) (result f64) (local.get 0)))',
      argTypes: ['number'],
      returnType: 'number',
    }),
  );
  await tmp.file('rows.csv', 'x\n1\n2\n');
});
afterAll(async () => {
  await tmp.cleanup();
});

const IMPORT_FIX =
  'fix: a Python body imports the standard library and what --libraries allows: --libraries system';

describe('--libraries values the command refuses (exit 2, before anything runs)', () => {
  test.each([
    [['eval', 'mine.json', '1', '--libraries', ''], '--libraries "" is empty'],
    [
      ['eval', 'mine.json', '1', '--libraries', 'a::b'],
      '--libraries "a::b" has an empty directory between its colons',
    ],
    [
      ['eval', 'mine.json', '1', '--libraries', 'venv:'],
      '--libraries venv: names no virtual environment',
    ],
    [
      ['eval', 'wat.json', '1', '--libraries', 'system'],
      '--libraries is for python and r functions; function wat is wasm',
    ],
    [
      ['run', 'md5.json', 'rows.csv', '--header', '--libraries', 'venv:/srv/venv'],
      '--libraries venv:PATH is a Python virtual environment; function md5 is r',
    ],
    [
      ['eval', 'mine.json', '1', '--libraries', './missing'],
      '--libraries: <dir>/missing does not exist',
    ],
    [
      ['eval', 'mine.json', '1', '--libraries', 'venv:missing'],
      '--libraries: <dir>/missing does not exist',
    ],
    [
      ['run', 'mine.json', 'rows.csv', '--libraries', 'rows.csv'],
      '--libraries: <dir>/rows.csv is not a directory',
    ],
    [['eval', 'md5.json', '1', '--libraries', '/nowhere'], '--libraries: /nowhere does not exist'],
  ])('%j', async (args, message) => {
    const result = await cli(args, { cwd: tmp.dir });
    expect(result.stderr).toContain(message.replace('<dir>', tmp.dir));
    expect(result.stderr).toContain('fix: ');
    expect(result.exitCode).toBe(2);
  });

  test('each command lists it in --help', async () => {
    for (const command of ['eval', 'run']) {
      expect((await cli([command, '--help'])).stdout).toMatch(
        /--libraries WHAT\s+what a Python or R body may import/,
      );
    }
  });
});

describe.skipIf(!python.ready)(`python --libraries${skipNote(python)}`, () => {
  test('a directory, relative to the working directory, is importable; without it the fix names the flag', async () => {
    const refused = await cli(['eval', 'mine.json', '1'], { cwd: tmp.dir });
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr).toContain("ModuleNotFoundError: No module named 'extfn_lib_probe'");
    expect(refused.stderr).toContain(IMPORT_FIX);
    expect(refused.stderr).toContain('extfn_lib_probe must be installed there');
    expect(
      (await cli(['eval', 'mine.json', '1', '--libraries', 'none'], { cwd: tmp.dir })).exitCode,
    ).toBe(1);

    expect(await cli(['eval', 'mine.json', '1', '--libraries', 'pylib'], { cwd: tmp.dir })).toEqual(
      {
        exitCode: 0,
        stdout: '43\n',
        stderr: '',
      },
    );
    const run = await cli(
      ['run', 'mine.json', 'rows.csv', '--header', '--libraries', `/nowhere:${modules}`],
      {
        cwd: tmp.dir,
      },
    );
    // a directory that does not exist is the command line's mistake, said before anything runs
    expect(run.stderr).toBe(
      'improv-extfn: --libraries: /nowhere does not exist\n' +
        "  fix: check the path: relative ones are from the working directory; --libraries system allows the interpreter's own packages\n",
    );
    expect(run.exitCode).toBe(2);
    const ok = await cli(['run', 'mine.json', 'rows.csv', '--header', '--libraries', modules], {
      cwd: tmp.dir,
    });
    expect(ok.stdout).toBe('x,result,error\n1,43,\n2,44,\n');
    expect(ok.exitCode).toBe(0);
  });

  test('a failed run gives the fix once, in its summary', async () => {
    const run = await cli(['run', 'mine.json', 'rows.csv', '--header'], { cwd: tmp.dir });
    expect(run.exitCode).toBe(1);
    expect(run.stderr.split(IMPORT_FIX).length - 1).toBe(1);
  });

  test.skipIf(!numpy)(
    `system: the interpreter's own packages (numpy)${numpy ? '' : ' (skipped: numpy is not installed for this Python)'}`,
    async () => {
      expect((await cli(['eval', 'hypot.json', '3', '4'], { cwd: tmp.dir })).stderr).toContain(
        "No module named 'numpy'",
      );
      expect(
        await cli(['eval', 'hypot.json', '3', '4', '--libraries', 'system'], { cwd: tmp.dir }),
      ).toEqual({
        exitCode: 0,
        stdout: '5\n',
        stderr: '',
      });
    },
  );
});

describe.skipIf(!r.ready || !digest)(
  `r --libraries${!r.ready ? skipNote(r) : digest ? '' : ' (skipped: R has no digest package here)'}`,
  () => {
    test('system (the default) has the site libraries; none leaves base R, and the fix names the flag', async () => {
      const md5 = 'a';
      expect(await cli(['eval', 'md5.json', md5], { cwd: tmp.dir })).toEqual({
        exitCode: 0,
        stdout: '0cc175b9c0f1b6a831c399e269772661\n',
        stderr: '',
      });
      expect(
        (await cli(['eval', 'md5.json', md5, '--libraries', 'system'], { cwd: tmp.dir })).exitCode,
      ).toBe(0);
      const none = await cli(['eval', 'md5.json', md5, '--libraries', 'none'], { cwd: tmp.dir });
      expect(none.exitCode).toBe(1);
      expect(none.stderr).toMatch(/there is no package called .digest./);
      expect(none.stderr).toContain(
        "fix: an R body loads packages from R's site libraries (--libraries system, the default) or from the directories --libraries DIR[:DIR...] names; install digest there",
      );
    });
  },
);

describe.skipIf(!python.ready || !hasRedis)(
  `worker --libraries${!python.ready ? skipNote(python) : hasRedis ? '' : ` (skipped: no ${REDIS_SERVER})`}`,
  () => {
    let redis: ResultPromise | undefined;
    let url = '';
    beforeAll(async () => {
      ({ url, process: redis } = await startRedis());
    });
    afterAll(async () => {
      redis?.kill('SIGKILL');
      await redis;
    });

    /** `mine` refreshed through the queue while a worker host with `args` serves python. */
    async function throughWorker(args: string[]): Promise<(Value | ExtFnError)[]> {
      const worker = execa(
        process.execPath,
        [BIN, 'worker', '--redis', url, '--runner', 'python', ...args],
        {
          reject: false,
          cwd: tmp.dir,
          env: { ...TEST_ENV },
          extendEnv: true,
          stdin: 'ignore',
          timeout: 60_000,
        },
      );
      let stderr = '';
      worker.stderr!.on('data', (c: Buffer) => {
        stderr += c.toString();
      });
      const registry = new Registry({ runners: queue({ connection: url, languages: ['python'] }) });
      try {
        await until(() => stderr.includes('serving python'), 30_000);
        registry.register({
          name: 'mine',
          language: 'python',
          body: 'import extfn_lib_probe\nresult = extfn_lib_probe.VALUE + args[0]',
          argTypes: ['number'],
          returnType: 'number',
        });
        return await registry.evalBatch('mine', [[Value.number(1)], [Value.number(2)]]);
      } finally {
        await registry.close();
        worker.kill('SIGTERM');
        await worker;
      }
    }

    test('a worker host with --libraries DIR serves bodies that import from it; without, they cannot', async () => {
      const without = await throughWorker([]);
      expect(without.map((c) => (ExtFnError.isInstance(c) ? c.message : c))).toEqual([
        expect.stringContaining("ModuleNotFoundError: No module named 'extfn_lib_probe'"),
        expect.stringContaining("ModuleNotFoundError: No module named 'extfn_lib_probe'"),
      ]);
      expect(await throughWorker(['--libraries', 'pylib'])).toEqual([
        Value.number(43),
        Value.number(44),
      ]);
    });
  },
);
