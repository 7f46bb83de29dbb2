/**
 * Runs one tree to its end without the availability check: launch it, write
 * its stdin, collect capped stdout and a stderr tail, enforce the deadline,
 * and report the exit. `runSandboxed` checks against the probe first; the
 * probe's own trial run cannot (it is the check), so both share this.
 */
import { performance } from 'node:perf_hooks';
import { ExtFnError } from '@improv/extfn-core';
import { limitOf, type TreeExit } from './exit.js';
import { fixForSetupFailure } from './fixes.js';
import { launchAsync } from './launch.js';
import type { SandboxPolicy } from './policy.js';
import { TailBuffer } from './tail.js';
import type { SandboxOptions, SandboxResult } from './types.js';

/** The Sandbox error for a chain that failed before the interpreter ran. */
export function setupFailure(command: string, message: string, functionName: string): ExtFnError {
  return ExtFnError.sandbox(
    `the sandbox could not start ${command}: ${message}`,
    fixForSetupFailure(message),
    { functionName },
  );
}

/** Rejects with Timeout, Runtime (output too large, aborted) or Sandbox (setup failed). */
export async function runTree(
  options: SandboxOptions & { stdin?: string | Uint8Array },
  policy: SandboxPolicy,
  name: string,
): Promise<SandboxResult> {
  const began = performance.now();
  const launched = await launchAsync({ ...options, policy, functionName: name });
  const { limits } = launched;
  let reason: 'timeout' | 'output' | 'abort' | undefined;
  const stop = (why: typeof reason) => {
    if (reason) return;
    reason = why;
    void launched.kill();
  };

  const stdout: Buffer[] = [];
  let stdoutBytes = 0;
  launched.stdout.on('data', (chunk: Buffer) => {
    stdoutBytes += chunk.length;
    if (stdoutBytes > limits.stdoutBytes) stop('output');
    else stdout.push(chunk);
  });
  const stderr = new TailBuffer(limits.stderrTailBytes);
  launched.stderr.on('data', (chunk: Buffer) => {
    stderr.push(chunk);
    if (stderr.total > limits.stderrBytes) stop('output');
  });
  launched.stdin.on('error', () => {}); // the child may exit without reading
  launched.stdin.end(options.stdin ?? '');

  const timer = setTimeout(() => stop('timeout'), options.timeoutMs);
  const onAbort = () => stop('abort');
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let exit: TreeExit;
  try {
    exit = await launched.exited;
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
  }

  const tail = stderr.text();
  if (reason === 'timeout') throw ExtFnError.timeout(name, options.timeoutMs);
  if (reason === 'abort') throw ExtFnError.aborted(name, options.signal?.reason);
  if (reason === 'output') {
    const which =
      stdoutBytes > limits.stdoutBytes
        ? `stdout over ${limits.stdoutBytes} bytes`
        : `stderr over ${limits.stderrBytes} bytes`;
    throw ExtFnError.runtime(name, `output too large (${which})`, {
      limit: 'output',
      stderr: tail,
    });
  }
  if (exit.setupError) throw setupFailure(options.command, exit.setupError, name);
  const result: SandboxResult = {
    exitCode: exit.exitCode,
    signal: exit.signal,
    stdout: Buffer.concat(stdout),
    stderr: tail,
    durationMs: performance.now() - began,
  };
  const limit = limitOf(policy, exit, tail, {
    seconds: limits.cpuSeconds,
    usedSeconds: exit.cpuUsedSeconds,
  });
  if (limit) result.limit = limit;
  return result;
}
