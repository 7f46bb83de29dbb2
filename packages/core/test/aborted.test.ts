/**
 * A call whose AbortSignal is already aborted settles at once, without its
 * runner: `eval` rejects, and each row of `evalBatch` / `evalColumns` that
 * would have gone to the runner gets the error an abort gives mid-way (rows
 * that fail their checks, cached rows and error cells in keep theirs). No
 * native batch path is started only to be cut off ABORT_WAIT_MS (2 s) later.
 */
import { describe, expect, test } from 'vitest';
import { ABORT_WAIT_MS } from '../src/backstop.js';
import {
  type ColumnResults,
  ExtFnError,
  type LanguageRunner,
  Registry,
  type RowResult,
  Value as V,
} from '../src/index.js';
import { rejection as failure } from '../src/testing/index.js';
import { fakeRunner, fn } from './fake-runner.js';

const never = () => new Promise<never>(() => {});

/**
 * A runner whose every path never settles (as one that ignores its signal)
 * and counts what core called on it.
 */
function stuck() {
  const called: string[] = [];
  const runner: LanguageRunner = {
    ...fakeRunner().runner,
    call: () => {
      called.push('call');
      return never();
    },
    callBatch: () => {
      called.push('callBatch');
      return never();
    },
    callColumns: () => {
      called.push('callColumns');
      return never();
    },
    callTypedColumns: () => {
      called.push('callTypedColumns');
      return never();
    },
    warmUp: async () => {
      called.push('warmUp');
      return undefined;
    },
  };
  return { runner, called };
}

/** Well below ABORT_WAIT_MS: the call did not wait for a cut-off. */
const AT_ONCE_MS = ABORT_WAIT_MS / 4;

async function timed<T>(promise: Promise<T>): Promise<{ value: T; ms: number }> {
  const started = performance.now();
  const value = await promise;
  return { value, ms: performance.now() - started };
}

function expectAborted(error: unknown, reason: unknown): void {
  expect(ExtFnError.isInstance(error)).toBe(true);
  expect(error).toMatchObject({
    kind: 'Runtime',
    aborted: true,
    functionName: 'f',
    message: 'function f: aborted',
  });
  expect((error as ExtFnError).cause).toBe(reason);
}

