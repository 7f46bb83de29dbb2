/**
 * Kit topic "isolation": every row starts from the same state, whichever
 * path runs it (`eval`, `evalBatch`, `evalColumns`): a variable one row sets
 * is not there in the next, and the default random generator gives the same
 * draw on every row. A runner that cannot express a check opts out with a
 * reason (`unsupported.isolation`, `unsupported.random`), shown in the name
 * of the skipped test.
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import type { Registry } from '../registry.js';
import { Value as V } from '../value.js';
import {
  type ConformanceBodies,
  type CreateRunner,
  kit,
  type SuiteOptions,
  show,
  type TestFunction,
} from './harness.js';

export interface IsolationOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'remember' | 'random'>;
}

const ROWS = 24;

/** The number each row gave, by path; a failed row fails the test with its error. */
async function everyPath(registry: Registry, name: string): Promise<Record<string, number[]>> {
  const inputs = Array.from({ length: ROWS }, (_, i) => i + 1);
  const numbers = (results: readonly unknown[], path: string) =>
    results.map((r, i) => {
      if (ExtFnError.isInstance(r) || (r as { type?: unknown }).type !== 'number')
        assert.fail(`${path} row ${i}: expected a number, got ${show(r)}`);
      return (r as { value: number }).value;
    });
  const evals: unknown[] = [];
  for (const x of inputs.slice(0, 4)) evals.push(await registry.eval(name, [V.number(x)]));
  const batch = await registry.evalBatch(
    name,
    inputs.map((x) => [V.number(x)]),
  );
  const columns = await registry.evalColumns(name, [Float64Array.from(inputs)]);
  const [failed] = columns.errors;
  if (failed) assert.fail(`evalColumns row ${failed[0]}: ${failed[1].message}`);
  return {
    eval: numbers(evals, 'eval'),
    evalBatch: numbers(batch, 'evalBatch'),
    evalColumns: [...columns.values],
  };
}

export function isolationSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: IsolationOptions,
): void {
  const k = kit(test, createRunner, options);
  const { bodies, unsupported = {} } = options;
  if (!k.types.includes('number')) return; // both checks are number-typed

  const isolated =
    'a variable one row sets is not visible in the next (eval, evalBatch, evalColumns)';
  if (unsupported.isolation) k.skip(isolated, unsupported.isolation);
  else if (!bodies.remember) k.skip(isolated, 'no bodies.remember given');
  else {
    const body = bodies.remember;
    test(
      k.name(isolated),
      () =>
        k.withRegistry(async (registry, define) => {
          define('remember', body, ['number'], 'number');
          for (const [path, got] of Object.entries(await everyPath(registry, 'remember'))) {
            const leaked = got.findIndex((x) => x !== -1);
            assert.equal(
              leaked,
              -1,
              `${path} row ${leaked} saw ${got[leaked]} left behind by an earlier row (expected -1)`,
            );
          }
        }),
      k.perTest,
    );
  }

  const reseeded =
    'the default random generator gives the same draw on every row (eval, evalBatch, evalColumns)';
  if (unsupported.random) k.skip(reseeded, unsupported.random);
  else if (!bodies.random) k.skip(reseeded, 'no bodies.random given');
  else {
    const body = bodies.random;
    test(
      k.name(reseeded),
      () =>
        k.withRegistry(async (registry, define) => {
          define('draw', body, ['number'], 'number');
          const paths = await everyPath(registry, 'draw');
          const first = paths.eval![0]!;
          for (const [path, got] of Object.entries(paths)) {
            const other = got.findIndex((x) => !Object.is(x, first));
            assert.equal(
              other,
              -1,
              `${path} row ${other} drew ${got[other]}, the first eval drew ${first}: the generator is not reseeded per row`,
            );
          }
        }),
      k.perTest,
    );
  }
}
