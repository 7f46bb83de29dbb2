/** Shared by the Python tests: the interpreter, sandbox availability, scoped registries and process checks. */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Registry, type Value } from '@improv/extfn-core';
import { probeSandbox, type SandboxPolicy } from '@improv/extfn-sandbox';
import { afterEach } from 'vitest';
import { type PythonRunnerOptions, python } from '../src/index.js';

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

/** Descriptor fields beyond body and types: `vectorized`, `pure`. */
export interface FnExtras {
  vectorized?: boolean;
  pure?: boolean;
}

/** A registry with one python runner; `fns` maps name → [body, argTypes, returnType, extras?]. */
export function registryWith(
  policy: SandboxPolicy,
  fns: Record<string, [string, Value['type'][], Value['type'], FnExtras?]>,
  options: PythonRunnerOptions = {},
) {
  const r = runner({ policy, ...options });
  const registry = new Registry({ runners: [r], timeoutMs: 10_000 });
  for (const [name, [body, argTypes, returnType, extras]] of Object.entries(fns)) {
    registry.register({
      name,
      language: 'python',
      body,
      argTypes,
      returnType,
      pure: false,
      ...extras,
    } as never);
  }
  return { registry, runner: r };
}

const toClose: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of toClose.splice(0)) await close();
});

/** `registryWith`, closed after the current test. */
export function scopedRegistry(...args: Parameters<typeof registryWith>) {
  const made = registryWith(...args);
  toClose.push(() => made.registry.close());
  return made;
}

/** The ExtFnError a promise rejects with (the kit's helper, shared by every package's tests). */
export { rejection as failure } from '@improv/extfn-core/testing';

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

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function waitFor(check: () => boolean, ms = 3_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return check();
}
