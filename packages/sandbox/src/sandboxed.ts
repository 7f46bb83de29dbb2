/**
 * The two public ways to start a tree, one verb each: `runSandboxed` runs it
 * to its end and collects its output (checked against the probe first);
 * `launchSandboxed` starts a long-lived one and hands back its pipes (warm
 * workers). Both run under the policy the probe found in force here.
 */
import { basename } from 'node:path';
import { ExtFnError, MAX_TIMEOUT_MS } from '@improv/extfn-core';
import { limitOf, type SandboxExit } from './exit.js';
import { type Launched, launch, launchAsync } from './launch.js';
import { policyFor, type SandboxPolicy } from './policy.js';
import { assertSandboxAvailable, knownProbe, sandboxErrorFor } from './probe.js';
import { runTree, setupFailure } from './run-tree.js';
import { TailBuffer } from './tail.js';
import type { SandboxedTree, SandboxOptions, SandboxResult } from './types.js';

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
  const requested = options.policy ?? policyFor(process.env);
  const name = options.functionName ?? basename(options.command);
  if (!(options.timeoutMs > 0 && options.timeoutMs <= MAX_TIMEOUT_MS)) {
    throw new RangeError(`timeoutMs must be in (0, ${MAX_TIMEOUT_MS}], got ${options.timeoutMs}`);
  }
  if (options.signal?.aborted) throw ExtFnError.aborted(name, options.signal.reason);
  const probe = await assertSandboxAvailable({
    bwrapPath: options.bwrapPath,
    policy: requested,
    functionName: name,
  });
  return runTree(options, probe.policy, name);
}

/**
 * Long-lived (warm workers): raw stdin/stdout pipes, no stdout cap and no
 * deadline (the caller runs per-request deadlines and calls `kill()`).
 * Synchronous, so it cannot probe: call `assertSandboxAvailable()` first
 * (without it, no fallback policy applies). A sandbox that fails to start
 * makes `exited` reject with a Sandbox error. RLIMIT_CPU applies only when
 * `timeoutMs` or `limits.cpuSeconds` is given, since CPU time accumulates
 * over a worker's life.
 */
export function launchSandboxed(options: LongLivedOptions): SandboxedTree {
  const { policy, name } = longLivedPolicy(options);
  return treeOf(launch({ ...options, policy, functionName: name }), options, policy, name);
}

/**
 * As `launchSandboxed`, started by the spawner once it runs (see spawner.ts):
 * this process does not fork, so its pages are not write-protected for the
 * writes that follow (the refresh a worker is started for).
 */
export async function launchSandboxedAsync(options: LongLivedOptions): Promise<SandboxedTree> {
  const { policy, name } = longLivedPolicy(options);
  return treeOf(
    await launchAsync({ ...options, policy, functionName: name }),
    options,
    policy,
    name,
  );
}

type LongLivedOptions = Omit<SandboxOptions, 'timeoutMs'> & { timeoutMs?: number };

function longLivedPolicy(options: LongLivedOptions): { policy: SandboxPolicy; name: string } {
  const requested = options.policy ?? policyFor(process.env);
  const name = options.functionName ?? basename(options.command);
  const known = knownProbe({ bwrapPath: options.bwrapPath, policy: requested });
  if (known && !known.ok) throw sandboxErrorFor(known, name);
  return { policy: known?.policy ?? requested, name };
}

function treeOf(
  launched: Launched,
  options: LongLivedOptions,
  policy: SandboxPolicy,
  name: string,
): SandboxedTree {
  const { limits } = launched;
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
    unref: () => launched.holdEventLoop(false),
    ref: () => launched.holdEventLoop(true),
  };
}

/** @deprecated Renamed `launchSandboxed`; this alias goes in the next minor release. */
export const spawnSandboxed = launchSandboxed;
