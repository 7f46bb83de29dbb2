/**
 * The one shell process that runs before bwrap (or setpriv): it waits on the
 * cgroup gate, sets every rlimit with its builtin `ulimit`, closes inherited
 * descriptors and execs the rest of the chain. It takes the place of the
 * gate shell, prlimit and the Perl closer (~80 page faults and a few ms of
 * CPU a tree; ~300 and 10–15 ms where the parent leaked a descriptor). Its
 * script is fixed text; every value goes in as a positional parameter.
 *
 * A shell is used only once a probe, run once per process and shell, saw it
 * do all of that exactly (each limit read back from /proc/self/limits,
 * descriptors 4–9 closed, one above 9 refused); otherwise, and with
 * IMPROV_EXTFN_SHELL_CHAIN=0, the chain is gate → prlimit → perl as before.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { hostTools } from './tools.js';

/** $0 of the script: its own error messages and the shell's start with it (exit.ts). */
export const CHAIN_SHELL_NAME = 'extfn-chain';

/**
 * The script. $1 gate (1: wait for one line on stdin), $2 RLIMIT_AS in KiB,
 * $3 RLIMIT_NPROC ('' leaves it), $4 RLIMIT_NOFILE, $5 RLIMIT_FSIZE in
 * 512-byte blocks, $6 and $7 RLIMIT_CPU soft and hard ('' none), $8 the last
 * descriptor kept (2–4), $9 `refuse` (a descriptor above 9 still open) or
 * `leave` (a Perl closer comes next for those). The rest is the command.
 *
 * A POSIX shell closes only descriptors 0–9 by redirection, so those above
 * `keep` are closed by name; one above 9 is refused (or left to the closer).
 * No top-level variable is assigned: an inherited variable of the same name
 * would reach the command changed. Soft CPU before hard: setrlimit refuses a
 * soft limit above the hard one.
 */
export const CHAIN_SCRIPT = [
  'gate() { local line; read -r line; }',
  'high_fd() { local f; for f in /proc/self/fd/??*; do',
  '  if [ -e "$f" ]; then echo "extfn-chain: inherited descriptor $f is still open" >&2; return 0; fi',
  'done; return 1; }',
  'if [ "$1" = 1 ]; then gate || exit 125; fi',
  'ulimit -v "$2" && ulimit -n "$4" && ulimit -f "$5" && ulimit -c 0 || exit 125',
  'if [ -n "$3" ]; then ulimit -p "$3" || exit 125; fi',
  'if [ -n "$6" ]; then ulimit -S -t "$6" && ulimit -H -t "$7" || exit 125; fi',
  'if [ "$8" -lt 3 ]; then exec 3>&-; fi',
  'if [ "$8" -lt 4 ]; then exec 4>&-; fi',
  'exec 5>&- 6>&- 7>&- 8>&- 9>&-',
  'if [ "$9" = refuse ] && high_fd; then exit 125; fi',
  'shift 9',
  'exec "$@"',
].join('\n');

/** What the shell stage sets. */
export interface ChainShellStage {
  /** Wait for the host's line (the tree is in its cgroup) before anything else. */
  gate: boolean;
  memoryBytes: number;
  /** RLIMIT_NPROC, or undefined to leave it as inherited. */
  processes: number | undefined;
  openFiles: number;
  fileSizeBytes: number;
  /** RLIMIT_CPU soft limit in seconds (hard: one more), or 0 for none. */
  cpuSeconds: number;
  /** The last descriptor kept open (2–4): stdio, bwrap's seccomp one, the shared file. */
  keep: number;
  /**
   * Refuse to go on while a descriptor above 9 is open (this shell cannot
   * close those); false where a Perl closer follows for them.
   */
  refuseHigh: boolean;
}

/** Whether the shell's units (KiB, 512-byte blocks) express these values exactly. */
export function shellExpresses(
  stage: Pick<ChainShellStage, 'memoryBytes' | 'fileSizeBytes' | 'keep'>,
): boolean {
  return (
    stage.memoryBytes % 1024 === 0 &&
    stage.fileSizeBytes % 512 === 0 &&
    stage.keep >= 2 &&
    stage.keep <= 4
  );
}

export function chainShellArgs(shell: string, stage: ChainShellStage): string[] {
  return [
    shell,
    '-c',
    CHAIN_SCRIPT,
    CHAIN_SHELL_NAME,
    stage.gate ? '1' : '0',
    String(stage.memoryBytes / 1024),
    stage.processes === undefined ? '' : String(stage.processes),
    String(stage.openFiles),
    String(stage.fileSizeBytes / 512),
    stage.cpuSeconds > 0 ? String(stage.cpuSeconds) : '',
    stage.cpuSeconds > 0 ? String(stage.cpuSeconds + 1) : '',
    String(stage.keep),
    stage.refuseHigh ? 'refuse' : 'leave',
  ];
}

/**
 * RLIMIT_NPROC inside bwrap's user namespace (see innerNprocArgs in args.ts),
 * set by the same shell: fewer syscalls and pages than prlimit.
 */
export function innerNprocShellArgs(shell: string, processes: number): string[] {
  return [
    shell,
    '-c',
    'ulimit -p "$1" || exit 125; shift; exec "$@"',
    CHAIN_SHELL_NAME,
    String(processes),
  ];
}

