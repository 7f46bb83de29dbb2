/**
 * Kit topic "lifecycle": the runner declares the v1 specification and probes
 * as available, `warmUp()` readies a function without failing it, and after
 * `close()` (twice is fine) calls fail with an ExtFnError instead of
 * starting anything.
 */
import { strict as assert } from 'node:assert';
import { Registry } from '../registry.js';
import {
  type ConformanceBodies,
  type CreateRunner,
  kit,
  rejection,
  type SuiteOptions,
  type TestFunction,
} from './harness.js';
import { SAMPLES } from './samples.js';

export interface LifecycleOptions extends SuiteOptions {
  bodies: Pick<ConformanceBodies, 'identity'>;
}

export function lifecycleSuite(
  test: TestFunction,
  createRunner: CreateRunner,
  options: LifecycleOptions,
): void {
  const k = kit(test, createRunner, options);

  /** Registers `id` (the identity body on the first type) and returns a sample argument for it. */
  function registerIdentity(registry: Registry, language: string) {
    const type = k.types[0]!;
    registry.register({
      name: 'id',
      language,
      body: options.bodies.identity,
      argTypes: [type],
      returnType: type,
      pure: false,
    });
    return SAMPLES[type]({ loneSurrogates: false })[0]!;
  }

  test(
    k.name('the runner declares the v1 specification and probes as available'),
    async () => {
      const runner = await createRunner();
      try {
        assert.equal(runner.specificationVersion, 'v1');
        assert.match(runner.language, /^[a-z][a-z0-9_-]*$/, 'language id is lower case');
        assert.equal(typeof runner.packageName, 'string');
        const probe = await runner.probe();
        assert.equal(probe.language, runner.language);
        assert.equal(probe.available, true, `probe says unavailable: ${probe.detail}`);
      } finally {
        await runner.close?.();
      }
    },
    k.perTest,
  );

  test(
    k.name('warmUp() readies a function (or says why it keeps nothing warm); calls after it work'),
    async () => {
      const runner = await createRunner();
      const registry = new Registry({ runners: [runner] });
      try {
        const sample = registerIdentity(registry, runner.language);
        const [result, ...rest] = await registry.warmUp();
        assert.equal(rest.length, 0);
        assert.equal(result?.name, 'id');
        assert.equal(result?.error, undefined, `warmUp failed: ${result?.error?.message}`);
        assert.ok(
          result?.warm || typeof result?.reason === 'string',
          'not warm, and no reason why',
        );
        assert.deepEqual(await registry.eval('id', [sample]), sample);
        const unknown = await rejection(registry.warmUp(['id', 'nope']));
        assert.equal(unknown.kind, 'NotFound');
      } finally {
        await registry.close();
      }
    },
    k.perTest,
  );

  test(
    k.name('close() ends the runner; later calls fail with an ExtFnError'),
    async () => {
      const runner = await createRunner();
      const registry = new Registry({ runners: [runner] });
      const sample = registerIdentity(registry, runner.language);
      await registry.eval('id', [sample]);
      await registry.close();
      await registry.close(); // twice is fine
      const error = await rejection(registry.eval('id', [sample]));
      assert.equal(error.kind, 'Runtime');
      assert.match(error.message, /closed/);
    },
    k.perTest,
  );
}
