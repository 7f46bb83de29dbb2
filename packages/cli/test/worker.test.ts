/**
 * `improv-extfn worker`: where Redis is is a usage error when missing or
 * malformed; a Redis that cannot be reached is said once, with its fix, and
 * ends the command after --connect-timeout; Ctrl-C and SIGTERM stop it at
 * once, during start-up as while serving.
 */
import * as queueModule from '@improv/extfn-queue';
import { execa, type ResultPromise } from 'execa';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ERROR_REPEAT_MS, ErrorLog } from '../src/commands/worker.js';
import { ExitCode } from '../src/exit-codes.js';
import { Interrupted } from '../src/io.js';
import { main } from '../src/main.js';
import {
  BIN,
  fakeIo,
  fakeRunner,
  hasRedis,
  REDIS_SERVER,
  startRedis,
  TEST_ENV,
  until,
} from './helpers.js';

const UNREACHABLE = 'redis://127.0.0.1:1';

function workerIo(options: { env?: NodeJS.ProcessEnv; signal?: AbortSignal } = {}) {
  return fakeIo(
    {
      '@improv/extfn-queue': queueModule,
      '@improv/extfn-wasm': { wasm: () => fakeRunner() },
    },
    options,
  );
}

describe('where Redis is', () => {
  test('no --redis and no IMPROV_EXTFN_REDIS_URL is a usage error naming --redis', async () => {
    const io = workerIo();
    expect(await main(['worker', '--runner', 'wasm'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toBe(
      'improv-extfn: worker: no Redis to connect to: no --redis, and IMPROV_EXTFN_REDIS_URL is not set\n' +
        '  fix: give a URL such as --redis redis://127.0.0.1:6379, or set IMPROV_EXTFN_REDIS_URL\n',
    );
  });

  test('a --redis that is not a Redis URL is a usage error; --json says kind Usage', async () => {
    let io = workerIo();
    expect(await main(['worker', '--redis', 'notaurl', '--runner', 'wasm'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain(
      'improv-extfn: worker: --redis "notaurl" is not a Redis URL: the Redis URL "notaurl" does not parse\n',
    );
    expect(io.err()).toContain('  fix: give a URL such as --redis redis://127.0.0.1:6379');
    expect(io.err()).not.toContain('option connection');
    io = workerIo({ env: { IMPROV_EXTFN_REDIS_URL: 'http://cache:6379' } });
    expect(await main(['worker', '--json'], io)).toBe(ExitCode.BadInput);
    const { error } = JSON.parse(io.out());
    expect(error.kind).toBe('Usage');
    expect(error.message).toContain(
      'IMPROV_EXTFN_REDIS_URL="http://cache:6379" is not a Redis URL',
    );
    expect(error.fix).not.toContain('option connection');
  });

  test('--connect-timeout is read as a duration', async () => {
    const io = workerIo();
    expect(await main(['worker', '--redis', UNREACHABLE, '--connect-timeout', '0'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain('--connect-timeout "0": the time limit must be more than 0');
    const bare = workerIo();
    expect(await main(['worker', '--redis', UNREACHABLE, '--connect-timeout', '30'], bare)).toBe(
      ExitCode.BadInput,
    );
    expect(bare.err()).toContain(
      '--connect-timeout "30" has no unit, so it would be 30 ms; did you mean 30s?',
    );
  });

  test('--libraries naming a directory that is not there is a usage error before anything starts', async () => {
    const io = workerIo();
    expect(
      await main(['worker', '--redis', UNREACHABLE, '--libraries', '/nowhere/site-packages'], io),
    ).toBe(ExitCode.BadInput);
    expect(io.err()).toContain(
      'improv-extfn: --libraries: /nowhere/site-packages does not exist\n',
    );
  });
});

describe('--libraries', () => {
  /** A worker io whose python and r factories record the options they were given. */
  function recordingIo() {
    const given: Record<string, unknown> = {};
    const io = fakeIo({
      '@improv/extfn-queue': queueModule,
      '@improv/extfn-wasm': { wasm: () => fakeRunner() },
      '@improv/extfn-python': {
        python: (options: unknown) => {
          given.python = options;
          return fakeRunner('python');
        },
      },
      '@improv/extfn-r': {
        r: (options: unknown) => {
          given.r = options;
          return fakeRunner('r');
        },
      },
    });
    return { io, given };
  }
  // Redis is unreachable: the runners are made (and their options recorded) before it is looked for.
  const worker = (args: string[], io: ReturnType<typeof recordingIo>['io']) =>
    main(['worker', '--redis', UNREACHABLE, '--connect-timeout', '200ms', ...args], io);

  test('reaches the python and r runners as their packages and libraries options', async () => {
    let { io, given } = recordingIo();
    expect(await worker(['--runner', 'python', '--runner', 'r', '--libraries', 'system'], io)).toBe(
      ExitCode.Unavailable,
    );
    expect(given).toEqual({ python: { packages: 'system' }, r: { libraries: 'system' } });
    ({ io, given } = recordingIo());
    // A directory that is there (the fake runner does not look for pyvenv.cfg in it).
    const venv = import.meta.dirname;
    await worker(['--runner', 'python,r', '--libraries', `venv:${venv}`], io);
    // venv: is Python's; R keeps its own
    expect(given).toEqual({ python: { packages: { venv } }, r: undefined });
    ({ io, given } = recordingIo());
    await worker(['--runner', 'python', '--runner', 'r'], io);
    expect(given).toEqual({ python: undefined, r: undefined });
  });

  test('refused for a worker that serves neither python nor r', async () => {
    const { io } = recordingIo();
    expect(await worker(['--runner', 'wasm', '--libraries', 'none'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toBe(
      'improv-extfn: worker: --libraries is for python and r; this worker serves wasm\n' +
        '  fix: drop --libraries, or serve python or r (--runner python)\n',
    );
  });
});

describe('a runner named with --runner that cannot run here', () => {
  /** A worker io whose julia runner loads but probes unavailable, the way a missing interpreter does. */
  function unavailableIo(probe: () => Promise<unknown>) {
    const julia = fakeRunner('julia');
    julia.probe = probe as typeof julia.probe;
    const wasm = fakeRunner();
    const io = fakeIo({
      '@improv/extfn-queue': queueModule,
      '@improv/extfn-wasm': { wasm: () => wasm },
      '@improv/extfn-julia': { julia: () => julia },
    });
    return { io, julia, wasm };
  }

  test('stops the worker before it serves (exit 3), with the reason and fix of its probe, said once', async () => {
    const { io, julia, wasm } = unavailableIo(async () => ({
      language: 'julia',
      available: false,
      detail: 'no julia found; install Julia, or set IMPROV_EXTFN_JULIA to its path',
      fix: 'install Julia, or set IMPROV_EXTFN_JULIA to its path',
    }));
    const code = await main(
      ['worker', '--redis', UNREACHABLE, '--runner', 'wasm', '--runner', 'julia'],
      io,
    );
    expect(code).toBe(ExitCode.Unavailable);
    expect(io.err()).toBe(
      'improv-extfn: worker: runner julia cannot run here: no julia found\n' +
        '  fix: install Julia, or set IMPROV_EXTFN_JULIA to its path\n',
    );
    expect(io.err()).not.toContain('serving');
    // Neither runner is left running.
    expect([julia.closed, wasm.closed]).toEqual([1, 1]);
  });

  test('a probe that throws is unavailable for its reason; --json says LanguageUnavailable', async () => {
    const { io } = unavailableIo(async () => {
      throw new Error('julia --version failed');
    });
    const code = await main(['worker', '--redis', UNREACHABLE, '--runner', 'julia', '--json'], io);
    expect(code).toBe(ExitCode.Unavailable);
    expect(JSON.parse(io.out()).error).toMatchObject({
      kind: 'LanguageUnavailable',
      message: 'worker: runner julia cannot run here: julia --version failed',
      fix: expect.stringContaining('improv-extfn doctor'),
    });
  });
});

describe('a Redis that cannot be reached', () => {
  test('is said once with its fix, and start-up gives up after --connect-timeout (exit 3)', async () => {
    const io = workerIo();
    const started = performance.now();
    const code = await main(
      ['worker', '--redis', UNREACHABLE, '--runner', 'wasm', '--connect-timeout', '1500ms'],
      io,
    );
    const seconds = (performance.now() - started) / 1000;
    expect(code).toBe(ExitCode.Unavailable);
    expect(seconds).toBeLessThan(6);
    const err = io.err();
    // ioredis retries each connection every few hundred ms: said once, not once per attempt.
    expect(err.match(/^improv-extfn worker: connect ECONNREFUSED/gm)).toHaveLength(1);
    expect(err).toContain(
      '  fix: is Redis running at redis://127.0.0.1:1? start it, or point --redis (or IMPROV_EXTFN_REDIS_URL) at it',
    );
    expect(err).toContain(
      'improv-extfn: worker: cannot reach Redis at redis://127.0.0.1:1 within 1500 ms (connect ECONNREFUSED 127.0.0.1:1)\n',
    );
    expect(err).toContain('--connect-timeout waits longer');
  });

  test('--json: kind Unreachable, exit 3', async () => {
    const io = workerIo();
    const code = await main(
      [
        'worker',
        '--redis',
        UNREACHABLE,
        '--runner',
        'wasm',
        '--connect-timeout',
        '500ms',
        '--json',
      ],
      io,
    );
    expect(code).toBe(ExitCode.Unavailable);
    expect(JSON.parse(io.out()).error).toMatchObject({ kind: 'Unreachable' });
  });

  test('an abort during start-up (SIGTERM) ends it at once with 143', async () => {
    const controller = new AbortController();
    const io = workerIo({ signal: controller.signal });
    setTimeout(() => controller.abort(new Interrupted('SIGTERM')), 300);
    const started = performance.now();
    const code = await main(['worker', '--redis', UNREACHABLE, '--runner', 'wasm'], io);
    expect(code).toBe(ExitCode.Terminated);
    expect(performance.now() - started).toBeLessThan(3_000);
  });

  test('the same error again is said at most once a minute, with how often it came', () => {
    let now = 0;
    let err = '';
    const log = new ErrorLog(
      {
        stdout: { write: () => true },
        stderr: { write: (s: string) => (err += s) },
        env: {},
        cwd: '/',
      },
      'redis://cache:6379',
      () => now,
    );
    const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.5:6379'), {
      code: 'ECONNREFUSED',
    });
    for (let i = 0; i < 50; i++) {
      log.report(refused);
      now += 1_000;
    }
    expect(err.match(/ECONNREFUSED/g)).toHaveLength(1);
    expect(err).toContain('fix: is Redis running at redis://cache:6379?');
    now = ERROR_REPEAT_MS + 1_000;
    log.report(refused);
    expect(err.match(/ECONNREFUSED/g)).toHaveLength(2);
    expect(err).toContain('(again: 50 time(s) in the last 61 s)');
    log.report(new Error('some other failure'));
    expect(err).toContain('improv-extfn worker: some other failure\n');
    expect(err.match(/fix:/g)).toHaveLength(2);
  });
});

/** A process of the real bin: Node's own signal handling, exit codes. */
function spawnWorker(args: string[]): ResultPromise {
  return execa(process.execPath, [BIN, 'worker', ...args], {
    reject: false,
    env: { ...TEST_ENV },
    extendEnv: true,
    stdin: 'ignore',
    timeout: 60_000,
  });
}

describe('the real command and signals', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    test(`the first ${signal} stops a worker still waiting for Redis`, async () => {
      const child = spawnWorker(['--redis', UNREACHABLE, '--runner', 'wasm']);
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      await until(() => stderr.includes('ECONNREFUSED'), 20_000);
      const sent = performance.now();
      child.kill(signal);
      const result = await child;
      expect(performance.now() - sent).toBeLessThan(5_000);
      expect(result.exitCode).toBe(signal === 'SIGTERM' ? 143 : 130);
    });
  }

  describe.skipIf(!hasRedis)(
    `serving (${hasRedis ? 'own redis-server' : `skipped: no ${REDIS_SERVER}`})`,
    () => {
      let redis: ResultPromise | undefined;
      let port = 0;
      beforeAll(async () => {
        ({ port, process: redis } = await startRedis());
      });
      afterAll(async () => {
        redis?.kill('SIGKILL');
        await redis;
      });

      test('SIGTERM stops a serving worker at once (143); so does one whose Redis went away', async () => {
        const url = `redis://127.0.0.1:${port}`;
        let child = spawnWorker(['--redis', url, '--runner', 'wasm']);
        let stderr = '';
        child.stderr!.on('data', (chunk: Buffer) => {
          stderr += chunk.toString();
        });
        await until(() => stderr.includes('serving wasm'), 20_000);
        let sent = performance.now();
        child.kill('SIGTERM');
        let result = await child;
        expect(result.exitCode).toBe(143);
        expect(performance.now() - sent).toBeLessThan(5_000);
        expect(stderr).toContain('improv-extfn worker: stopping (SIGTERM)');

        child = spawnWorker(['--redis', url, '--runner', 'wasm']);
        stderr = '';
        child.stderr!.on('data', (chunk: Buffer) => {
          stderr += chunk.toString();
        });
        await until(() => stderr.includes('serving wasm'), 20_000);
        redis!.kill('SIGKILL');
        await redis;
        await until(() => stderr.includes('ECONNREFUSED'), 20_000);
        sent = performance.now();
        child.kill('SIGINT');
        result = await child;
        expect(result.exitCode).toBe(130);
        expect(performance.now() - sent).toBeLessThan(5_000);
        expect(stderr.match(/ECONNREFUSED/g)).toHaveLength(1);
      });
    },
  );
});
