/**
 * The worker and the pool with a fixture driver: framing defences, kill and
 * replace, one-shot mode, load errors, the bound, close.
 */
import { spawn } from 'node:child_process';
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { createInterpreterRunner } from '../src/index.js';
import {
  alive,
  BOOTSTRAP,
  failure,
  fixtureRegistry,
  hasPython,
  noRestricted,
  PYTHON,
  policy,
  restrictedOk,
  waitFor,
} from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
function make(...args: Parameters<typeof fixtureRegistry>) {
  const made = fixtureRegistry(...args);
  cleanups.push(() => made.registry.close());
  return made;
}

describe.skipIf(!hasPython)('warm workers with a fixture driver', () => {
  test('values and row errors come back; warm calls reuse the worker', async () => {
    const { registry, runner } = make({
      add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
      boom: ['raise ValueError("nope")', [], 'number'],
    });
    for (let i = 0; i < 5; i++) {
      expect(await registry.eval('add', [Value.number(i), Value.number(1)])).toEqual(
        Value.number(i + 1),
      );
    }
    expect(runner.stats().started).toBe(1);
    const error = await failure(registry.eval('boom', []));
    expect(error.message).toBe('function boom: ValueError: nope');
    expect(error.stderr).toBe('fixture traceback');
    expect(runner.stats().killed).toBe(0);
  });

  test('a malformed frame kills the worker; the next call gets a fresh one', async () => {
    const { registry, runner } = make({
      bad: ['malformed', [], 'number'],
      wrongId: ['wrong id', [], 'number'],
      ok: ['result = 1', [], 'number'],
    });
    const bad = await failure(registry.eval('bad', []));
    expect(bad.kind).toBe('Runtime');
    expect(bad.message).toMatch(/malformed frame from the driver: "this is not a frame"/);
    const wrong = await failure(registry.eval('wrongId', []));
    expect(wrong.message).toMatch(/unexpected frame/);
    expect(await registry.eval('ok', [])).toEqual(Value.number(1));
    expect(runner.stats().killed).toBe(2);
    expect(runner.stats().live).toBe(1);
  });

  test('an answer nested thousands of levels deep fails its call, not the host', async () => {
    // JSON.stringify of such a value overflows the stack; the host once did it
    // in its stream handler, for the error message, and died.
    const { registry, runner } = make({
      deepWrongId: ['deep wrong id', [], 'number'],
      deepValues: ['deep values', [], 'number'],
      ok: ['result = 1', [], 'number'],
    });
    const wrong = await failure(registry.eval('deepWrongId', []));
    expect(wrong.kind).toBe('Runtime');
    expect(wrong.message).toMatch(
      /unexpected frame from the driver: \(a value nested too deeply to show\)/,
    );
    const values = await failure(registry.eval('deepValues', []));
    expect(values.kind).toBe('Runtime');
    const rows = await registry.evalBatch('deepValues', [[], []]);
    for (const row of rows) expect(ExtFnError.isInstance(row)).toBe(true);
    expect(values.message).toBe(
      'function deepValues: ProtocolError: malformed row error (a value nested too deeply to show)',
    );
    expect(await registry.eval('ok', [])).toEqual(Value.number(1));
    await waitFor(() => runner.stats().live === 1);
  });

  test('a response past the byte budget is "output too large" and the worker is replaced', async () => {
    const { registry, runner } = make(
      { huge: ['huge', [], 'text'] },
      { maxOutputBytes: 1024 * 1024 },
    );
    const error = await failure(registry.eval('huge', []));
    expect(error.limit).toBe('output');
    expect(error.message).toMatch(/output too large/);
    expect(runner.stats().live).toBe(0);
  });

  test("a load error is the function's Runtime error, remembered without respawning", async () => {
    const { registry, runner } = make({ syntax: ['syntax error', [], 'number'] });
    for (let i = 0; i < 3; i++) {
      const error = await failure(registry.eval('syntax', []));
      expect(error.message).toBe('function syntax: SyntaxError: invalid syntax');
    }
    const batch = await registry.evalBatch('syntax', [[], []]);
    expect(batch.every((r) => ExtFnError.isInstance(r) && r.message.includes('SyntaxError'))).toBe(
      true,
    );
    expect(runner.stats().started).toBe(1);
  });

  test('one-shot mode runs the same driver in a fresh process that ends with the call', async () => {
    const { registry, runner } = make({
      add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
      loop: ['while True: pass', [], 'number'],
    });
    expect(
      await registry.eval('add', [Value.number(2), Value.number(3)], { mode: 'oneShot' }),
    ).toEqual(Value.number(5));
    const timeout = await failure(registry.eval('loop', [], { mode: 'oneShot', timeoutMs: 500 }));
    expect(timeout.kind).toBe('Timeout');
    expect(runner.stats()).toMatchObject({ started: 2, live: 0 });
  });

  test('waiting callers are served in order; at maxLiveWorkers an idle worker of another function is evicted for them', async () => {
    const { registry, runner } = make(
      {
        slow: ['time.sleep(0.2)\nresult = args[0]', ['number'], 'number'],
        other: ['result = -args[0]', ['number'], 'number'],
      },
      { maxWorkers: 1, maxLiveWorkers: 1 },
    );
    const order: number[] = [];
    const calls = [0, 1, 2].map((i) =>
      registry
        .eval('slow', [Value.number(i)])
        .then((v) => order.push((v as { value: number }).value)),
    );
    await Promise.all(calls);
    expect(order).toEqual([0, 1, 2]);
    expect(await registry.eval('other', [Value.number(4)])).toEqual(Value.number(-4));
    expect(runner.stats()).toMatchObject({ started: 2, peak: 1, live: 1 });
  });

  test('one-shot processes count against the same bound as warm workers', async () => {
    const { registry, runner } = make(
      { add: ['result = args[0] + args[1]', ['number', 'number'], 'number'] },
      { maxWorkers: 2 },
    );
    await registry.eval('add', [Value.number(0), Value.number(0)]); // one warm worker, idle
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        registry.eval('add', [Value.number(i), Value.number(1)], { mode: 'oneShot' }),
      ),
    );
    expect(results.map((r) => (r as { value: number }).value)).toEqual(
      Array.from({ length: 12 }, (_, i) => i + 1),
    );
    expect(runner.stats()).toMatchObject({ started: 13, peak: 2 });
  });

  test('a batch of 10,000 rows is chunked over the workers and equals the per-row results', async () => {
    const { registry, runner } = make(
      { sq: ['result = args[0] * args[0]', ['number'], 'number'] },
      { maxWorkers: 2 },
    );
    const rows = Array.from({ length: 10_000 }, (_, i) => [Value.number(i)]);
    let calls = 0;
    const results = await registry.evalBatch('sq', rows, { onProgress: () => calls++ });
    expect(results.every((r, i) => (r as { value: number }).value === i * i)).toBe(true);
    expect(runner.stats().peak).toBeLessThanOrEqual(2);
    expect(calls).toBeGreaterThan(2); // chunks, not one request per row nor one for all
    expect(calls).toBeLessThan(10_000);
  });

  test('a chunk answered with the wrong number of values is retried row by row on a fresh worker', async () => {
    const { registry, runner } = make(
      { short: ['#short\nresult = args[0] * 2', ['number'], 'number'] },
      { maxWorkers: 1 },
    );
    const rows = Array.from({ length: 20 }, (_, i) => [Value.number(i)]);
    const results = await registry.evalBatch('short', rows);
    expect(results).toEqual(rows.map(([x]) => Value.number((x as { value: number }).value * 2)));
    expect(runner.stats().killed).toBeGreaterThan(0); // the worker that answered out of shape
  });

  test('an interpreter that dies while starting fails a batch once, not row by row', async () => {
    const runner = createInterpreterRunner(
      {
        language: 'fixture',
        packageName: '@improv/extfn-fixture',
        resolveInterpreter: async () => ({ path: PYTHON }),
        args: ['-s', '-S', '-c', BOOTSTRAP],
        driverSource: 'import sys\nsys.stderr.write("driver is broken\\n")\nsys.exit(4)\n',
      },
      { policy },
    );
    cleanups.push(() => runner.close());
    const fn = {
      name: 'f',
      language: 'fixture',
      body: 'result = 1',
      argTypes: [],
      returnType: 'number' as const,
      pure: false,
    };
    const results = await runner.callBatch!(
      fn,
      Array.from({ length: 1000 }, () => []),
      { timeoutMs: 5_000 },
    );
    expect(
      results.every(
        (r) => ExtFnError.isInstance(r) && /exited with code 4 while starting/.test(r.message),
      ),
    ).toBe(true);
    expect((results[0] as ExtFnError).stderr).toMatch(/driver is broken/);
    expect(runner.stats().started).toBeLessThanOrEqual(2);
    const single = await failure(runner.call(fn, [], { timeoutMs: 5_000 }));
    expect(single.message).toMatch(/exited with code 4 while starting/);
  });

  test('close() during a batch: rows done keep their values, the rest fail "closed" at once', async () => {
    const { registry, runner } = make(
      { slow: ['time.sleep(0.05)\nresult = args[0]', ['number'], 'number'] },
      { maxWorkers: 2 },
    );
    const rows = Array.from({ length: 400 }, (_, i) => [Value.number(i)]);
    const batch = registry.evalBatch('slow', rows);
    await new Promise((r) => setTimeout(r, 500));
    const closing = performance.now();
    await runner.close();
    const results = await batch;
    expect(performance.now() - closing).toBeLessThan(2_000);
    const done = results.filter((r) => !ExtFnError.isInstance(r));
    const closed = results.filter((r) => ExtFnError.isInstance(r) && /closed/.test(r.message));
    expect(done.length).toBeGreaterThan(0);
    expect(done.length + closed.length).toBe(rows.length);
    expect(runner.workerPids()).toEqual([]);
  });

  test('close() ends every worker and later calls fail', async () => {
    const { registry, runner } = make(
      { id: ['result = args[0]', ['number'], 'number'] },
      { maxWorkers: 2 },
    );
    await Promise.all([1, 2, 3, 4].map((n) => registry.eval('id', [Value.number(n)])));
    const pids = runner.workerPids();
    expect(pids.length).toBeGreaterThan(0);
    await registry.close();
    for (const pid of pids) expect(alive(pid)).toBe(false);
    const error = await failure(
      runner.call(
        registry.get('id') ?? {
          name: 'id',
          language: 'fixture',
          body: '',
          argTypes: [],
          returnType: 'number',
          pure: false,
        },
        [],
        { timeoutMs: 1000 },
      ),
    );
    expect(error.message).toMatch(/closed/);
  });
});

describe.skipIf(!restrictedOk)(
  `children die with the parent (${restrictedOk ? 'bwrap --die-with-parent' : noRestricted})`,
  () => {
    test('killing the host process (SIGKILL) takes its warm workers down', async () => {
      const host = new URL('./fixtures/host.mjs', import.meta.url).pathname;
      const child = spawn(process.execPath, [host, BOOTSTRAP], {
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const pids: number[] = await new Promise((resolve, reject) => {
        let out = '';
        child.stdout.on('data', (d) => {
          out += d;
          if (out.includes('\n')) resolve(JSON.parse(out));
        });
        child.on('exit', () => reject(new Error(`host exited early: ${out}`)));
      });
      expect(pids.length).toBe(1);
      child.kill('SIGKILL');
      expect(await waitFor(() => pids.every((pid) => !alive(pid)), 5_000)).toBe(true);
    });
  },
);
