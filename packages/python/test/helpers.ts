/** Shared by the Python tests: the interpreter, sandbox availability, scoped registries and process checks. */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Value } from '@improv/extfn-core';
import { closeAfterEach, type FnTable, registryOf } from '@improv/extfn-core/testing';
import { probeSandbox, type SandboxPolicy } from '@improv/extfn-sandbox';
import { afterAll, afterEach, expect } from 'vitest';
import { closeIdleZygotes, type PythonRunnerOptions, python } from '../src/index.js';

/** Tests use Debian's interpreter: the pyenv shim first on PATH is unreadable for the sandbox uid. */
export const PYTHON = '/usr/bin/python3';
export const hasPython = existsSync(PYTHON);

/** Whether Debian's python3-numpy is importable by that interpreter (tests of `packages: 'system'`). */
export const hasNumpy =
  hasPython &&
  (() => {
    try {
      execFileSync(PYTHON, ['-c', 'import numpy'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  })();
export const noNumpy = 'skipped: python3-numpy is not installed for /usr/bin/python3';

const restrictedProbe = await probeSandbox({ policy: 'restricted' });
export const restrictedOk = hasPython && restrictedProbe.ok;
export const noRestricted = `skipped: Restricted sandbox unavailable here (${restrictedProbe.problem ?? restrictedProbe.summary})`;

export function runner(options: PythonRunnerOptions = {}) {
  return python({ interpreter: PYTHON, ...options });
}

/** A registry with one python runner; `fns` maps name → [body, argTypes, returnType, extras?]. */
export function registryWith(
  policy: SandboxPolicy,
  fns: FnTable,
  options: PythonRunnerOptions = {},
) {
  const r = runner({ policy, ...options });
  return { registry: registryOf(r, 'python', fns), runner: r };
}

const closeAfterTest = closeAfterEach(afterEach);
// a zygote idles after its last runner: none outlives the file's tests (a test
// worker may end without its exit hook, which removes the zygote's directory)
afterAll(() => closeIdleZygotes());

/** `registryWith`, closed after the current test. */
export function scopedRegistry(...args: Parameters<typeof registryWith>) {
  return closeAfterTest(registryWith(...args));
}

/** The kit's helpers, shared by every package's tests. */
export {
  alive,
  type FnExtras,
  rejection as failure,
  waitFor,
} from '@improv/extfn-core/testing';

/** Host pids whose command line contains `marker` (to show a process is gone). */
export function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes(marker)) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** A body (and a script) recursing deeper and deeper until RecursionError: the deepest call that worked. */
const DEEPEST = [
  'def down(n):',
  '    return 0 if n == 0 else 1 + down(n - 1)',
  'deepest = 0',
  'for n in range(900, 1100):',
  '    try:',
  '        down(n)',
  '        deepest = n',
  '    except RecursionError:',
  '        break',
].join('\n');

/** That a body recursing until RecursionError gets exactly as deep as a script run by `interpreter` itself, through eval, evalBatch and evalColumns. */
export async function expectScriptDepth(interpreter: string, policy: SandboxPolicy) {
  const script = Number(
    execFileSync(interpreter, ['-c', `${DEEPEST}\nprint(deepest)`], { encoding: 'utf8' }),
  );
  expect(script).toBeGreaterThan(990);
  const { registry } = scopedRegistry(
    policy,
    { deep: [`${DEEPEST}\nresult = float(deepest) + 0 * args[0]`, ['number'], 'number'] },
    { interpreter },
  );
  const n = Value.number;
  expect(await registry.eval('deep', [n(0)])).toEqual(n(script));
  expect(await registry.evalBatch('deep', [[n(1)], [n(2)]])).toEqual([n(script), n(script)]);
  const { values } = await registry.evalColumns('deep', [Float64Array.of(3, 4)]);
  expect(Array.from(values)).toEqual([script, script]);
}
