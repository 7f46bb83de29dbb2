/** Shared by the R tests: Rscript, sandbox availability and scoped registries. */
import { existsSync } from 'node:fs';
import { closeAfterEach, type FnTable, registryOf } from '@improv/extfn-core/testing';
import { launchSandboxed, probeSandbox } from '@improv/extfn-sandbox';
import { afterEach } from 'vitest';
import { R_ARGS, R_ENV, R_LIMITS, type RRunnerOptions, r } from '../src/index.js';

/** Debian's Rscript (`.ci/run` installs r-base-core); IMPROV_EXTFN_R points elsewhere. */
export const RSCRIPT = process.env.IMPROV_EXTFN_R || '/usr/bin/Rscript';
export const hasR = existsSync(RSCRIPT);

const restrictedProbe = await probeSandbox({ policy: 'restricted' });
export const restrictedOk = hasR && restrictedProbe.ok;
export const skipReason = hasR
  ? `skipped: Restricted sandbox unavailable here (${restrictedProbe.problem ?? restrictedProbe.summary})`
  : `skipped: R is not installed here (no ${RSCRIPT})`;

export function runner(options: RRunnerOptions = {}) {
  return r({ interpreter: RSCRIPT, policy: 'restricted', ...options });
}

/** [body, argTypes, returnType, extras?], as the kit's `FnTable` holds them. */
export type Signature = FnTable[string];

/** A registry with one R runner; `fns` maps name → [body, argTypes, returnType, extras?]. */
export function registryWith(fns: FnTable, options: RRunnerOptions = {}) {
  const runnerInstance = runner(options);
  return { registry: registryOf(runnerInstance, 'r', fns), runner: runnerInstance };
}

const closeAfterTest = closeAfterEach(afterEach);

/** `registryWith`, closed after the current test. */
export function scopedRegistry(...args: Parameters<typeof registryWith>) {
  return closeAfterTest(registryWith(...args));
}

/** The ExtFnError a promise rejects with (the kit's helper, shared by every package's tests). */
export { rejection as failure } from '@improv/extfn-core/testing';

// ---- the driver alone, sandboxed, for frame-level tests ----

/** Runs the driver with `stdin` written at once; resolves with everything it wrote. */
export async function driverRun(stdoutPipe: boolean, stdin: Buffer) {
  const child = launchSandboxed({
    command: RSCRIPT,
    args: R_ARGS,
    env: R_ENV,
    limits: R_LIMITS,
    policy: 'restricted',
    stdoutPipe,
  });
  const chunks: Buffer[] = [];
  child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
  child.stdin.end(stdin);
  const exit = await child.exited;
  return { exit, stdout: Buffer.concat(chunks), stderr: child.stderrTail() };
}

/** One request frame's header line. */
export function line(header: object): Buffer {
  return Buffer.from(`${JSON.stringify(header)}\n`);
}

/** Splits a driver's output into header lines, each followed by its `bytes` of payload. */
export function frames(stdout: Buffer) {
  const out: { header: Record<string, unknown>; payload?: Buffer }[] = [];
  let at = 0;
  while (at < stdout.length) {
    const end = stdout.indexOf(0x0a, at);
    const header = JSON.parse(stdout.subarray(at, end).toString());
    at = end + 1;
    const bytes = typeof header.bytes === 'number' ? header.bytes : 0;
    out.push(bytes > 0 ? { header, payload: stdout.subarray(at, at + bytes) } : { header });
    at += bytes;
  }
  return out;
}
