import type { ResourceLimit } from '@improv/extfn-core';
import { ExtFnError } from '@improv/extfn-core';

/** Who decides how much protection a body gets: the host, never the model. */
export type SandboxPolicy = 'restricted' | 'unsandboxed' | 'trusted';

/** restricted by default; IMPROV_EXTFN_TRUSTED=1 → trusted; IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 → unsandboxed (layers 2–6). */
export function policyFor(env: NodeJS.ProcessEnv = process.env): SandboxPolicy {
  if (env.IMPROV_EXTFN_TRUSTED === '1') return 'trusted';
  if (env.IMPROV_EXTFN_ALLOW_UNSANDBOXED === '1') return 'unsandboxed';
  return 'restricted';
}

export interface SandboxLimits {
  memoryBytes: number;
  cpuSeconds: number;
  processes: number;
  openFiles: number;
  fileSizeBytes: number;
  tmpfsBytes: number;
  stdoutBytes: number;
  stderrBytes: number;
  stderrTailBytes: number;
}

export const DEFAULT_LIMITS: SandboxLimits = Object.freeze({
  memoryBytes: 1024 ** 3,
  cpuSeconds: 0,
  processes: 64,
  openFiles: 64,
  fileSizeBytes: 16 * 1024 ** 2,
  tmpfsBytes: 64 * 1024 ** 2,
  stdoutBytes: 1024 ** 2,
  stderrBytes: 1024 ** 2,
  stderrTailBytes: 16 * 1024,
});

export interface SandboxOptions {
  command: string;
  args?: readonly string[];
  env?: Readonly<Record<string, string>>;
  timeoutMs: number;
  policy?: SandboxPolicy;
  limits?: Partial<SandboxLimits>;
  signal?: AbortSignal;
  readOnlyPaths?: readonly string[];
  bwrapPath?: string;
  functionName?: string;
}

export interface SandboxResult {
  exitCode: number | null;
  signal: string | null;
  stdout: Buffer;
  stderr: string;
  durationMs: number;
  limit?: ResourceLimit;
}

export interface SandboxedProcess {
  readonly pid: number | undefined;
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: NodeJS.ReadableStream;
  stderrTail(): string;
  readonly stderrBytes: number;
  kill(): Promise<void>;
  readonly exited: Promise<{ exitCode: number | null; signal: string | null; limit?: ResourceLimit }>;
}

export interface SandboxProbe {
  policy: SandboxPolicy;
  ok: boolean;
  layers: {
    namespaces: boolean;
    seccomp: boolean;
    uidDrop: boolean;
    rlimits: boolean;
    cleanEnv: true;
    deadline: true;
    outputCaps: true;
  };
  bwrap?: { path: string; version: string };
  uid?: number;
  problem?: string;
  fix?: string;
  summary: string;
}

export async function runSandboxed(
  _options: SandboxOptions & { stdin?: string | Uint8Array },
): Promise<SandboxResult> {
  throw ExtFnError.sandbox('@improv/extfn-sandbox is not implemented yet', 'wait for it');
}

export function spawnSandboxed(
  _options: Omit<SandboxOptions, 'timeoutMs'> & { timeoutMs?: number },
): SandboxedProcess {
  throw ExtFnError.sandbox('@improv/extfn-sandbox is not implemented yet', 'wait for it');
}

export async function probeSandbox(
  options: { bwrapPath?: string; policy?: SandboxPolicy } = {},
): Promise<SandboxProbe> {
  const policy = options.policy ?? policyFor();
  return {
    policy,
    ok: false,
    layers: {
      namespaces: false,
      seccomp: false,
      uidDrop: false,
      rlimits: false,
      cleanEnv: true,
      deadline: true,
      outputCaps: true,
    },
    summary: 'not implemented yet',
  };
}

export async function assertSandboxAvailable(
  _options: { bwrapPath?: string; policy?: SandboxPolicy; functionName?: string } = {},
): Promise<void> {}
