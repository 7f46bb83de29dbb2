/** Shared by the interpreter tests: the fixture driver on /usr/bin/python3, the strongest sandbox that works here, registries and process checks. */
import { existsSync, readFileSync } from 'node:fs';
import type { ValueType } from '@improv/extfn-core';
import { registryOf } from '@improv/extfn-core/testing';
import { probeSandbox } from '@improv/extfn-sandbox';
import { createInterpreterRunner, type InterpreterRunnerOptions } from '../src/index.js';

export const PYTHON = '/usr/bin/python3';
export const hasPython = existsSync(PYTHON);
const probe = await probeSandbox({ policy: 'restricted' });
export const restrictedOk = hasPython && probe.ok;
export const noRestricted = `skipped: Restricted sandbox unavailable here (${probe.problem ?? probe.summary})`;
/** Pool mechanics do not depend on the sandbox; use the strongest policy that works here. */
export const policy = restrictedOk ? 'restricted' : 'trusted';

/** The same kind of bootstrap the Python runner uses: read `N\n` + N bytes from fd 0 unbuffered, exec. */
export const BOOTSTRAP = [
  'import os',
  'def r(n):',
  "    b = b''",
  '    while len(b) < n:',
  '        c = os.read(0, n - len(b))',
  '        if not c: raise SystemExit(3)',
  '        b += c',
  '    return b',
  "h = b''",
  "while not h.endswith(b'\\n'): h += r(1)",
  "exec(compile(r(int(h)), '<driver>', 'exec'))",
].join('\n');

export const FIXTURE_DRIVER = readFileSync(
  new URL('./fixtures/driver.py', import.meta.url),
  'utf8',
);

export function fixtureRunner(options: InterpreterRunnerOptions = {}) {
  return createInterpreterRunner(
    {
      language: 'fixture',
      packageName: '@improv/extfn-fixture',
      resolveInterpreter: async () => (hasPython ? { path: PYTHON } : undefined),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: FIXTURE_DRIVER,
    },
    { policy, ...options },
  );
}

export function fixtureRegistry(
  fns: Record<string, [string, ValueType[], ValueType]>,
  options: InterpreterRunnerOptions = {},
) {
  const runner = fixtureRunner(options);
  return { registry: registryOf(runner, 'fixture', fns, 5_000), runner };
}

/** The kit's helpers, shared by every package's tests. */
export { alive, rejection as failure, waitFor } from '@improv/extfn-core/testing';
