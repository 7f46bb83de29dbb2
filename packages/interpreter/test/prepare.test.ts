/**
 * `prepare`, the hint core gives before a batch's checks, through the real
 * Registry, runner, scheduler and pool with fake workers behind the runner's
 * launch seam (no interpreter): the function's first worker starts while
 * core still checks the rows, the batch takes that worker rather than
 * starting a second, and a prepared start that fails leaves the batch
 * exactly as it is without one.
 */
import { type ExternalFn, ExtFnError, Registry, type RowResult, Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import type { DispatchWorker } from '../src/dispatch.js';
import { WorkerFailure } from '../src/failures.js';
import { Pool } from '../src/pool.js';
import { createRunnerWithLaunch } from '../src/runner.js';
import type { InterpreterRunner, InterpreterSpec } from '../src/types.js';
import { fixtureRegistry, hasPython } from './helpers.js';
import { SummingWorker } from './summing-worker.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const SPEC: InterpreterSpec = {
  language: 'fake',
  packageName: '@test/fake',
  resolveInterpreter: async () => ({ path: '/nonexistent/fake-interpreter' }),
  args: [],
  driverSource: '',
};

const descriptor = (name: string, body = name): ExternalFn => ({
  name,
  language: 'fake',
  body,
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: false,
});

/**
 * A Registry over a runner whose workers are fakes: a start takes `startMs`;
 * a body `fail` fails to start. `events` records each launch and each entry
 * into the runner's callBatch, in order.
 */
function setUp(
  options: { startMs?: number; mode?: 'warm' | 'oneShot'; withPrepare?: boolean } = {},
) {
  const events: string[] = [];
  const launches: string[] = [];
  const runner = createRunnerWithLaunch(
    SPEC,
    { policy: 'unsandboxed', maxWorkers: 4, ...(options.mode ? { mode: options.mode } : {}) },
    async (key, fn) => {
      events.push(`launch ${fn.name}`);
      launches.push(fn.name);
      await sleep(options.startMs ?? 20); // an interpreter start
      if (fn.body === 'fail')
        throw new WorkerFailure('exited', 'the interpreter exited with code 1');
      return new SummingWorker(key);
    },
  );
  const callBatch = runner.callBatch.bind(runner);
  runner.callBatch = (fn, rows, batchOptions) => {
    events.push(`callBatch ${fn.name}`);
    return callBatch(fn, rows, batchOptions);
  };
  if (options.withPrepare === false) {
    (runner as { prepare?: InterpreterRunner['prepare'] }).prepare = undefined;
  }
  const registry = new Registry({ runners: [runner], cache: false, timeoutMs: 5_000 });
  for (const name of ['f', 'g', 'h']) registry.register(descriptor(name));
  registry.register(descriptor('broken', 'fail'));
  return { registry, runner, events, launches };
}

const rows = (n: number) => Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(1)]);

function expectSums(results: RowResult[]) {
  results.forEach((result, i) => {
    expect(result).toEqual(Value.number(i + 1));
  });
}

/** evalBatch that also reports how many workers had been launched when its first results came. */
async function refresh(setup: ReturnType<typeof setUp>, name: string, n: number) {
  let launchesAtFirst: number | undefined;
  const results = await setup.registry.evalBatch(name, rows(n), {
    onProgress: (done) => {
      if (done > 0) launchesAtFirst ??= setup.launches.length;
    },
  });
  return { results, launchesAtFirst };
}

