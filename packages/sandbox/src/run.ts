import { basename } from 'node:path';
import { performance } from 'node:perf_hooks';
import { ExtFnError, MAX_TIMEOUT_MS, type ResourceLimit } from '@improv/extfn-core';
import { type CpuEvidence, explainExit } from './explain.js';
import { findExecutable } from './host.js';
import {
  FIX_INTERPRETER,
  FIX_NAMESPACES,
  type LaunchExit,
  type Launched,
  launch,
  type SandboxExit,
} from './launch.js';
import { resolveLimits, type SandboxLimits } from './limits.js';
import { policyFor, type SandboxPolicy } from './policy.js';
import { assertSandboxAvailable, knownProbe, sandboxErrorFor } from './probe.js';
import { TailBuffer } from './tail.js';

export interface SandboxOptions {
  /** The interpreter: an absolute path, or a name looked up on the host PATH (symlinks followed). */
  command: string;
  args?: readonly string[];
  /** Added to HOME=/tmp, PATH=/usr/bin:/bin, LANG=C.UTF-8; nothing else of process.env reaches the child. */
  env?: Readonly<Record<string, string>>;
  /** Wall-clock deadline of the whole call; RLIMIT_CPU is derived from it. */
  timeoutMs: number;
  /** Default `policyFor(process.env)`: the host's choice, never the model's. */
  policy?: SandboxPolicy;
  limits?: Partial<SandboxLimits>;
  signal?: AbortSignal;
  /** Extra host paths bound read-only under `restricted` (e.g. an interpreter's library directory). */
  readOnlyPaths?: readonly string[];
  /** Default `bwrap` on the host PATH. */
  bwrapPath?: string;
  /** For error messages. */
  functionName?: string;
}

export interface SandboxResult {
  exitCode: number | null;
  signal: string | null;
  stdout: Buffer;
  /** The bounded tail of stderr. */
  stderr: string;
  durationMs: number;
  /** When the exit is explained by a limit: memory, cpu-time, processes, file-size. */
  limit?: ResourceLimit;
}

export interface SandboxedProcess {
  readonly pid: number | undefined;
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: NodeJS.ReadableStream;
  /** The bounded tail of stderr (stderr is drained continuously so it never blocks). */
  stderrTail(): string;
  /** Total stderr bytes so far. */
  readonly stderrBytes: number;
  /** Kills the whole tree (grandchildren, setsid() ones too) and waits for it. Idempotent. */
  kill(): Promise<void>;
  /** Resolves when the tree has exited; rejects with a Sandbox error when the sandbox itself failed to start. */
  readonly exited: Promise<SandboxExit>;
}

function setupFailure(command: string, message: string, functionName: string): ExtFnError {
  const fix = /source path|Permission denied|execute|No such file/i.test(message)
    ? FIX_INTERPRETER
    : FIX_NAMESPACES;
  return ExtFnError.sandbox(`the sandbox could not start ${command}: ${message}`, fix, {
    functionName,
  });
}

/** The limit that explains an exit; none under `trusted`, which sets no rlimits. */
function limitOf(
  policy: SandboxPolicy,
  exit: LaunchExit,
  tail: string,
  cpu: CpuEvidence | undefined,
): ResourceLimit | undefined {
  return policy === 'trusted' ? undefined : explainExit(exit.exitCode, exit.signal, tail, cpu);
}

function start(
  options: Omit<SandboxOptions, 'timeoutMs'> & { timeoutMs?: number },
  policy: SandboxPolicy,
  functionName: string,
): { launched: Launched; limits: SandboxLimits } {
  const limits = resolveLimits(options.limits, options.timeoutMs);
  const launched = launch({
    command: options.command,
    args: options.args ?? [],
    env: options.env,
    policy,
    limits,
    readOnlyPaths: options.readOnlyPaths ?? [],
    bwrap: policy === 'restricted' ? findExecutable(options.bwrapPath ?? 'bwrap') : undefined,
    functionName,
  });
  return { launched, limits };
}

