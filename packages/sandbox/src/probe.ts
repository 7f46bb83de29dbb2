import { ExtFnError } from '@improv/extfn-core';
import { execa } from 'execa';
import { findExecutable } from './host.js';
import { FIX_NAMESPACES, FIX_NO_BWRAP } from './launch.js';
import { policyFor, type SandboxPolicy } from './policy.js';
import { runUnchecked } from './run.js';
import { seccompArch } from './seccomp.js';
import { hostTools } from './tools.js';
import { hostIsRoot } from './uid-pool.js';

/** What protection a sandboxed call gets on this host, and why not more. */
export interface SandboxProbe {
  policy: SandboxPolicy;
  /** Whether the policy can be honoured here; false → calls fail closed with `problem` and `fix`. */
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
  /** The uid a sandboxed process ran as in the trial run. */
  uid?: number;
  problem?: string;
  fix?: string;
  summary: string;
}

export interface ProbeOptions {
  bwrapPath?: string;
  policy?: SandboxPolicy;
}

const memo = new Map<string, Promise<SandboxProbe>>();
const settled = new Map<string, SandboxProbe>();
const keyOf = (policy: SandboxPolicy, bwrapPath: string | undefined) =>
  `${policy}\0${bwrapPath ?? 'bwrap'}`;

/** The probe's result if it already ran for these options (spawnSandboxed cannot wait for one). */
export function knownProbe(options: ProbeOptions & { policy: SandboxPolicy }) {
  return settled.get(keyOf(options.policy, options.bwrapPath));
}

/**
 * Which layers are active here, found by a trial run (memoised per policy and
 * bwrap path): bwrap's version, namespaces, seccomp, the uid the child runs
 * as, rlimits. `doctor` prints `summary`; runners call `assertSandboxAvailable`.
 */
export function probeSandbox(options: ProbeOptions = {}): Promise<SandboxProbe> {
  const policy = options.policy ?? policyFor(process.env);
  const key = keyOf(policy, options.bwrapPath);
  let probe = memo.get(key);
  if (!probe) {
    probe = runProbe(policy, options.bwrapPath).then((result) => {
      settled.set(key, result);
      return result;
    });
    memo.set(key, probe);
  }
  return probe;
}

/** Throws ExtFnError Sandbox (before any body starts) when the policy cannot be honoured here. */
export async function assertSandboxAvailable(
  options: ProbeOptions & { functionName?: string } = {},
): Promise<void> {
  const probe = await probeSandbox(options);
  if (!probe.ok) throw sandboxErrorFor(probe, options.functionName);
}

/** The Sandbox error a call gets when the probe found the policy cannot be honoured here. */
export function sandboxErrorFor(probe: SandboxProbe, functionName: string | undefined): ExtFnError {
  return ExtFnError.sandbox(probe.problem ?? 'the sandbox is unavailable', probe.fix ?? '', {
    functionName,
  });
}

async function runProbe(
  policy: SandboxPolicy,
  bwrapPath: string | undefined,
): Promise<SandboxProbe> {
  const layers = {
    namespaces: false,
    seccomp: false,
    uidDrop: false,
    rlimits: false,
    cleanEnv: true as const,
    deadline: true as const,
    outputCaps: true as const,
  };
  const probe: SandboxProbe = { policy, ok: false, layers, summary: '' };
  const fail = (problem: string, fix: string): SandboxProbe => {
    probe.problem = problem;
    probe.fix = fix;
    probe.summary = `${policy}: unavailable: ${problem}; ${fix}`;
    return probe;
  };
  if (policy === 'trusted') {
    probe.ok = true;
    probe.summary =
      'trusted (IMPROV_EXTFN_TRUSTED=1): clean environment, deadline and output caps only; ' +
      'bodies run with the host’s privileges, files and network';
    return probe;
  }
  if (process.platform !== 'linux') {
    return fail(
      `${process.platform} has neither bubblewrap nor prlimit, so bodies cannot be confined`,
      'run on Linux with bubblewrap installed, or set IMPROV_EXTFN_TRUSTED=1 if every model file is trusted',
    );
  }
  const tools = hostTools();
  if (!tools.prlimit || !tools.setpriv) {
    return fail(
      'util-linux prlimit/setpriv are missing, so limits cannot be set',
      'install util-linux, or set IMPROV_EXTFN_TRUSTED=1 if every model file is trusted',
    );
  }
  if (policy === 'restricted') {
    const bwrap = findExecutable(bwrapPath ?? 'bwrap');
    if (!bwrap)
      return fail(
        `bubblewrap not found (looked for ${bwrapPath ?? 'bwrap on PATH'})`,
        FIX_NO_BWRAP,
      );
    const version = await execa(bwrap, ['--version'], { reject: false, timeout: 5000 });
    const match = /(\d+)\.(\d+)(?:\.(\d+))?/.exec(String(version.stdout));
    probe.bwrap = { path: bwrap, version: match?.[0] ?? 'unknown' };
    if (!match || (Number(match[1]) === 0 && Number(match[2]) < 8)) {
      return fail(
        `bubblewrap ${probe.bwrap.version} is too old (0.8 or later has --disable-userns)`,
        FIX_NO_BWRAP.replace('install', 'upgrade'),
      );
    }
  }
  const id = findExecutable('id', '/usr/bin:/bin');
  if (!id) return fail('cannot find /usr/bin/id for the trial run', 'install coreutils');
  let trial: Awaited<ReturnType<typeof runUnchecked>>;
  try {
    trial = await runUnchecked(
      { command: id, args: ['-u'], timeoutMs: 10_000, bwrapPath },
      policy,
      'sandbox-probe',
    );
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const fix = ExtFnError.isInstance(error) && error.fix ? error.fix : FIX_NAMESPACES;
    return fail(`the trial run failed: ${message.replace(/; [^;]*$/, '')}`, fix);
  }
  if (trial.exitCode !== 0) {
    const reason = trial.stderr.trim().split('\n')[0] ?? `exit ${trial.exitCode}`;
    return fail(`the trial run failed: ${reason}`, FIX_NAMESPACES);
  }
  probe.uid = Number(trial.stdout.toString().trim());
  layers.rlimits = true;
  layers.uidDrop = probe.uid !== 0;
  if (!layers.uidDrop)
    return fail('the sandboxed process ran as root', 'install util-linux setpriv');
  layers.namespaces = policy === 'restricted';
  layers.seccomp = policy === 'restricted' && seccompArch() !== undefined;
  probe.ok = true;
  const parts =
    policy === 'restricted'
      ? [
          `bubblewrap ${probe.bwrap?.version} (user, pid, net, ipc, uts, cgroup namespaces; read-only /usr, /etc; private /tmp)`,
          layers.seccomp ? `seccomp (${seccompArch()})` : 'no seccomp filter for this architecture',
        ]
      : [
          'no namespaces: the host filesystem and network are visible (IMPROV_EXTFN_ALLOW_UNSANDBOXED=1)',
        ];
  parts.push(
    hostIsRoot() ? `a uid of its own per process (e.g. ${probe.uid})` : `uid ${probe.uid}`,
    'rlimits (memory, CPU, processes, files)',
    'clean environment, deadline, output caps',
  );
  probe.summary = `${policy}: ${parts.join('; ')}`;
  return probe;
}
