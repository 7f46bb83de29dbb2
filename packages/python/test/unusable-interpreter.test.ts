/**
 * IMPROV_EXTFN_PYTHON, or the `interpreter` option, naming no executable:
 * the Python runner's LanguageUnavailable error says which, its value, what
 * is wrong with it and the fix. No interpreter or sandbox is needed.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@improv/extfn-core';
import { registryOf, rejection } from '@improv/extfn-core/testing';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { python } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-python-unusable-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const saved = process.env.IMPROV_EXTFN_PYTHON;
afterEach(() => {
  if (saved === undefined) delete process.env.IMPROV_EXTFN_PYTHON;
  else process.env.IMPROV_EXTFN_PYTHON = saved;
});

const ENV_FIX =
  'set IMPROV_EXTFN_PYTHON to a Python 3 executable, or unset it to use python3 from PATH';

async function evalError(runner: ReturnType<typeof python>) {
  const registry = registryOf(runner, 'python', { f: ['result = args[0]', ['number'], 'number'] });
  try {
    return await rejection(registry.eval('f', [Value.number(1)]));
  } finally {
    await registry.close();
  }
}

describe('IMPROV_EXTFN_PYTHON that names no executable', () => {
  test('a path that does not exist', async () => {
    process.env.IMPROV_EXTFN_PYTHON = '/nope/python3';
    const error = await evalError(python({ policy: 'trusted' }));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toBe(
      `function f: no python interpreter for @improv/extfn-python: IMPROV_EXTFN_PYTHON is set to /nope/python3, which does not exist; ${ENV_FIX}`,
    );
    expect(error.fix).toBe(ENV_FIX);
    expect(error.language).toBe('python');
  });

  test('a directory', async () => {
    process.env.IMPROV_EXTFN_PYTHON = dir;
    const error = await evalError(python({ policy: 'trusted' }));
    expect(error.message).toContain(`IMPROV_EXTFN_PYTHON is set to ${dir}, which is a directory; `);
    expect(error.fix).toBe(ENV_FIX);
  });

  test('the probe (what doctor shows) says it too', async () => {
    process.env.IMPROV_EXTFN_PYTHON = '/nope/python3';
    const runner = python({ policy: 'trusted' });
    try {
      const probe = await runner.probe();
      expect(probe.available).toBe(false);
      expect(probe.detail).toBe(
        `IMPROV_EXTFN_PYTHON is set to /nope/python3, which does not exist; ${ENV_FIX}`,
      );
      expect(probe.fix).toBe(ENV_FIX);
    } finally {
      await runner.close();
    }
  });
});

describe('the `interpreter` option that names no executable', () => {
  test('a file that is not executable: named as the option, and it wins over the variable', async () => {
    process.env.IMPROV_EXTFN_PYTHON = '/usr/bin/python3';
    const file = join(dir, 'python3');
    writeFileSync(file, '#!/bin/sh\n');
    chmodSync(file, 0o644);
    const error = await evalError(python({ interpreter: file, policy: 'trusted' }));
    const fix =
      'set the `interpreter` option to a Python 3 executable, or leave it out to use IMPROV_EXTFN_PYTHON or python3 from PATH';
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toBe(
      `function f: no python interpreter for @improv/extfn-python: the \`interpreter\` option is set to ${file}, which is not executable; ${fix}`,
    );
    expect(error.fix).toBe(fix);
  });
});
