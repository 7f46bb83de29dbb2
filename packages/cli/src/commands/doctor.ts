/** `improv-extfn doctor`: what this machine can run, and what to do about what it cannot. */
import type { RunnerProbe } from '@improv/extfn-core';
import { usage } from '../cli-error.js';
import { EXIT_CODES_HELP, ExitCode } from '../exit-codes.js';
import { cliWording } from '../hints.js';
import type { CliIo } from '../io.js';
import { parseCommandLine, wantsJson } from '../options.js';
import { reportFailure } from '../report.js';
import {
  defaultImport,
  externalRunnerNames,
  loadExternalRunner,
  loadRunner,
  messageOf,
  RUNNER_PACKAGES,
  RUNNERS_ENV,
  type RunnerLoad,
} from '../runners.js';

export const DOCTOR_HELP = `Usage: improv-extfn doctor [--runner PACKAGE ...] [--json]

Reports, for each language, whether its runner package is installed, whether
its interpreter was found (path and version), and which sandbox layers are
active under the host's policy; and what to do about each missing piece.
Third-party runners named by --runner or ${RUNNERS_ENV} are listed too.

Options:
  --runner PACKAGE   also check this third-party runner package (repeatable)
  --json             print the report as one JSON object
  -h, --help         show this help

Example:
  improv-extfn doctor
  IMPROV_EXTFN_PYTHON=/usr/bin/python3 improv-extfn doctor --json

Exit status: 0 when at least one language can run here, 3 when none can.

${EXIT_CODES_HELP}
`;

/** The part of @improv/extfn-sandbox that doctor reads, typed here so the package stays optional. */
interface SandboxModule {
  policyFor(env?: NodeJS.ProcessEnv): string;
  probeSandbox(options?: { policy?: string; allowFallback?: boolean }): Promise<SandboxProbe>;
}
interface SandboxProbe {
  policy: string;
  ok: boolean;
  /** Booleans, except `cgroup`: 'v1' | 'v2' | false. */
  layers: Record<string, boolean | string>;
  cgroupReason?: string;
  appArmorUserns?: boolean;
  fallbackFrom?: { policy: string; problem: string; fix: string };
  bwrap?: { path: string; version: string };
  uid?: number;
  problem?: string;
  fix?: string;
  summary: string;
}

export interface LanguageReport {
  /** The language id (`?` for a third-party package that could not be loaded). */
  language: string;
  packageName: string;
  /** A third-party runner, from --runner or IMPROV_EXTFN_RUNNERS. */
  external?: boolean;
  /** The runner package could be imported. */
  installed: boolean;
  /** The runner could be created (its factory did not throw). */
  loaded: boolean;
  /** The runner says it can evaluate functions here. */
  available: boolean;
  detail: string;
  interpreter?: { path: string; version?: string };
  protection?: string;
  fix?: string;
}

export interface SandboxReport {
  /** The package could be loaded and probed. */
  probed: boolean;
  policy?: string;
  ok: boolean;
  layers?: Record<string, boolean | string>;
  /** Why trees get no cgroup here, or where they go. */
  cgroupReason?: string;
  /** When trees get no cgroup here: what would give them one (optional: rlimits still hold). */
  cgroupFix?: string;
  /** Ubuntu's AppArmor restriction of user namespaces blocks bubblewrap. */
  appArmorUserns?: boolean;
  /** Restricted could not start; IMPROV_EXTFN_ALLOW_UNSANDBOXED=1 made it fall back. */
  fallbackFrom?: { policy: string; problem: string; fix: string };
  bwrap?: { path: string; version: string };
  summary: string;
  problem?: string;
  fix?: string;
}

export interface DoctorReport {
  node: string;
  platform: string;
  sandbox: SandboxReport;
  languages: LanguageReport[];
  /** At least one language can run here. */
  ok: boolean;
}

async function probeLanguage(load: RunnerLoad): Promise<LanguageReport> {
  const { spec } = load;
  const base = {
    language: spec.language,
    packageName: spec.packageName,
    ...(spec.external ? { external: true } : {}),
  };
  if (!load.ok) {
    return {
      ...base,
      installed: load.installed,
      loaded: false,
      available: false,
      detail: load.problem,
      fix: load.fix,
    };
  }
  let probe: RunnerProbe;
  try {
    probe = await load.runner.probe();
  } catch (error) {
    probe = {
      language: spec.language,
      available: false,
      detail: `probe failed: ${messageOf(error)}`,
    };
  } finally {
    await load.runner.close?.().catch(() => {});
  }
  return {
    ...base,
    installed: true,
    loaded: true,
    available: probe.available,
    detail: probe.detail,
    ...(probe.interpreter ? { interpreter: { ...probe.interpreter } } : {}),
    ...(probe.protection ? { protection: probe.protection } : {}),
    ...(probe.fix ? { fix: probe.fix } : {}),
  };
}

