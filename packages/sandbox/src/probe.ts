/**
 * What protection a sandboxed call gets on this host, found by a trial run:
 * which layers are active, why not more, and the fix. Runners assert it
 * before starting anything; `doctor` prints it. It also decides the one
 * fallback there is: `restricted` → `unsandboxed` where bubblewrap cannot
 * start and the operator allowed it.
 */
import { ExtFnError } from '@improv/extfn-core';
import { type CgroupVersion, cgroupSupport } from './cgroup.js';
import { chainShellReady } from './chain-shell.js';
import {
  FIX_NAMESPACES,
  FIX_NO_BWRAP,
  FIX_OLD_BWRAP,
  FIX_PLATFORM,
  FIX_UTIL_LINUX,
  fixAppArmor,
  isAppArmorUsernsBlock,
  readAppArmorSysctl,
} from './fixes.js';
import { findExecutable } from './host.js';
import { fallbackAllowed, policyFor, type SandboxPolicy } from './policy.js';
import { runCommand } from './run-command.js';
import { runTree } from './run-tree.js';
import { seccompArch } from './seccomp.js';
import { readySpawner } from './spawner.js';
import { hostTools } from './tools.js';
import { hostIsRoot } from './uid-pool.js';

/** What protection a sandboxed call gets on this host, and why not more. */
export interface SandboxProbe {
  /** The policy in force: the one asked for, or `unsandboxed` when `fallbackFrom` is set. */
  policy: SandboxPolicy;
  /** Whether the policy can be honoured here; false → calls fail closed with `problem` and `fix`. */
  ok: boolean;
  layers: {
    namespaces: boolean;
    seccomp: boolean;
    uidDrop: boolean;
    rlimits: boolean;
    /** A cgroup per tree (memory without swap, pids), or false; `cgroupReason` says why. */
    cgroup: CgroupVersion | false;
    cleanEnv: true;
    deadline: true;
    outputCaps: true;
  };
  cgroupReason?: string;
  /** Set when `restricted` could not start and IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 allowed the fallback. */
  fallbackFrom?: { policy: 'restricted'; problem: string; fix: string };
  /** Ubuntu's AppArmor restriction of unprivileged user namespaces blocks bubblewrap here. */
  appArmorUserns?: true;
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
  /** Default: IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 in process.env. */
  allowFallback?: boolean;
}

const memo = new Map<string, Promise<SandboxProbe>>();
const settled = new Map<string, SandboxProbe>();

function resolved(options: ProbeOptions) {
  const policy = options.policy ?? policyFor(process.env);
  const allowFallback = options.allowFallback ?? fallbackAllowed(process.env);
  const key = `${policy}\0${options.bwrapPath ?? 'bwrap'}\0${allowFallback}`;
  return { policy, allowFallback, key };
}

/** The probe's result if it already ran for these options (launchSandboxed cannot wait for one). */
export function knownProbe(options: ProbeOptions): SandboxProbe | undefined {
  return settled.get(resolved(options).key);
}

/**
 * Which layers are active here, found by a trial run (memoised per policy,
 * bwrap path and fallback permission): bwrap's version, namespaces,
 * seccomp, the uid the child runs as, rlimits, the cgroup.
 */