describe('an already aborted signal: nothing reaches the runner, the call settles at once', () => {
  test('eval rejects with the aborted error', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const reason = new Error('user cancelled');
    const { value: error, ms } = await timed(
      failure(registry.eval('f', [V.number(1)], { signal: AbortSignal.abort(reason) })),
    );
    expectAborted(error, reason);
    expect(ms).toBeLessThan(AT_ONCE_MS);
    // the checks come first, as for an abort mid-way: a bad call is still its own error
    const arity = await failure(registry.eval('f', [], { signal: AbortSignal.abort(reason) }));
    expect(arity.kind).toBe('ArityMismatch');
    expect(called).toEqual([]);
  });

  test('evalBatch: rows sent get the aborted error (one instance), bad and cached rows keep theirs', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const reason = new Error('user cancelled');
    const signal = AbortSignal.abort(reason);
    const { value: results, ms } = await timed(
      registry.evalBatch('f', [[V.number(1)], [V.text('x')], [V.number(2)], []], { signal }),
    );
    expect(called).toEqual([]);
    expect(ms).toBeLessThan(AT_ONCE_MS);
    expectAborted(results[0], reason);
    expect(results[1]).toMatchObject({ kind: 'TypeMismatch', position: 1 });
    expect(results[2]).toBe(results[0]);
    expect(results[3]).toMatchObject({ kind: 'ArityMismatch' });
    // an abort mid-way gives the same rows (the runner ignores it: cut off ABORT_WAIT_MS later)
    const controller = new AbortController();
    const midway = registry.evalBatch('f', [[V.number(1)], [V.text('x')], [V.number(2)], []], {
      signal: controller.signal,
    });
    controller.abort(reason);
    const cut = await midway;
    expect(summary(cut)).toEqual(summary(results));
    expect(called).toEqual(['callBatch']);
  });

  test('evalBatch: a cached row keeps its value, the others are aborted', async () => {
    let calls = 0;
    const runner: LanguageRunner = {
      ...fakeRunner().runner,
      callBatch: async (_fn, rows) => {
        calls++;
        return rows.map((row) => row[0]!);
      },
    };
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number', true));
    await registry.evalBatch('f', [[V.number(1)]]);
    expect(calls).toBe(1);
    const results = await registry.evalBatch('f', [[V.number(1)], [V.number(2)]], {
      signal: AbortSignal.abort(),
    });
    expect(calls).toBe(1);
    expect(results[0]).toEqual(V.number(1));
    expect(results[1]).toMatchObject({ kind: 'Runtime', aborted: true });
  });

  test('evalColumns, all numbers (callColumns): every row aborted and NaN, into filled', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const reason = new Error('user cancelled');
    const into = Float64Array.of(7, 7, 7);
    const { value: out, ms } = await timed(
      registry.evalColumns('f', [Float64Array.of(1, 2, 3)], {
        signal: AbortSignal.abort(reason),
        into,
      }),
    );
    expect(called).toEqual([]);
    expect(ms).toBeLessThan(AT_ONCE_MS);
    expect(out.values).toBe(into);
    expect([...into]).toEqual([Number.NaN, Number.NaN, Number.NaN]);
    expect(out.errors.size).toBe(3);
    for (const error of out.errors.values()) expectAborted(error, reason);
  });

  test('evalColumns with error cells in: those keep their errors, the rest are aborted', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const upstream = ExtFnError.runtime('price', 'no quote');
    const out = await registry.evalColumns('f', [Float64Array.of(1, 2, 3)], {
      signal: AbortSignal.abort(),
      errors: new Map([[1, upstream]]),
    });
    expect(called).toEqual([]);
    expect(out.errors.get(1)).toBe(upstream);
    expect(out.errors.get(0)).toMatchObject({ aborted: true });
    expect(out.errors.get(2)).toMatchObject({ aborted: true });
    expect([...(out.values as Float64Array)].every(Number.isNaN)).toBe(true);
  });

  test('evalColumns, typed (callTypedColumns): every row aborted, the fill in `into`', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['text'], 'text'));
    const reason = new Error('user cancelled');
    const into = ['old', 'old'];
    const { value: out, ms } = await timed(
      registry.evalColumns<string[]>('f', [['a', 'b']], {
        signal: AbortSignal.abort(reason),
        into,
      }),
    );
    expect(called).toEqual([]);
    expect(ms).toBeLessThan(AT_ONCE_MS);
    expect(out.values).toBe(into);
    expect(into).toEqual(['', '']);
    expect([...out.errors.keys()]).toEqual([0, 1]);
    for (const error of out.errors.values()) expectAborted(error, reason);
    // the same as an abort mid-way
    const controller = new AbortController();
    const midway = registry.evalColumns<string[]>('f', [['a', 'b']], {
      signal: controller.signal,
    });
    controller.abort(reason);
    expect(shape(await midway)).toEqual(shape(out));
  });

  test('evalColumns of a typed function on a runner with only callBatch: every row aborted', async () => {
    const { runner, called } = stuck();
    const { callTypedColumns: _typed, callColumns: _columns, ...batchOnly } = runner;
    const registry = new Registry({ runners: [batchOnly as LanguageRunner] });
    registry.register(fn('f', 'x', ['boolean'], 'boolean'));
    const { value: out, ms } = await timed(
      registry.evalColumns<Uint8Array>('f', [Uint8Array.of(1, 0, 2)], {
        signal: AbortSignal.abort(),
      }),
    );
    expect(called).toEqual([]);
    expect(ms).toBeLessThan(AT_ONCE_MS);
    expect(out.errors.get(0)).toMatchObject({ aborted: true });
    expect(out.errors.get(1)).toMatchObject({ aborted: true });
    expect(out.errors.get(2)).toMatchObject({ kind: 'TypeMismatch' }); // byte 2: its own error
    expect([...out.values]).toEqual([0, 0, 0]);
  });

  test('warmUp rejects with the aborted error and starts nothing', async () => {
    const { runner, called } = stuck();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('f', 'x', ['number'], 'number'));
    const reason = new Error('model closed');
    const error = await failure(registry.warmUp(['f'], { signal: AbortSignal.abort(reason) }));
    expectAborted(error, reason);
    expect(called).toEqual([]);
  });
});

function summary(results: readonly RowResult[]): string[] {
  return results.map((r) =>
    ExtFnError.isInstance(r) ? `${r.kind}${r.aborted ? ' aborted' : ''}: ${r.message}` : 'value',
  );
}

function shape(out: ColumnResults<string[]>) {
  return {
    values: [...out.values],
    errors: [...out.errors].map(([row, e]) => [row, e.kind, e.aborted, e.message]),
  };
}
