/**
 * `capabilities.isolated` says what is in force, not what was asked for: a
 * runner that fell back to rlimits only (IMPROV_EXTFN_ALLOW_UNSANDBOXED=1
 * where bubblewrap cannot start) reports itself as not isolated. The failing
 * host is played by a stand-in bubblewrap that fails the way the real one
 * does where user namespaces are refused.
 */
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Value, type ValueType } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { fixtureRegistry, hasPython, noRestricted, restrictedOk } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'extfn-caps-'));
chmodSync(dir, 0o755);
const FAILING_BWRAP = join(dir, 'bwrap');
writeFileSync(
  FAILING_BWRAP,
  [
    '#!/bin/sh',
    'if [ "$1" = "--version" ]; then echo "bubblewrap 0.9.0"; exit 0; fi',
    'echo "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2',
    'exit 1',
    '',
  ].join('\n'),
  { mode: 0o755 },
);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const ADD: Record<string, [string, ValueType[], ValueType]> = {
  add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
};

describe('capabilities.isolated follows the policy in force', () => {
  test.skipIf(!restrictedOk)(
    `restricted with a working bwrap is isolated ${restrictedOk ? '' : noRestricted}`,
    async () => {
      const { registry, runner } = fixtureRegistry(ADD, { policy: 'restricted' });
      try {
        expect(await registry.eval('add', [Value.number(1), Value.number(2)])).toEqual(
          Value.number(3),
        );
        expect(runner.capabilities.isolated).toBe(true);
      } finally {
        await registry.close();
      }
    },
  );

  test.skipIf(!hasPython)('the rlimits-only fallback is reported as not isolated', async () => {
    process.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED = '1';
    const { registry, runner } = fixtureRegistry(ADD, {
      policy: 'restricted',
      bwrapPath: FAILING_BWRAP,
    });
    try {
      expect(runner.capabilities.isolated).toBe(true); // what was asked for, before any probe
      expect(await registry.eval('add', [Value.number(1), Value.number(2)])).toEqual(
        Value.number(3),
      );
      expect(runner.capabilities.isolated).toBe(false);
    } finally {
      delete process.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED;
      await registry.close();
    }
  });
});
