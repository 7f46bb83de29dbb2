/**
 * A warm worker is back to a clean state after every call or chunk, or is
 * retired tree and all: real attempts (daemon threads, a setsid() child, a
 * signal handler that keeps burning CPU, a thread the function's load
 * started) with the tree's CPU time measured
 * from /proc after the call; the control is a clean body that keeps its worker.
 */
import { spawn } from 'node:child_process';
import { Value } from '@improv/extfn-core';
import { readProcessTree } from '@improv/extfn-sandbox';
import { afterEach, describe, expect, test } from 'vitest';
import { alive, fixtureRegistry, noRestricted, restrictedOk, waitFor } from './helpers.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** Row 1 leaves work behind; every other row is clean. */
const DAEMON_THREADS = [
  'import threading',
  'def burn():',
  '    while True:',
  '        pass',
  'if args[0] == 1:',
  '    for _ in range(2):',
  '        threading.Thread(target=burn, daemon=True).start()',
  'result = args[0]',
].join('\n');

const SETSID_CHILD = [
  'if args[0] == 1:',
  '    if os.fork() == 0:',
  '        os.setsid()',
  '        if os.fork() == 0:',
  '            while True:',
  '                pass',
  '        os._exit(0)',
  'result = args[0]',
].join('\n');

/**
 * CPU seconds the tree under `pid` uses in the next `ms`: sampled every
 * 50 ms, per process (pid + start time), so processes that appear later count
 * from zero and ones killed meanwhile count up to their last sample.
 */
async function treeCpuSeconds(pid: number, ms = 2_000): Promise<number> {
  const first = new Map<string, number>();
  const last = new Map<string, number>();
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const p of readProcessTree(pid)?.processes ?? []) {
      const id = `${p.pid}:${p.startTicks}`;
      if (!first.has(id)) first.set(id, first.size === 0 ? p.cpuSeconds : 0);
      last.set(id, p.cpuSeconds);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  let total = 0;
  for (const [id, seconds] of last) total += seconds - (first.get(id) ?? 0);
  return total;
}

function make(body: string, maxWorkers?: number) {
  const made = fixtureRegistry(
    { f: [body, ['number'], 'number'] },
    { policy: 'restricted', maxWorkers },
  );
  cleanups.push(() => made.registry.close());
  return made;
}

describe.skipIf(!restrictedOk)(
  `work left running after a call (${restrictedOk ? 'Restricted: pid namespace' : noRestricted})`,
  () => {
    test('the CPU meter sees a tree that burns (control for the meter itself)', async () => {
      const burner = spawn('/usr/bin/python3', ['-c', 'while True: pass'], { stdio: 'ignore' });
      cleanups.push(async () => {
        burner.kill('SIGKILL');
      });
      expect(await treeCpuSeconds(burner.pid!, 1_000)).toBeGreaterThan(0.1);
    });

    for (const [name, body] of [
      ['daemon threads', DAEMON_THREADS],
      ['a setsid() grandchild', SETSID_CHILD],
    ] as const) {
      test(`${name}: the call answers, the worker is retired tree and all, nothing burns after`, async () => {
        const { registry, runner } = make(body);
        expect(await registry.eval('f', [Value.number(0)])).toEqual(Value.number(0));
        const [pid] = runner.workerPids();
        expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
        const cpu = await treeCpuSeconds(pid!);
        expect(cpu, `CPU seconds of the tree in the 2 s after the call: ${cpu}`).toBeLessThan(0.3);
        expect(await waitFor(() => !alive(pid!))).toBe(true);
        expect(runner.stats().killed).toBe(1);
        // the next call gets a fresh worker
        expect(await registry.eval('f', [Value.number(2)])).toEqual(Value.number(2));
        expect(runner.stats().started).toBe(2);
      });
    }

    test("a thread left by the function's load: the first call answers, then its worker is retired", async () => {
      const { registry, runner } = make('# thread at load\nresult = args[0]');
      expect(await registry.eval('f', [Value.number(0)])).toEqual(Value.number(0));
      const [pid] = runner.workerPids();
      // at once, not only once the pool looks at it: the next call gets a fresh worker
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
      expect(runner.stats().started).toBe(2);
      expect(await waitFor(() => !alive(pid!))).toBe(true);
    });

    test('in a batch, the chunk with the row that leaves work retires its worker; every row is right', async () => {
      const { registry, runner } = make(DAEMON_THREADS);
      const rows = Array.from({ length: 50 }, (_, i) => [Value.number(i)]);
      const results = await registry.evalBatch('f', rows);
      expect(results).toEqual(rows.map(([x]) => x));
      expect(runner.stats().killed).toBeGreaterThanOrEqual(1);
      for (const pid of runner.workerPids()) {
        const tree = readProcessTree(pid);
        expect(tree?.threads, 'a kept worker has no extra threads').toBe(tree?.processes.length);
      }
    });

    test('a signal handler left burning in the interpreter (no thread, no process): the idle worker is killed', async () => {
      const body = [
        'import signal',
        'def burn(*_):',
        '    while True:',
        '        pass',
        'if args[0] == 1:',
        '    signal.signal(signal.SIGALRM, burn)',
        '    signal.setitimer(signal.ITIMER_REAL, 0.05)',
        'result = args[0]',
      ].join('\n');
      const { registry, runner } = make(body);
      expect(await registry.eval('f', [Value.number(0)])).toEqual(Value.number(0));
      const [pid] = runner.workerPids();
      expect(await registry.eval('f', [Value.number(1)])).toEqual(Value.number(1));
      // idle from here on: the timer fires and the handler burns until the pool looks
      expect(await waitFor(() => !alive(pid!), 5_000)).toBe(true);
      expect(runner.stats().killed).toBe(1);
      expect(await registry.eval('f', [Value.number(2)])).toEqual(Value.number(2));
    });

    test('control: a clean body keeps its worker, call after call', async () => {
      const { registry, runner } = make(DAEMON_THREADS, 1);
      for (let i = 2; i < 12; i++) {
        expect(await registry.eval('f', [Value.number(i)])).toEqual(Value.number(i));
      }
      await registry.evalBatch(
        'f',
        Array.from({ length: 500 }, (_, i) => [Value.number(i + 2)]),
      );
      expect(runner.stats()).toMatchObject({ started: 1, killed: 0, live: 1 });
    });
  },
);
