/**
 * Small helpers a runner package's own tests share: a registry with a table
 * of functions on one runner, closing registries after each test, and
 * process checks for tests that watch workers come and go. Tied to no test
 * framework: `closeAfterEach` takes the framework's `afterEach`.
 */
import type { LanguageRunner } from '../language-runner.js';
import { Registry } from '../registry.js';
import type { ValueType } from '../value.js';

/** Descriptor fields beyond body and types. */
export interface FnExtras {
  vectorized?: boolean;
  pure?: boolean;
}

/** name → [body, argTypes, returnType, extras?]; functions are impure unless extras say so. */
export type FnTable = Record<
  string,
  [body: string, argTypes: ValueType[], returnType: ValueType, extras?: FnExtras]
>;

/** A registry with one runner and `fns` registered in `language`. */
export function registryOf(
  runner: LanguageRunner,
  language: string,
  fns: FnTable,
  timeoutMs = 10_000,
): Registry {
  const registry = new Registry({ runners: [runner], timeoutMs });
  for (const [name, [body, argTypes, returnType, extras]] of Object.entries(fns)) {
    registry.register({ name, language, body, argTypes, returnType, pure: false, ...extras });
  }
  return registry;
}

/**
 * Returns `track(registry)`: every registry tracked during a test is closed
 * after it, through the framework's `afterEach` (registered once, here).
 */
export function closeAfterEach(
  afterEach: (fn: () => Promise<void>) => unknown,
): <T extends { registry: Registry }>(made: T) => T {
  const open: Registry[] = [];
  afterEach(async () => {
    for (const registry of open.splice(0)) await registry.close();
  });
  return (made) => {
    open.push(made.registry);
    return made;
  };
}

/** Whether a process with this pid exists (signal 0 checks without sending). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Polls `check` every 50 ms for up to `ms`; its last answer. */
export async function waitFor(check: () => boolean, ms = 3_000): Promise<boolean> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return check();
}