describe('prepare (fake workers)', () => {
  test('a cold refresh on a runner that has found its interpreter: the worker starts before core has checked the rows, and only it before the first results', async () => {
    const setup = setUp();
    expectSums((await refresh(setup, 'f', 10)).results); // the interpreter is found, the sandbox probed
    setup.events.length = 0;
    setup.launches.length = 0;
    const { results, launchesAtFirst } = await refresh(setup, 'g', 5_000);
    expectSums(results);
    // the launch came from prepare, before evalBatch's checks and its call of callBatch
    expect(setup.events.slice(0, 2)).toEqual(['launch g', 'callBatch g']);
    expect(launchesAtFirst).toBe(1);
    await setup.registry.close();
  });

  test('a refresh on a new runner starts one worker before its first results, and before core checks the rows: the batch takes the prepared one', async () => {
    const setup = setUp();
    const pool = (setup.runner as unknown as { pool: Pool<DispatchWorker> }).pool;
    const prestarted: boolean[] = [];
    const prestart = pool.prestart.bind(pool);
    pool.prestart = (key, fn) => {
      const started = prestart(key, fn);
      prestarted.push(started);
      return started;
    };
    const { results, launchesAtFirst } = await refresh(setup, 'f', 500);
    expectSums(results);
    expect(prestarted).toEqual([true]);
    expect(launchesAtFirst).toBe(1);
    expect(setup.launches).toEqual(['f']); // a small batch: the prepared worker did it all
    // core waited for the new runner's lookup, so the start was under way before its checks
    expect(setup.events.slice(0, 2)).toEqual(['launch f', 'callBatch f']);
    await setup.registry.close();
  });

  test('prepare starts nothing for a function that has a worker, idle or busy', async () => {
    const setup = setUp();
    await refresh(setup, 'f', 10);
    expect(setup.launches).toEqual(['f']);
    setup.runner.prepare!(descriptor('f'));
    await sleep(50);
    expect(setup.launches).toEqual(['f']);
    // busy: a batch holds the worker while prepare is asked again
    const running = refresh(setup, 'f', 2_000);
    await sleep(5);
    setup.runner.prepare!(descriptor('f'));
    const { launchesAtFirst } = await running;
    expect(launchesAtFirst).toBe(1);
    await setup.registry.close();
  });

  test('prepare starts nothing for a function routed to one-shot processes', async () => {
    const setup = setUp({ mode: 'oneShot' });
    setup.runner.prepare!(descriptor('f'));
    setup.runner.prepare!(descriptor('g'), { mode: 'oneShot' });
    await sleep(50);
    expect(setup.launches).toEqual([]);
    // the runner's default is warm here, but the batch asks for one-shot
    const warm = setUp();
    await refresh(warm, 'f', 10); // prepared: a start would be at once
    warm.runner.prepare!(descriptor('g'), { mode: 'oneShot' });
    await sleep(50);
    expect(warm.launches).toEqual(['f']);
    warm.runner.prepare!(descriptor('g'));
    expect(warm.launches).toEqual(['f', 'g']); // the same call, warm: started at once
    await Promise.all([setup.registry.close(), warm.registry.close()]);
  });

  test('a prepared start that fails gives the batch the same error as without prepare', async () => {
    const outcomes: RowResult[][] = [];
    const launches: number[] = [];
    for (const withPrepare of [false, true]) {
      const setup = setUp({ withPrepare });
      await refresh(setup, 'f', 10); // prepared runner: the failing start begins before the checks
      setup.launches.length = 0;
      outcomes.push((await refresh(setup, 'broken', 100)).results);
      launches.push(setup.launches.length);
      await setup.registry.close();
    }
    // with prepare: the prepared start failed, then the batch started as without it
    expect(launches[1]).toBe(launches[0]! + 1);
    const [without, withIt] = outcomes;
    expect(ExtFnError.isInstance(without![0])).toBe(true);
    expect((without![0] as ExtFnError).message).toMatch(/exited with code 1/);
    expect(withIt!.map((r) => (r as ExtFnError).message)).toEqual(
      without!.map((r) => (r as ExtFnError).message),
    );
    expect(withIt!.map((r) => (r as ExtFnError).kind)).toEqual(
      without!.map((r) => (r as ExtFnError).kind),
    );
  });
});

