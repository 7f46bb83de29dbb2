/**
 * Kit topic "errors": bad calls are refused before the runner sees them, a
 * raising body and a wrong result type are Runtime errors, a runaway body
 * times out near its deadline and the runner still works after, and output
 * past the cap is refused.
 */
import { strict as assert } from 'node:assert';
import { ExtFnError } from '../errors.js';
import { Value as V } from '../value.js';
import {
  assertSame,
  type ConformanceBodies,
  type CreateRunner,
  kit,
  rejection,
  type SuiteOptions,
  type TestFunction,
} from './harness.js';

export interface ErrorsOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'add' | 'raise' | 'noLoad' | 'wrongReturn' | 'loop' | 'flood'>;
  /** Deadline for the runaway body (default 1 000 ms). */
  loopTimeoutMs?: number;
  /** How far past the deadline a Timeout may arrive (default 3 000 ms). */
  timeoutSlackMs?: number;
}

export function errorsSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: ErrorsOptions,
): void {
  const k = kit(test, createRunner, options);
  const { bodies } = options;

  if (k.types.includes('number')) {
    test(
      k.name('arity and argument types are checked before the runner is called'),
      () =>
        k.withRegistry(async (registry, define, counts) => {
          define('add', bodies.add, ['number', 'number'], 'number');
          const arity = await rejection(registry.eval('add', [V.number(1)]));
          assert.equal(arity.kind, 'ArityMismatch');
          assert.equal(arity.message, 'function add: expected 2 argument(s), got 1');
          const type = await rejection(registry.eval('add', [V.number(1), V.text('2')]));
          assert.equal(type.kind, 'TypeMismatch');
          assert.equal(type.position, 2);
          assert.equal(counts.rows(), 0, 'the runner was called for an invalid call');
        }),
      k.perTest,
    );

    test(
      k.name('a result of the wrong type is a Runtime error naming the expected type'),
      () =>
        k.withRegistry(async (registry, define) => {
          define('wrong', bodies.wrongReturn, [], 'number');
          const error = await rejection(registry.eval('wrong', []));
          assert.equal(error.kind, 'Runtime');
          assert.match(error.message, /number/);
        }),
      k.perTest,
    );

    const loopMs = options.loopTimeoutMs ?? 1_000;
    const slack = options.timeoutSlackMs ?? 3_000;
    test(
      k.name(
        `a runaway body times out near its ${loopMs} ms deadline, and the runner still works after`,
      ),
      () =>
        k.withRegistry(async (registry, define) => {
          define('loop', bodies.loop, [], 'number');
          define('add', bodies.add, ['number', 'number'], 'number');
          const started = performance.now();
          const error = await rejection(registry.eval('loop', [], { timeoutMs: loopMs }));
          const elapsed = performance.now() - started;
          assert.equal(
            error.kind,
            'Timeout',
            `expected Timeout, got ${error.kind}: ${error.message}`,
          );
          assert.equal(error.ms, loopMs);
          assert.ok(elapsed < loopMs + slack, `Timeout came after ${Math.round(elapsed)} ms`);
          assertSame(
            await registry.eval('add', [V.number(2), V.number(3)]),
            V.number(5),
            'add after a timeout',
          );
        }),
      k.perTest,
    );
  }

  test(
    k.name('a raising body is a Runtime error carrying the message'),
    () =>
      k.withRegistry(async (registry, define) => {
        define('boom', bodies.raise, [], k.types[0]!);
        const error = await rejection(registry.eval('boom', []));
        assert.equal(error.kind, 'Runtime');
        assert.match(error.message, /nope/);
        assert.match(error.message, /^function boom: /);
        assert.equal(error.loadFailed, undefined, 'a body that loads and raises is not loadFailed');
      }),
    k.perTest,
  );

  const notLoading = 'a body that does not load fails every call alike, marked loadFailed';
  const unsupported = options.unsupported ?? {};
  if (unsupported.loadFailed) k.skip(notLoading, unsupported.loadFailed);
  else if (!bodies.noLoad) k.skip(notLoading, 'no bodies.noLoad given');
  else {
    const body = bodies.noLoad;
    test(
      k.name(notLoading),
      () =>
        k.withRegistry(async (registry, define) => {
          define('broken', body, [], k.types[0]!);
          const error = await rejection(registry.eval('broken', []));
          assert.equal(
            error.kind,
            'Runtime',
            `expected Runtime, got ${error.kind}: ${error.message}`,
          );
          assert.match(error.message, /^function broken: /);
          assert.equal(error.loadFailed, true, `not marked loadFailed: ${error.message}`);
          // a second call (the runner may remember the refusal) and a batch's rows say the same
          const again = await rejection(registry.eval('broken', []));
          assert.equal(
            again.loadFailed,
            true,
            `a second call: not marked loadFailed: ${again.message}`,
          );
          assert.equal(again.message, error.message);
          const rows = await registry.evalBatch('broken', [[], [], []]);
          rows.forEach((row, i) => {
            assert.ok(ExtFnError.isInstance(row), `evalBatch row ${i}: expected its error`);
            assert.equal(row.loadFailed, true, `evalBatch row ${i}: not marked loadFailed`);
            assert.equal(row.message, error.message, `evalBatch row ${i}`);
          });
        }),
      k.perTest,
    );
  }

  if (bodies.flood) {
    const body = bodies.flood;
    test(
      k.name('printing 5 MB is a Runtime error: output too large'),
      () =>
        k.withRegistry(async (registry, define) => {
          define('flood', body, [], k.types[0]!);
          const error = await rejection(registry.eval('flood', []));
          assert.equal(error.kind, 'Runtime');
          assert.equal(error.limit, 'output');
          assert.match(error.message, /output too large/);
        }),
      k.perTest,
    );
  }
}
