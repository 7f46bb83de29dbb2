/** Shared by the interpreter tests: the fixture driver on /usr/bin/python3, the strongest sandbox that works here, registries and process checks. */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import type { ValueType } from '@improv/extfn-core';
import { registryOf } from '@improv/extfn-core/testing';
import { probeSandbox } from '@improv/extfn-sandbox';
import {
  createInterpreterRunner,
  type InterpreterRunnerOptions,
  type InterpreterSpec,
} from '../src/index.js';

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

/** The fixture driver's runner; `spec` overrides its spec's fields (e.g. `startupTimeoutMs`). */
export function fixtureRunner(
  options: InterpreterRunnerOptions = {},
  spec: Partial<InterpreterSpec> = {},
) {
  return createInterpreterRunner(
    {
      language: 'fixture',
      packageName: '@improv/extfn-fixture',
      resolveInterpreter: async () => (hasPython ? { path: PYTHON } : undefined),
      args: ['-s', '-S', '-c', BOOTSTRAP],
      driverSource: FIXTURE_DRIVER,
      ...spec,
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

/** The processes `pid` started that are still there, from any of its threads (a spawner's trees). */
export function childrenOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).flatMap((task) =>
      readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8')
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map(Number),
    );
  } catch {
    return [];
  }
}
