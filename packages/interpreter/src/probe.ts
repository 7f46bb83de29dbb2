/**
 * The runner's probe: is the interpreter there, does the sandbox work for
 * this policy, and does the driver start inside it (its version, from the
 * `ready` frame). Never throws: every failure is a RunnerProbe with a fix.
 */
import type { ExtFnError, RunnerProbe } from '@improv/extfn-core';
import { probeSandbox, type SandboxOptions, type SandboxPolicy } from '@improv/extfn-sandbox';
import { runDriverOnce } from './run-once.js';
import type { ResolvedInterpreter } from './types.js';

export interface ProbeInterpreterOptions {
  language: string;
  resolve(): Promise<ResolvedInterpreter | undefined>;
  installHint: string;
  policy: SandboxPolicy;
  bwrapPath?: string;
  /** How to start the driver with no body, with the start-up deadline. */
  sandbox(interpreter: ResolvedInterpreter): SandboxOptions;
  driverSource: string;
}

export async function probeInterpreter(options: ProbeInterpreterOptions): Promise<RunnerProbe> {
  const { language } = options;
  let interpreter: ResolvedInterpreter | undefined;
  try {
    interpreter = await options.resolve();
  } catch (error) {
    return {
      language,
      available: false,
      detail: `could not look for the interpreter: ${String(error)}`,
    };
  }
  if (!interpreter) {
    return {
      language,
      available: false,
      detail: `no ${language} interpreter found`,
      fix: options.installHint,
    };
  }
  const sandbox = await probeSandbox({
    policy: options.policy,
    ...(options.bwrapPath ? { bwrapPath: options.bwrapPath } : {}),
  });
  const base = { language, interpreter: { path: interpreter.path }, protection: sandbox.summary };
  if (!sandbox.ok) {
    return {
      ...base,
      available: false,
      detail: sandbox.problem ?? sandbox.summary,
      ...(sandbox.fix ? { fix: sandbox.fix } : {}),
    };
  }
  // Start the driver (no body) under the real sandbox: proves the interpreter runs there and reads its version.
  try {
    const { ready } = await runDriverOnce(options.sandbox(interpreter), options.driverSource, []);
    const version = typeof ready.version === 'string' ? ready.version : undefined;
    return {
      ...base,
      available: true,
      interpreter: { path: interpreter.path, ...(version ? { version } : {}) },
      detail: `${language} ${version ?? ''} at ${interpreter.path}`.replace(/ +/g, ' '),
    };
  } catch (error) {
    const e = error as Partial<ExtFnError>;
    return {
      ...base,
      available: false,
      detail: String(e.message),
      ...(e.fix ? { fix: e.fix } : {}),
    };
  }
}