/**
 * One-shot: starts the interpreter in the sandbox, writes `stdin` and closes
 * it, collects stdout (capped) and a stderr tail, and resolves when the whole
 * tree has exited. A non-zero exit is not an error here: read `exitCode`,
 * `stderr` and `limit`. Rejects with ExtFnError Timeout (deadline), Runtime
 * (output too large, or aborted) or Sandbox (the policy cannot be honoured).
 */
export async function runSandboxed(
  options: SandboxOptions & { stdin?: string | Uint8Array },
): Promise<SandboxResult> {
  const policy = options.policy ?? policyFor(process.env);
  const name = options.functionName ?? basename(options.command);
  if (!(options.timeoutMs > 0 && options.timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new RangeError(`timeoutMs must be in (0, ${MAX_TIMEOUT_MS}], got ${options.timeoutMs}`);
  }
  if (options.signal?.aborted) throw ExtFnError.aborted(name, options.signal.reason);
  await assertSandboxAvailable({ bwrapPath: options.bwrapPath, policy, functionName: name });
  return runUnchecked(options, policy, name);
}

/** runSandboxed without the availability check (the probe's own trial run uses it). */
export async function runUnchecked(
  options: SandboxOptions & { stdin?: string | Uint8Array },
  policy: SandboxPolicy,
  name: string,
): Promise<SandboxResult> {
  const began = performance.now();
  const { launched, limits } = start(options, policy, name);
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
  let exit: Awaited<Launched['exited']>;
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
  const durationMs = performance.now() - began;
  const result: SandboxResult = {
    exitCode: exit.exitCode,
    signal: exit.signal,
    stdout: Buffer.concat(stdout),
    stderr: tail,
    durationMs,
  };
  const limit = limitOf(policy, exit, tail, {
    seconds: limits.cpuSeconds,
    usedSeconds: exit.cpuUsedSeconds,
  });
  if (limit) result.limit = limit;
  return result;
}

/**
 * Long-lived (warm workers): raw stdin/stdout pipes, no stdout cap and no
 * deadline (the caller runs per-request deadlines and calls `kill()`).
 * Synchronous, so it cannot probe: call `assertSandboxAvailable()` first.
 * A sandbox that fails to start makes `exited` reject with a Sandbox error.
 * RLIMIT_CPU applies only when `timeoutMs` or `limits.cpuSeconds` is given,
 * since CPU time accumulates over a worker's life.
 */
export function spawnSandboxed(
  options: Omit<SandboxOptions, 'timeoutMs'> & { timeoutMs?: number },
): SandboxedProcess {
  const policy = options.policy ?? policyFor(process.env);
  const name = options.functionName ?? basename(options.command);
  const known = knownProbe({ bwrapPath: options.bwrapPath, policy });
  if (known && !known.ok) throw sandboxErrorFor(known, name);
  const { launched, limits } = start(options, policy, name);
  const stderr = new TailBuffer(limits.stderrTailBytes);
  launched.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
  let killed = false;
  const exited = launched.exited.then((exit): SandboxExit => {
    if (exit.setupError) throw setupFailure(options.command, exit.setupError, name);
    const out: SandboxExit = { exitCode: exit.exitCode, signal: exit.signal };
    // a SIGKILL of our own kill() is no CPU limit
    const cpu = killed
      ? undefined
      : { seconds: limits.cpuSeconds, usedSeconds: exit.cpuUsedSeconds };
    const limit = limitOf(policy, exit, stderr.text(), cpu);
    if (limit) out.limit = limit;
    return out;
  });
  exited.catch(() => {}); // observed through `exited`; never an unhandled rejection
  let killing: Promise<void> | undefined;
  return {
    pid: launched.pid,
    stdin: launched.stdin,
    stdout: launched.stdout,
    stderrTail: () => stderr.text(),
    get stderrBytes() {
      return stderr.total;
    },
    kill() {
      killed = true;
      killing ??= launched.kill().catch(() => {});
      return killing;
    },
    exited,
  };
}