export function probeSandbox(options: ProbeOptions = {}): Promise<SandboxProbe> {
  const { policy, allowFallback, key } = resolved(options);
  let probe = memo.get(key);
  if (!probe) {
    probe = probeWithFallback(policy, options.bwrapPath, allowFallback).then((result) => {
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
): Promise<SandboxProbe> {
  const probe = await probeSandbox(options);
  if (!probe.ok) throw sandboxErrorFor(probe, options.functionName);
  return probe;
}

/** The Sandbox error a call gets when the probe found the policy cannot be honoured here. */
export function sandboxErrorFor(probe: SandboxProbe, functionName: string | undefined): ExtFnError {
  return ExtFnError.sandbox(probe.problem ?? 'the sandbox is unavailable', probe.fix ?? '', {
    functionName,
  });
}

async function probeWithFallback(
  policy: SandboxPolicy,
  bwrapPath: string | undefined,
  allowFallback: boolean,
): Promise<SandboxProbe> {
  const probe = await runProbe(policy, bwrapPath);
  if (probe.ok || policy !== 'restricted' || !allowFallback) return probe;
  const fallback = await runProbe('unsandboxed', bwrapPath);
  if (!fallback.ok) return probe;
  fallback.fallbackFrom = {
    policy: 'restricted',
    problem: probe.problem ?? 'unknown',
    fix: probe.fix ?? '',
  };
  if (probe.appArmorUserns) fallback.appArmorUserns = true;
  fallback.summary =
    `restricted cannot start here (${probe.problem}); IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 ` +
    `allows the fallback: ${fallback.summary}`;
  return fallback;
}

async function runProbe(
  policy: SandboxPolicy,
  bwrapPath: string | undefined,
): Promise<SandboxProbe> {
  const layers: SandboxProbe['layers'] = {
    namespaces: false,
    seccomp: false,
    uidDrop: false,
    rlimits: false,
    cgroup: false,
    cleanEnv: true,
    deadline: true,
    outputCaps: true,
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
      FIX_PLATFORM,
    );
  }
  const tools = hostTools();
  if (!tools.prlimit || !tools.setpriv) {
    return fail('util-linux prlimit/setpriv are missing, so limits cannot be set', FIX_UTIL_LINUX);
  }
  const bwrap = policy === 'restricted' ? findExecutable(bwrapPath ?? 'bwrap') : undefined;
  if (policy === 'restricted' && !bwrap) {
    return fail(`bubblewrap not found (looked for ${bwrapPath ?? 'bwrap on PATH'})`, FIX_NO_BWRAP);
  }
  // The probe comes before a process's first tree: the spawner boots meanwhile,
  // so that tree (a runner's first worker) is not a fork of this process.
  readySpawner();
  // The trial run (and every tree after it) uses the one-shell chain if its
  // own probe passed: that probe runs while bubblewrap is asked its version.
  const chain = chainShellReady();
  if (bwrap) {
    const version = await runCommand(bwrap, ['--version'], { timeoutMs: 5000 });
    const match = /(\d+)\.(\d+)(?:\.(\d+))?/.exec(version.stdout);
    probe.bwrap = { path: bwrap, version: match?.[0] ?? 'unknown' };
    if (!match || (Number(match[1]) === 0 && Number(match[2]) < 8)) {
      return fail(
        `bubblewrap ${probe.bwrap.version} is too old (0.8 or later has --disable-userns)`,
        FIX_OLD_BWRAP,
      );
    }
  }
  const cgroup = cgroupSupport();
  const id = findExecutable('id', '/usr/bin:/bin');
  if (!id) return fail('cannot find /usr/bin/id for the trial run', 'install coreutils');
  await chain;
  let trial: Awaited<ReturnType<typeof runTree>> | undefined;
  let failure: { message: string; fix: string } | undefined;
  try {
    trial = await runTree(
      { command: id, args: ['-u'], timeoutMs: 10_000, bwrapPath, trustedBoot: true },
      policy,
      'sandbox-probe',
    );
    if (trial.exitCode !== 0) {
      const reason = trial.stderr.trim().split('\n')[0] || `exit ${trial.exitCode}`;
      failure = { message: reason, fix: FIX_NAMESPACES };
    }
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const fix = ExtFnError.isInstance(error) && error.fix ? error.fix : FIX_NAMESPACES;
    failure = { message: message.replace(/; [^;]*$/, ''), fix };
  }
  if (failure) {
    if (policy === 'restricted' && isAppArmorUsernsBlock(failure.message, readAppArmorSysctl())) {
      probe.appArmorUserns = true;
      return fail(
        'AppArmor restricts unprivileged user namespaces on this host ' +
          '(kernel.apparmor_restrict_unprivileged_userns=1), so bubblewrap cannot set up ' +
          `its uid map (${failure.message})`,
        fixAppArmor(probe.bwrap?.path),
      );
    }
    return fail(`the trial run failed: ${failure.message}`, failure.fix);
  }
  probe.uid = Number(trial!.stdout.toString().trim());
  layers.rlimits = true;
  layers.uidDrop = probe.uid !== 0;
  if (!layers.uidDrop) return fail('the sandboxed process ran as root', FIX_UTIL_LINUX);
  layers.namespaces = policy === 'restricted';
  layers.seccomp = policy === 'restricted' && seccompArch() !== undefined;
  layers.cgroup = cgroup.version;
  probe.cgroupReason = cgroup.reason;
  probe.ok = true;
  const parts =
    policy === 'restricted'
      ? [
          `bubblewrap ${probe.bwrap?.version} (user, pid, net, ipc, uts, cgroup namespaces; read-only /usr and what interpreters need of /etc; private /tmp)`,
          layers.seccomp ? `seccomp (${seccompArch()})` : 'no seccomp filter for this architecture',
        ]
      : ['no namespaces: the host filesystem and network are visible'];
  parts.push(
    hostIsRoot()
      ? `a uid of its own per tree (e.g. ${probe.uid}; workers cloned from a zygote share its uid, each in a user namespace of its own)`
      : `uid ${probe.uid}`,
    'rlimits (memory, CPU, processes, files)',
    cgroup.version
      ? `a cgroup ${cgroup.version} per tree (memory without swap, processes)`
      : `no cgroup (${cgroup.reason})`,
    'clean environment, deadline, output caps',
  );
  probe.summary = `${policy}: ${parts.join('; ')}`;
  return probe;
}