async function probeSandboxLayers(io: CliIo): Promise<SandboxReport> {
  let sandbox: SandboxModule;
  try {
    const imported = (await (io.importPackage ?? defaultImport)(
      '@improv/extfn-sandbox',
    )) as Partial<SandboxModule>;
    if (typeof imported.probeSandbox !== 'function' || typeof imported.policyFor !== 'function') {
      throw new Error('it exports no probeSandbox()/policyFor()');
    }
    sandbox = imported as SandboxModule;
  } catch (error) {
    return {
      probed: false,
      ok: false,
      summary: `sandbox package unavailable: ${messageOf(error)}`,
      fix: 'install @improv/extfn-sandbox (the interpreter runners need it)',
    };
  }
  try {
    const policy = sandbox.policyFor(io.env);
    const allowFallback = io.env.IMPROV_EXTFN_ALLOW_UNSANDBOXED === '1';
    const probe = await sandbox.probeSandbox({ policy, allowFallback });
    return {
      probed: true,
      policy: probe.policy,
      ok: probe.ok,
      layers: { ...probe.layers },
      ...(probe.cgroupReason ? { cgroupReason: probe.cgroupReason } : {}),
      ...(probe.layers.cgroup === false && probe.cgroupReason
        ? { cgroupFix: cgroupFix(probe.cgroupReason) }
        : {}),
      ...(probe.appArmorUserns ? { appArmorUserns: true } : {}),
      ...(probe.fallbackFrom ? { fallbackFrom: probe.fallbackFrom } : {}),
      ...(probe.bwrap ? { bwrap: probe.bwrap } : {}),
      summary: probe.summary,
      ...(probe.problem ? { problem: probe.problem } : {}),
      ...(probe.fix ? { fix: probe.fix } : {}),
    };
  } catch (error) {
    return {
      probed: false,
      ok: false,
      summary: `sandbox probe failed: ${messageOf(error)}`,
      fix: 'reinstall @improv/extfn-sandbox; if it persists, report it',
    };
  }
}

/** The report; `runners` are third-party runner packages to check beside ours (and those in IMPROV_EXTFN_RUNNERS). */
export async function collectReport(
  io: CliIo,
  runners: readonly string[] = [],
): Promise<DoctorReport> {
  // One at a time: probes start interpreters, and the machine may be busy.
  const sandbox = await probeSandboxLayers(io);
  const languages: LanguageReport[] = [];
  for (const spec of RUNNER_PACKAGES) {
    languages.push(await probeLanguage(await loadRunner(spec, io)));
  }
  for (const name of externalRunnerNames(runners, io.env)) {
    languages.push(await probeLanguage(await loadExternalRunner(name, io)));
  }
  return {
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
    sandbox,
    languages,
    ok: languages.some((l) => l.available),
  };
}

const LAYER_NAMES: Record<string, string> = {
  namespaces: 'namespaces (bubblewrap)',
  seccomp: 'seccomp',
  uidDrop: 'unprivileged uid',
  rlimits: 'rlimits',
  cgroup: 'cgroup per tree',
  cleanEnv: 'clean environment',
  deadline: 'deadline',
  outputCaps: 'output caps',
};

/**
 * What gives trees a cgroup of their own, for the reason the sandbox gave:
 * cgroup v1 needs root; cgroup v2 needs the memory and pids controllers
 * delegated to the cgroup improv-extfn runs in. Optional: rlimits still
 * bound each process, and the host's look (sandbox memory-watch.ts) each tree.
 */
export function cgroupFix(reason: string): string {
  const optional =
    'optional: each process is still held by its rlimits, and each tree by the host summing its memory';
  if (/not Linux/.test(reason)) return `none here, cgroups are Linux's; ${optional}`;
  const hasV2 = !/no cgroup v2 hierarchy/.test(reason);
  const rootHelps = /cgroup v1 needs root/.test(reason);
  const delegate =
    'run improv-extfn in a cgroup v2 group with the memory and pids controllers delegated to it (@improv/extfn-sandbox README, cgroup per tree)';
  const root =
    'run improv-extfn as root (each body still runs under an unprivileged uid of its own)';
  const ways = [hasV2 ? delegate : '', rootHelps ? root : ''].filter(Boolean);
  if (!ways.length) ways.push(delegate);
  return `for one memory and process budget per tree, ${ways.join(', or ')}; ${optional}`;
}

/**
 * A probe's detail without what the interpreter line says already: an
 * interpreter runner's starts with `python 3.11.2 at /usr/bin/python3.11`,
 * then maybe more (`; libraries: …`), which is kept.
 */
function withoutInterpreter(l: LanguageReport, detail: string): string {
  if (!l.interpreter) return detail;
  const { path, version } = l.interpreter;
  const said = `${l.language} ${version ?? ''} at ${path}`.replace(/ +/g, ' ');
  if (detail === said) return '';
  return detail.startsWith(`${said}; `) ? detail.slice(said.length + 2) : detail;
}

