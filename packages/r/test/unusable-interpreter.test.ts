/**
 * IMPROV_EXTFN_R, or the `interpreter` option, naming no executable: the R
 * runner's LanguageUnavailable error says which, its value, what is wrong
 * with it and the fix. No R or sandbox is needed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value } from '@improv/extfn-core';
import { registryOf, rejection } from '@improv/extfn-core/testing';
import { afterAll, afterEach, describe, expect, test } from 'vitest';
import { r } from '../src/index.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-r-unusable-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const saved = process.env.IMPROV_EXTFN_R;
afterEach(() => {
  if (saved === undefined) delete process.env.IMPROV_EXTFN_R;
  else process.env.IMPROV_EXTFN_R = saved;
});

async function evalError(runner: ReturnType<typeof r>) {
  const registry = registryOf(runner, 'r', { f: ['result <- args[[1]]', ['number'], 'number'] });
  try {
    return await rejection(registry.eval('f', [Value.number(1)]));
  } finally {
    await registry.close();
  }
}

describe('an R interpreter choice that names no executable', () => {
  test('IMPROV_EXTFN_R that is a directory', async () => {
    process.env.IMPROV_EXTFN_R = dir;
    const fix = 'set IMPROV_EXTFN_R to an Rscript executable, or unset it to use Rscript from PATH';
    const error = await evalError(r({ policy: 'trusted' }));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toBe(
      `function f: no r interpreter for @improv/extfn-r: IMPROV_EXTFN_R is set to ${dir}, which is a directory; ${fix}`,
    );
    expect(error.fix).toBe(fix);
  });

  test('the `interpreter` option that does not exist', async () => {
    const missing = join(dir, 'Rscript');
    const error = await evalError(r({ interpreter: missing, policy: 'trusted' }));
    expect(error.message).toContain(
      `the \`interpreter\` option is set to ${missing}, which does not exist; set the \`interpreter\` option to an Rscript executable, or leave it out to use IMPROV_EXTFN_R or Rscript from PATH`,
    );
  });
});
