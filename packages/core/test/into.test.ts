/**
 * `evalColumns(name, columns, { into })`: results written into the caller's
 * column. Checked against the default (a fresh column) with runners that
 * write into it, runners that ignore it (core copies), and the Value path;
 * a wrong `into` is a typed error naming the option; a reused column never
 * shows a previous call's values at rows in error.
 */
import { describe, expect, test } from 'vitest';
import {
  type BatchOptions,
  type ColumnResults,
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  Registry,
  Value,
} from '../src/index.js';
import { rejection as failure } from '../src/testing/index.js';
import { fakeRunner, fn } from './fake-runner.js';

/**
 * A columnar runner computing `x * 2`; a negative x is its row's error. With
 * `writesInto` it writes straight into `options.into` (as the interpreter does).
 */
function columnRunner(writesInto: boolean) {
  const seen: (BatchOptions['into'] | undefined)[] = [];
  const runner: LanguageRunner = {
    specificationVersion: 'v1',
    language: 'cols',
    packageName: '@test/cols',
    capabilities: { isolated: false, warmWorkers: false, batch: true },
    async probe() {
      return { language: 'cols', available: true, detail: 'in memory' };
    },
    async call(_fn: ExternalFn, args) {
      const x = (args[0] as { value: number }).value;
      if (x < 0) throw ExtFnError.runtime('twice', 'negative');
      return Value.number(x * 2);
    },
    async callColumns(f, columns, options): Promise<ColumnResults> {
      seen.push(options.into);
      const [x] = columns as [Float64Array];
      const values =
        writesInto && options.into ? (options.into as Float64Array) : new Float64Array(x.length);
      const errors = new Map<number, ExtFnError>();
      for (let i = 0; i < x.length; i++) {
        // A runner may leave anything at a failed row; core makes it NaN.
        values[i] = x[i]! * 2;
        if (x[i]! < 0) errors.set(i, ExtFnError.runtime(f.name, 'negative'));
      }
      return { values, errors };
    },
  };
  return { runner, seen };
}

const twice = fn('twice', 'x', ['number'], 'number', false, 'cols');

describe('evalColumns into', () => {
  for (const writesInto of [true, false]) {
    test(`gives the default's results in the caller's column (runner ${writesInto ? 'writes into it' : 'returns its own, core copies'})`, async () => {
      const { runner, seen } = columnRunner(writesInto);
      const registry = new Registry({ runners: [runner] });
      registry.register(twice);
      const x = Float64Array.of(1, -2, 3.5, 4);
      const plain = await registry.evalColumns('twice', [x]);
      const into = new Float64Array(4).fill(7);
      const out = await registry.evalColumns('twice', [x], { into });
      expect(out.values).toBe(into);
      expect(Array.from(into)).toEqual(Array.from(plain.values));
      expect([...out.errors.keys()]).toEqual([...plain.errors.keys()]);
      expect(Number.isNaN(into[1])).toBe(true);
      expect(seen).toEqual([undefined, into]);

      // Reused, on fewer rows with an error cell given and a failing row: no stale value.
      const part = into.subarray(0, 3);
      const again = await registry.evalColumns('twice', [Float64Array.of(-1, 5, 6)], {
        into: part,
        errors: new Map([[2, ExtFnError.runtime('twice', 'upstream')]]),
      });
      expect(again.values).toBe(part);
      expect(Array.from(part)).toEqual([Number.NaN, 10, Number.NaN]);
      expect(again.errors.get(0)?.message).toMatch(/negative/);
      expect(again.errors.get(2)?.message).toMatch(/upstream/);
      expect(into[3]).toBe(8); // the row past the subarray is the caller's, untouched
      await registry.close();
    });
  }

  test('typed columns and the Value path (no callColumns) write into it too, failed rows get the fill', async () => {
    const { runner } = fakeRunner();
    const registry = new Registry({ runners: [runner] });
    registry.register(fn('id', 'echo', ['boolean'], 'boolean'));
    registry.register(fn('boom', 'throw-typed', ['number'], 'number'));
    const into = Uint8Array.of(1, 1, 1);
    const out = await registry.evalColumns('id', [Uint8Array.of(0, 1, 0)], {
      into,
      errors: new Map([[1, ExtFnError.runtime('id', 'upstream')]]),
    });
    expect(out.values).toBe(into);
    expect(Array.from(into)).toEqual([0, 0, 0]);
    const numbers = Float64Array.of(1, 2);
    const failed = await registry.evalColumns('boom', [Float64Array.of(1, 2)], { into: numbers });
    expect(failed.values).toBe(numbers);
    expect(Array.from(numbers)).toEqual([Number.NaN, Number.NaN]);
    expect(failed.errors.size).toBe(2);
    await registry.close();
  });

  test('a wrong into is a typed error naming the option and the fix', async () => {
    const { runner, seen } = columnRunner(true);
    const registry = new Registry({ runners: [runner] });
    registry.register(twice);
    const x = Float64Array.of(1, 2, 3);
    const wrongType = await failure(
      registry.evalColumns('twice', [x], { into: new Float32Array(3) as never }),
    );
    expect(wrongType.kind).toBe('Runtime');
    expect(wrongType.message).toMatch(
      /function twice: options\.into must be a Float64Array of 3 rows, got a Float32Array/,
    );
    expect(wrongType.fix).toMatch(/options\.into/);
    const wrongLength = await failure(
      registry.evalColumns('twice', [x], { into: new Float64Array(2) }),
    );
    expect(wrongLength.message).toMatch(
      /options\.into must be a Float64Array of 3 rows, got a column of 2 rows/,
    );
    const shared = await failure(registry.evalColumns('twice', [x], { into: x }));
    expect(shared.message).toMatch(/options\.into shares memory with argument column 1/);
    const overlapping = new Float64Array(6);
    const overlap = await failure(
      registry.evalColumns('twice', [overlapping.subarray(0, 3)], {
        into: overlapping.subarray(2, 5),
      }),
    );
    expect(overlap.message).toMatch(/shares memory/);
    // Separate slices of one buffer are fine.
    const ok = await registry.evalColumns('twice', [overlapping.subarray(0, 3)], {
      into: overlapping.subarray(3, 6),
    });
    expect(ok.errors.size).toBe(0);
    expect(seen).toHaveLength(1); // no wrong into ever reached the runner
    await registry.close();
  });
});