export function formatReport(report: DoctorReport): string {
  const lines: string[] = [`improv-extfn doctor · node ${report.node} · ${report.platform}`, ''];
  const { sandbox } = report;
  lines.push(
    `sandbox${sandbox.policy ? ` (policy ${sandbox.policy})` : ''}: ${sandbox.ok ? 'ok' : 'NOT AVAILABLE'}`,
  );
  lines.push(`  ${sandbox.summary}`);
  if (sandbox.layers) {
    const on = Object.entries(sandbox.layers).filter(([, v]) => v);
    const off = Object.entries(sandbox.layers).filter(([, v]) => !v);
    const name = ([k, v]: [string, boolean | string]) =>
      `${LAYER_NAMES[k] ?? k}${typeof v === 'string' ? ` (${v})` : ''}`;
    lines.push(`  active: ${on.map(name).join(', ') || 'none'}`);
    if (off.length) lines.push(`  inactive: ${off.map(name).join(', ')}`);
    if (sandbox.layers.cgroup === false && sandbox.cgroupReason) {
      lines.push(`  no cgroup: ${sandbox.cgroupReason}`);
      if (sandbox.ok) lines.push(`  fix: ${sandbox.cgroupFix ?? cgroupFix(sandbox.cgroupReason)}`);
    }
  }
  if (sandbox.appArmorUserns)
    lines.push('  AppArmor restricts unprivileged user namespaces here (see the fix)');
  if (sandbox.fallbackFrom)
    lines.push(`  restricted fix (to leave the fallback): ${sandbox.fallbackFrom.fix}`);
  if (sandbox.problem && !sandbox.summary.includes(sandbox.problem))
    lines.push(`  problem: ${sandbox.problem}`);
  if (sandbox.fix && !sandbox.summary.includes(sandbox.fix)) lines.push(`  fix: ${sandbox.fix}`);
  lines.push('');
  const width = Math.max(...report.languages.map((l) => l.language.length));
  // Without the sandbox, each interpreter says the same paragraph: it is printed once, above.
  const sandboxSaid = (text: string | undefined): boolean =>
    !sandbox.ok &&
    text !== undefined &&
    ((sandbox.fix !== undefined && text.includes(sandbox.fix)) || sandbox.summary.includes(text));
  for (const l of report.languages) {
    const status = l.available
      ? 'ok'
      : !l.installed
        ? 'not installed'
        : !l.loaded
          ? 'runner unusable'
          : 'unavailable';
    const pad = ' '.repeat(width);
    lines.push(
      `${l.language.padEnd(width)}  ${status}  (${l.packageName}${l.external ? ', third-party' : ''})`,
    );
    if (l.interpreter) {
      lines.push(
        `${pad}  interpreter: ${l.interpreter.path}${l.interpreter.version ? ` (${l.interpreter.version})` : ''}`,
      );
    }
    const needsSandbox = !l.available && (sandboxSaid(l.fix) || sandboxSaid(l.protection));
    // A runner's error message ends with its fix ("…, which does not exist; set …"): said once, below.
    const detail = withoutInterpreter(
      l,
      !l.available && l.fix && l.detail.endsWith(`; ${l.fix}`)
        ? l.detail.slice(0, -`; ${l.fix}`.length)
        : l.detail,
    );
    if (detail || needsSandbox)
      lines.push(`${pad}  ${cliWording(detail)}${needsSandbox ? ' (the sandbox, above)' : ''}`);
    if (l.protection && !sandboxSaid(l.protection))
      lines.push(`${pad}  protection: ${l.protection}`);
    if (!l.available && l.fix && !sandboxSaid(l.fix))
      lines.push(`${pad}  fix: ${cliWording(l.fix)}`);
  }
  lines.push('');
  const usable = report.languages.filter((l) => l.available).map((l) => l.language);
  lines.push(
    usable.length
      ? `can run: ${usable.join(', ')}`
      : 'no language can run here: see the fixes above',
  );
  return `${lines.join('\n')}\n`;
}

export async function doctorCommand(argv: readonly string[], io: CliIo): Promise<ExitCode> {
  const json = wantsJson(argv);
  try {
    const { values, positionals } = parseCommandLine(
      'doctor',
      argv,
      {
        runner: { type: 'string', multiple: true },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
      io.argvBytes,
    );
    if (values.help) {
      io.stdout.write(DOCTOR_HELP);
      return ExitCode.Ok;
    }
    if (positionals.length > 0) {
      throw usage(
        `doctor takes no arguments, got ${positionals.join(' ')}`,
        'improv-extfn doctor [--runner PACKAGE ...] [--json]',
      );
    }
    const report = await collectReport(io, (values.runner as string[] | undefined) ?? []);
    io.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : formatReport(report));
    return report.ok ? ExitCode.Ok : ExitCode.Unavailable;
  } catch (error) {
    return reportFailure(error, io, json);
  }
}
