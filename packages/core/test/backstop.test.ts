/**
 * Core's backstop against runners that never settle: `eval`, `evalBatch` and
 * `evalColumns` always settle, with Timeout on what the runner never answered,
 * while a slow runner that keeps reporting progress is left alone.
 */
import { afterEach, describe, expect, test, vi } from 'vitest';
import {
  ExtFnError,
  type LanguageRunner,
  MAX_TIMEOUT_MS,
  Registry,
  Value as V,
} from '../src/index.js';
import { fakeRunner, fn } from './fake-runner.js';

const never = () => new Promise<never>(() => {});

/** The fake runner with native batch and columnar paths that never settle. */
function stuckRunner(): LanguageRunner {
  return { ...fakeRunner().runner, callBatch: never, callColumns: never };
}

describe('a runner that never settles is cut off', () => {
  test('evalBatch: every row the runner never answered is a Timeout', async () => {
    const registry = new Registry({ runners: [stuckRunner()] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const rows = [
      [V.number(1), V.number(2)],
      [V.number(1)], // refused by core before the runner: keeps its own error
      [V.number(3), V.number(4)],
    ];
    const results = await registry.evalBatch('add', rows, { timeoutMs: 50 });
    expect(results[0]).toMatchObject({ kind: 'Timeout', ms: 50 });
    expect(results[1]).toMatchObject({ kind: 'ArityMismatch' });
    expect(results[2]).toMatchObject({ kind: 'Timeout', ms: 50 });
    await registry.close();
  });

  test("the runner's signal aborts when core gives up: it stops, and writes nothing into `into` after", async () => {
    const signals: AbortSignal[] = [];
    const runner: LanguageRunner = {
      ...fakeRunner().runner,
      // answers only once aborted, as a runner that honours its signal does
      callColumns: (_f, columns, options) =>
        new Promise((resolve) => {
          const signal = options.signal!;
          signals.push(signal);
          signal.addEventListener('abort', () =>
            resolve({ values: new Float64Array(columns[0]!.length), errors: new Map() }),
          );
        }),
      callBatch: (_f, rows, options) =>
        new Promise((resolve) => {
          signals.push(options.signal!);
          options.signal!.addEventListener('abort', () => resolve(rows.map(() => V.number(0))));
        }),
    };
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const into = new Float64Array(2);
    const caller = new AbortController();
    const out = await registry.evalColumns('add', [Float64Array.of(1, 2), Float64Array.of(3, 4)], {
      timeoutMs: 50,
      into,
      signal: caller.signal,
    });
    expect(out.errors.get(0)).toMatchObject({ kind: 'Timeout', ms: 50 });
    expect(signals[0]?.aborted).toBe(true);
    expect(signals[0]?.reason).toMatchObject({ kind: 'Timeout' });
    expect(caller.signal.aborted).toBe(false); // the caller's own signal is left alone
    expect([...into]).toEqual([Number.NaN, Number.NaN]);
    const results = await registry.evalBatch('add', [[V.number(1), V.number(2)]], {
      timeoutMs: 50,
    });
    expect(results[0]).toMatchObject({ kind: 'Timeout' });
    expect(signals[1]?.aborted).toBe(true);
    await registry.close();
  });

  test('evalColumns: every row is NaN with a Timeout', async () => {
    const registry = new Registry({ runners: [stuckRunner()] });
    registry.register(fn('add', 'add', ['number', 'number'], 'number'));
    const out = await registry.evalColumns('add', [Float64Array.of(1, 2), Float64Array.of(3, 4)], {
      timeoutMs: 50,
    });
    expect([...out.values]).toEqual([Number.NaN, Number.NaN]);
    expect(out.errors.get(0)).toMatchObject({ kind: 'Timeout', ms: 50 });
    expect(out.errors.get(1)).toMatchObject({ kind: 'Timeout', ms: 50 });
    await registry.close();
  });

  test('without a native batch path, only the row whose call never settles is a Timeout', async () => {
    const { runner } = fakeRunner(); // no callBatch: core runs the rows as calls
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    registry.register(fn('hang', 'hang', ['number'], 'number'));
    const batch = await registry.evalBatch('hang', [[V.number(1)]], { timeoutMs: 50 });
    expect(batch[0]).toMatchObject({ kind: 'Timeout', ms: 50 });
    const mixed: LanguageRunner = {
      ...runner,
      call: (f, args, options) =>
        (args[0] as { value: number }).value === 13 ? never() : runner.call(f, args, options),
    };
    const registry2 = new Registry({ runners: [mixed] });
    registry2.register(fn('echo', 'echo', ['number'], 'number'));
    const rows = [1, 13, 2].map((x) => [V.number(x)]);
    const results = await registry2.evalBatch('echo', rows, { timeoutMs: 50 });
    expect(results[0]).toEqual(V.number(1));
    expect(results[1]).toMatchObject({ kind: 'Timeout' });
    expect(results[2]).toEqual(V.number(2));
    await registry.close();
    await registry2.close();
  });

  test('a slow batch that keeps reporting progress is not cut off', async () => {
    const { runner } = fakeRunner();
    // 8 rows, 300 ms apart: 2.4 s in all, longer than the 2.1 s silence limit of a 50 ms deadline.
    const slow: LanguageRunner = {
      ...runner,
      async callBatch(_f, rows, options) {
        for (let i = 0; i < rows.length; i++) {
          await new Promise((r) => setTimeout(r, 300));
          options.onProgress?.(i + 1, rows.length);
        }
        return rows.map((row) => row[0]!);
      },
    };
    const registry = new Registry({ runners: [slow] });
    registry.register(fn('echo', 'echo', ['number'], 'number'));
    const reported: number[] = [];
    const rows = Array.from({ length: 8 }, (_, i) => [V.number(i)]);
    const results = await registry.evalBatch('echo', rows, {
      timeoutMs: 50,
      onProgress: (done) => reported.push(done),
    });
    expect(
      results.map((r) => (ExtFnError.isInstance(r) ? r.kind : (r as { value: number }).value)),
    ).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(reported.at(-1)).toBe(8); // the caller's own onProgress still sees every report
    await registry.close();
  });
});

describe('a deadline up to the longest a Registry takes (2^31 - 1 ms)', () => {
  /** The longest delay a Node timer takes: a longer one fires after 1 ms, with a TimeoutOverflowWarning. */
  const TIMER_MAX = 2 ** 31 - 1;
  /** backstop.ts afresh: no timer armed by an earlier test. */
  async function freshBackstop() {
    vi.resetModules();
    return import('../src/backstop.js');
  }
  const echo = fn('echo', 'echo', ['number'], 'number');
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });

  test('the backstop arms its timer for at most what a Node timer holds: no TimeoutOverflowWarning', async () => {
    const { guardCall } = await freshBackstop();
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on('warning', onWarning);
    const armed = vi.spyOn(globalThis, 'setTimeout');
    try {
      const answer = new Promise((resolve) => setImmediate(() => resolve(V.number(7))));
      // The wait is the deadline plus as much grace: twice what a timer holds.
      expect(await guardCall(echo, answer, MAX_TIMEOUT_MS, undefined)).toEqual(V.number(7));
      const delays = armed.mock.calls.map(([, ms]) => ms ?? 0);
      expect(delays).toContain(TIMER_MAX);
      expect(delays.every((ms) => ms <= TIMER_MAX)).toBe(true);
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
      expect(warnings).not.toContain('TimeoutOverflowWarning');
    } finally {
      process.off('warning', onWarning);
    }
  });

  test('a wait longer than a timer holds is still cut off at its time, after the timer is armed again', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const { guardCall } = await freshBackstop();
    let outcome: unknown;
    void guardCall(echo, never(), MAX_TIMEOUT_MS, undefined).then(
      (value) => {
        outcome = value;
      },
      (error: unknown) => {
        outcome = error;
      },
    );
    // The first timer fires with nothing due yet, and neither does the second.
    await vi.advanceTimersByTimeAsync(TIMER_MAX);
    expect(outcome).toBeUndefined();
    await vi.advanceTimersByTimeAsync(TIMER_MAX - 1);
    expect(outcome).toBeUndefined();
    // Due at twice the deadline (deadline + grace = 2 * (2^31 - 1) ms).
    await vi.advanceTimersByTimeAsync(2);
    expect(outcome).toMatchObject({ kind: 'Timeout', ms: MAX_TIMEOUT_MS });
  });

  test('through a Registry: a call with that deadline is answered, not cut off', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('sleep', 'sleep:10', ['number'], 'number'));
    expect(await registry.eval('sleep', [V.number(1)], { timeoutMs: MAX_TIMEOUT_MS })).toEqual(
      V.number(1),
    );
    const batch = await registry.evalBatch('sleep', [[V.number(1)]], { timeoutMs: MAX_TIMEOUT_MS });
    expect(batch).toEqual([V.number(1)]);
    await registry.close();
  });
});