/** The probe's values: unlike the usual ones, so that a limit left alone is seen. */
const PROBE: ChainShellStage = {
  gate: true,
  memoryBytes: 2 * 1024 * 1024 * 1024 + 12 * 1024,
  processes: 61,
  openFiles: 63,
  fileSizeBytes: 16 * 1024 * 1024 + 512,
  cpuSeconds: 13,
  keep: 3,
  refuseHigh: false,
};

/** What the probe's command prints: the descriptors 3–9 still open, then its limits. */
const REPORT = [
  'for n in 3 4 5 6 7 8 9; do if [ -e /proc/self/fd/$n ]; then echo "open $n"; fi; done',
  'while IFS= read -r l; do echo "$l"; done < /proc/self/limits',
].join('\n');

/** The /proc/self/limits rows the stage sets, and what each must read after the probe. */
function expectedLimits(stage: ChainShellStage): Record<string, string> {
  const both = (value: number) => `${value} ${value}`;
  return {
    'Max cpu time': `${stage.cpuSeconds} ${stage.cpuSeconds + 1}`,
    'Max file size': both(stage.fileSizeBytes),
    'Max core file size': both(0),
    'Max processes': both(stage.processes ?? 0),
    'Max open files': both(stage.openFiles),
    'Max address space': both(stage.memoryBytes),
  };
}

export interface ProbeRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs `stage` in `shell`, then `command`, with /dev/null on the descriptors
 * `open` and `stdin` written (the gate's line by default). This process's
 * own leaks come along: only a run that refuses them may see them. For the
 * probe and the tests.
 */
export function runStage(
  shell: string,
  stage: ChainShellStage,
  command: string[],
  options: { open?: number[]; stdin?: string } = {},
): Promise<ProbeRun> {
  const open = options.open ?? [];
  return new Promise((resolve) => {
    let devnull: number | undefined;
    try {
      devnull = openSync('/dev/null', 'r');
      const stdio: Array<'pipe' | 'ignore' | number> = ['pipe', 'pipe', 'pipe'];
      for (let fd = 3; fd <= Math.max(2, ...open); fd++)
        stdio.push(open.includes(fd) ? devnull : 'ignore');
      const args = chainShellArgs(shell, stage).slice(1);
      const child = spawn(shell, [...args, ...command], {
        stdio,
        env: { PATH: '/usr/bin:/bin' },
        timeout: 5000,
      });
      let stdout = '';
      let stderr = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      child.stderr!.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
      });
      child.stdin!.on('error', () => {});
      child.stdin!.end(options.stdin ?? '\n'); // by default, opens the gate
      child.once('error', (error) => resolve({ code: null, stdout, stderr: error.message }));
      child.once('close', (code) => resolve({ code, stdout, stderr }));
    } catch (error) {
      resolve({ code: null, stdout: '', stderr: (error as Error).message });
    } finally {
      if (devnull !== undefined) closeSync(devnull);
    }
  });
}

/** Why `shell` cannot be the chain's stage, or undefined when it did everything exactly. */
export async function probeChainShell(shell: string): Promise<string | undefined> {
  const [normal, high] = await Promise.all([
    runStage(shell, PROBE, [shell, '-c', REPORT], { open: [3, 4, 5, 6, 7, 8, 9] }),
    runStage(shell, { ...PROBE, refuseHigh: true }, ['/bin/echo', 'reached'], { open: [10] }),
  ]);
  if (normal.code !== 0) return `exit ${normal.code}: ${normal.stderr.trim()}`;
  const lines = normal.stdout.split('\n');
  const open = lines.filter((line) => line.startsWith('open ')).map((line) => line.slice(5));
  if (open.join(',') !== '3') return `descriptors left open: ${open.join(', ')}`;
  for (const [name, value] of Object.entries(expectedLimits(PROBE))) {
    const row = lines.find((line) => line.startsWith(`${name}  `));
    const read = row?.slice(name.length).trim().split(/\s+/).slice(0, 2).join(' ');
    if (read !== value) return `${name}: ${read ?? 'missing'}, not ${value}`;
  }
  if (high.code !== 125 || !/inherited descriptor/.test(high.stderr)) {
    return `a descriptor above 9 was not refused (exit ${high.code})`;
  }
  return undefined;
}

const probes = new Map<string, Promise<string | undefined>>();
const verified = new Map<string, boolean>();

/** The shell the stage uses here: dash where there is one, else /bin/sh. */
function candidate(): string | undefined {
  const tools = hostTools();
  return tools.dash ?? tools.sh;
}

function wanted(): boolean {
  return process.env.IMPROV_EXTFN_SHELL_CHAIN !== '0';
}

/**
 * The shell for the chain's stage if its probe passed; undefined while it
 * runs (the probe starts on the first call), when it failed, or when turned
 * off. Trees started meanwhile use the longer chain.
 */
export function chainShell(): string | undefined {
  const shell = candidate();
  if (!shell || !wanted()) return undefined;
  if (!probes.has(shell)) void chainShellReady();
  return verified.get(shell) ? shell : undefined;
}

/** Resolves once the probe has run: the shell if it passed (the sandbox's probe awaits this). */
export async function chainShellReady(): Promise<string | undefined> {
  const shell = candidate();
  if (!shell || !wanted()) return undefined;
  let probe = probes.get(shell);
  if (!probe) {
    probe = probeChainShell(shell).then((problem) => {
      verified.set(shell, problem === undefined);
      return problem;
    });
    probes.set(shell, probe);
  }
  return (await probe) === undefined ? shell : undefined;
}
