/**
 * An interpreter variable (or option) that names no executable: the
 * runner's LanguageUnavailable error, and its probe, say which variable,
 * its value, what is wrong with it and the fix — not just "not found".
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExtFnError, Value } from '@improv/extfn-core';
import { registryOf } from '@improv/extfn-core/testing';
import { afterAll, describe, expect, test } from 'vitest';
import { createInterpreterRunner, resolveExecutable } from '../src/index.js';
import { failure } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-unusable-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A runner whose interpreter comes from FIXTURE_INTERPRETER in `env` (never from PATH). */
function runnerWith(env: NodeJS.ProcessEnv) {
  return createInterpreterRunner(
    {
      language: 'fixture',
      packageName: '@improv/extfn-fixture',
      resolveInterpreter: () =>
        resolveExecutable({
          envVar: 'FIXTURE_INTERPRETER',
          names: ['no-such-fixture-interpreter'],
          executable: 'a fixture executable',
          env: { PATH: dir, ...env },
        }),
      args: [],
      driverSource: '',
      installHint: 'install the fixture interpreter',
    },
    { policy: 'trusted' },
  );
}

const FIX =
  'set FIXTURE_INTERPRETER to a fixture executable, or unset it to use no-such-fixture-interpreter from PATH';

describe('an interpreter variable that names no executable', () => {
  test('a call fails with LanguageUnavailable naming the variable, its value, the problem and the fix', async () => {
    const runner = runnerWith({ FIXTURE_INTERPRETER: dir });
    const registry = registryOf(runner, 'fixture', { f: ['x', ['number'], 'number'] });
    try {
      const error = await failure(registry.eval('f', [Value.number(1)]));
      expect(error.kind).toBe('LanguageUnavailable');
      expect(error.message).toBe(
        `function f: no fixture interpreter for @improv/extfn-fixture: FIXTURE_INTERPRETER is set to ${dir}, which is a directory; ${FIX}`,
      );
      expect(error.fix).toBe(FIX);
      expect(error.language).toBe('fixture');
      expect(error.functionName).toBe('f');
      expect(runner.stats().started).toBe(0);
    } finally {
      await registry.close();
    }
  });

  test('a batch: every row gets the same error', async () => {
    const runner = runnerWith({ FIXTURE_INTERPRETER: '/nope/fixture' });
    const registry = registryOf(runner, 'fixture', { f: ['x', ['number'], 'number'] });
    try {
      const [error] = (await registry.evalBatch('f', [[Value.number(1)]])) as ExtFnError[];
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect(error!.kind).toBe('LanguageUnavailable');
      expect(error!.message).toBe(
        `function f: no fixture interpreter for @improv/extfn-fixture: FIXTURE_INTERPRETER is set to /nope/fixture, which does not exist; ${FIX}`,
      );
      expect(error!.fix).toBe(FIX);
    } finally {
      await registry.close();
    }
  });

  test('the probe says it too, with the fix', async () => {
    const runner = runnerWith({ FIXTURE_INTERPRETER: '/nope/fixture' });
    try {
      expect(await runner.probe()).toEqual({
        language: 'fixture',
        available: false,
        detail: `FIXTURE_INTERPRETER is set to /nope/fixture, which does not exist; ${FIX}`,
        fix: FIX,
      });
    } finally {
      await runner.close();
    }
  });

  test('nothing set and nothing on PATH: the install hint, as before', async () => {
    const runner = runnerWith({});
    const registry = registryOf(runner, 'fixture', { f: ['x', ['number'], 'number'] });
    try {
      const error = await failure(registry.eval('f', [Value.number(1)]));
      expect(error.kind).toBe('LanguageUnavailable');
      expect(error.message).toBe(
        'function f: no fixture interpreter was found for @improv/extfn-fixture; install the fixture interpreter',
      );
      expect(error.fix).toBe('install the fixture interpreter');
    } finally {
      await registry.close();
    }
  });
});