describe('Pool.prestart', () => {
  const fn = descriptor('f');
  function pool(max = 2, startMs = 10, maxLive?: number) {
    const starts: string[] = [];
    const p = new Pool<SummingWorker>(
      max,
      30_000,
      async (key) => {
        starts.push(key);
        await sleep(startMs);
        return new SummingWorker(key);
      },
      maxLive,
    );
    return { pool: p, starts };
  }

  test('the first caller takes the prestarted worker, even with no batch tracking its backlog', async () => {
    const { pool: p, starts } = pool();
    expect(p.prestart('f', fn)).toBe(true);
    expect(p.prestart('f', fn)).toBe(false); // it has a worker (starting)
    const worker = await p.acquire('f', fn);
    expect(starts).toEqual(['f']);
    expect(worker.key).toBe('f');
    p.release(worker, true);
    await p.close();
  });

  test('nothing without room to live; a prestarted worker nobody takes goes idle, then serves', async () => {
    const { pool: p, starts } = pool(1, 10, 1);
    const held = await p.acquire('g', fn);
    expect(p.prestart('f', fn)).toBe(false);
    p.release(held, true);
    const { pool: q, starts: qStarts } = pool(1);
    expect(q.prestart('f', fn)).toBe(true);
    await sleep(40);
    expect(q.counters().live).toBe(1);
    const worker = await q.acquire('f', fn);
    expect(qStarts).toEqual(['f']);
    q.release(worker, true);
    expect(starts).toEqual(['g']);
    await Promise.all([p.close(), q.close()]);
  });

  test('a prestart while every busy slot is taken: its caller waits for a slot, then takes that worker', async () => {
    const { pool: p, starts } = pool(1);
    const held = await p.acquire('g', fn);
    expect(p.prestart('f', fn)).toBe(true); // room to live: the start overlaps g's work
    let served: SummingWorker | undefined;
    const waiting = p.acquire('f', fn).then((w) => {
      served = w;
      return w;
    });
    await sleep(40); // f's worker is ready, but g's holds the only busy slot
    expect(served).toBeUndefined();
    expect(p.counters()).toMatchObject({ live: 2, queued: 1 });
    p.release(held, true);
    const worker = await waiting;
    expect(worker.key).toBe('f');
    expect(starts).toEqual(['g', 'f']);
    expect(p.counters().peak).toBe(1);
    p.release(worker, true);
    await p.close();
  });

  test('a prestart beyond `max` starts waits for one ahead, unless it forks from a zygote', async () => {
    const { pool: p, starts } = pool(1, 30);
    const g = descriptor('g');
    const h = descriptor('h');
    expect(p.prestart('f', fn)).toBe(true);
    expect(p.prestart('g', g)).toBe(true);
    await sleep(5);
    expect(starts).toEqual(['f']); // g waits for f's start to be ready
    p.startsFork = () => true;
    expect(p.prestart('h', h)).toBe(true);
    await sleep(5);
    expect(starts).toEqual(['f', 'h']); // a fork takes no turn
    await sleep(40);
    expect(starts).toEqual(['f', 'h', 'g']);
    await p.close();
  });

  test('a failed prestart: its caller starts a worker of its own', async () => {
    let fail = true;
    const starts: string[] = [];
    const p = new Pool<SummingWorker>(2, 30_000, async (key) => {
      starts.push(key);
      await sleep(5);
      if (fail) {
        fail = false;
        throw new WorkerFailure('exited', 'the interpreter exited with code 1');
      }
      return new SummingWorker(key);
    });
    expect(p.prestart('f', fn)).toBe(true);
    const worker = await p.acquire('f', fn);
    expect(starts).toEqual(['f', 'f']);
    expect(worker.alive).toBe(true);
    p.release(worker, true);
    await p.close();
  });
});

describe('warmUp (fake workers): a worker per function ready before the first refresh', () => {
  test('each function gets one idle worker; the refresh after starts none', async () => {
    const setup = setUp();
    const results = await setup.registry.warmUp(['f', 'g', 'h']);
    expect(results).toEqual([
      { name: 'f', warm: true },
      { name: 'g', warm: true },
      { name: 'h', warm: true },
    ]);
    expect([...setup.launches].sort()).toEqual(['f', 'g', 'h']);
    expect(setup.runner.stats()).toMatchObject({ live: 3, queued: 0 }); // idle, ready
    // again: nothing more to start
    await setup.registry.warmUp(['f', 'g', 'h']);
    expect(setup.launches).toHaveLength(3);
    const refreshed = await Promise.all(['f', 'g', 'h'].map((name) => refresh(setup, name, 200)));
    for (const { results: r, launchesAtFirst } of refreshed) {
      expectSums(r);
      expect(launchesAtFirst).toBe(3);
    }
    expect(setup.launches).toHaveLength(3);
    await setup.registry.close();
  });

  test('a start that fails: the error its calls get, the other functions still warm', async () => {
    const setup = setUp();
    const [broken, f] = await setup.registry.warmUp(['broken', 'f']);
    expect(f).toEqual({ name: 'f', warm: true });
    expect(broken).toMatchObject({ name: 'broken', warm: false });
    const called = await setup.registry
      .eval('broken', [Value.number(1), Value.number(2)])
      .catch((e) => e);
    expect(broken!.error?.kind).toBe(called.kind);
    expect(broken!.error?.message).toBe(called.message);
    expect(broken!.error?.message).toMatch(/function broken: .*exited with code 1/);
    await setup.registry.close();
  });

  test('more functions than the runner keeps alive: the rest say why, and nothing is evicted', async () => {
    const launches: string[] = [];
    const runner = createRunnerWithLaunch(
      SPEC,
      { policy: 'unsandboxed', maxWorkers: 2, maxLiveWorkers: 3 },
      async (key, f) => {
        launches.push(f.name);
        await sleep(5);
        return new SummingWorker(key);
      },
    );
    const registry = new Registry({ runners: [runner], cache: false });
    const names = ['a', 'b', 'c', 'd', 'e'];
    for (const name of names) registry.register(descriptor(name));
    const results = await registry.warmUp(names);
    expect(results.filter((r) => r.warm).map((r) => r.name)).toEqual(['a', 'b', 'c']);
    for (const r of results.slice(3)) {
      expect(r).toEqual({
        name: r.name,
        warm: false,
        reason: 'the runner keeps at most 3 workers alive (maxLiveWorkers)',
      });
    }
    expect(launches).toEqual(['a', 'b', 'c']);
    expect(runner.stats()).toMatchObject({ live: 3 });
    await registry.close();
  });

  test('one-shot mode keeps nothing warm, and says so', async () => {
    const setup = setUp({ mode: 'oneShot' });
    const [f] = await setup.registry.warmUp(['f']);
    expect(f).toEqual({ name: 'f', warm: false, reason: 'one-shot calls keep no worker' });
    expect(setup.launches).toEqual([]);
    await setup.registry.close();
  });
});

describe('Pool.warm', () => {
  const fn = descriptor('f');
  const launcher = (starts: string[]) => async (key: string) => {
    starts.push(key);
    await sleep(10);
    return new SummingWorker(key);
  };

  test('resolves once the worker is ready and idle; a caller takes it without a start', async () => {
    const starts: string[] = [];
    const p = new Pool<SummingWorker>(1, 30_000, launcher(starts));
    expect(await p.warm('f', fn)).toBe(true);
    expect(p.counters()).toMatchObject({ live: 1, busy: 0 });
    expect(await p.warm('f', fn)).toBe(true); // it has one
    const worker = await p.acquire('f', fn);
    expect(starts).toEqual(['f']);
    p.release(worker, true);
    await p.close();
  });

  test('joins a prestart under way; false without room to live', async () => {
    const starts: string[] = [];
    const p = new Pool<SummingWorker>(1, 30_000, launcher(starts), 1);
    expect(p.prestart('f', fn)).toBe(true);
    expect(await p.warm('f', fn)).toBe(true);
    expect(starts).toEqual(['f']);
    expect(await p.warm('g', fn)).toBe(false); // maxLive 1, taken by f's
    expect(starts).toEqual(['f']);
    await p.close();
  });

  test("rejects with the start's failure, also after a prestart that failed", async () => {
    let failures = 2;
    const p = new Pool<SummingWorker>(2, 30_000, async (key) => {
      await sleep(5);
      if (failures-- > 0) throw new WorkerFailure('exited', 'the interpreter exited with code 1');
      return new SummingWorker(key);
    });
    expect(p.prestart('f', fn)).toBe(true);
    const error = await p.warm('f', fn).catch((e) => e);
    expect(error).toBeInstanceOf(WorkerFailure);
    expect(error.message).toContain('exited with code 1');
    expect(await p.warm('f', fn)).toBe(true); // the third start works
    await p.close();
  });
});

describe.skipIf(!hasPython)(
  `prepare with a real interpreter${hasPython ? '' : ' (skipped: python3 absent)'}`,
  () => {
    test('a body that fails to load: one interpreter start, every row the error eval gives', async () => {
      const { registry, runner } = fixtureRegistry({
        warmup: ['result = args[0]', ['number'], 'number'],
        bad: ['syntax error', ['number'], 'number'],
      });
      await registry.evalBatch('warmup', [[Value.number(1)]]); // interpreter found: prepare starts at once
      const before = runner.stats().started;
      const results = await registry.evalBatch(
        'bad',
        rows(50).map(([a]) => [a!]),
      );
      expect(runner.stats().started - before).toBe(1);
      const single = await registry.eval('bad', [Value.number(1)]).catch((e: unknown) => e);
      expect(ExtFnError.isInstance(single)).toBe(true);
      expect((single as ExtFnError).message).toMatch(/SyntaxError|invalid syntax/);
      for (const result of results) {
        expect((result as ExtFnError).kind).toBe((single as ExtFnError).kind);
        expect((result as ExtFnError).message).toBe((single as ExtFnError).message);
      }
      await registry.close();
    });
  },
);
