/**
 * The one shell before bwrap (chain-shell.ts): its script run for real with
 * descriptors and limits to set, its probe, and trees started through it and
 * through the longer chain it falls back to (gate → prlimit → perl), whose
 * limits inside must be the same.
 */
import { spawn } from 'node:child_process';
import { ExtFnError } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { isSystemPath } from '../src/binds.js';
import {
  type ChainShellStage,
  chainShell,
  chainShellReady,
  probeChainShell,
  runStage as runChainStage,
  shellExpresses,
} from '../src/chain-shell.js';
import { FIX_HARD_LIMIT } from '../src/fixes.js';
import { findExecutable, leakingDescriptors } from '../src/host.js';
import { type SandboxPolicy, spawnerReady } from '../src/index.js';
import { buildChain } from '../src/launch.js';
import { resolveLimits } from '../src/limits.js';
import { hasBwrap, hasPython, isRoot, linux, python, pythonJson } from './helpers.js';

const dash = findExecutable('dash');
const bash = findExecutable('/bin/bash');
const withDash = test.skipIf(!(linux && dash));

const STAGE: ChainShellStage = {
  gate: false,
  memoryBytes: 768 * 1024 * 1024,
  processes: 33,
  openFiles: 50,
  fileSizeBytes: 8 * 1024 * 1024,
  cpuSeconds: 7,
  keep: 2,
  // this test process may leak one above 9 itself (from vitest's parent)
  refuseHigh: false,
};

/** Runs the stage in dash, then `command` (see chain-shell.ts runStage), with no line on stdin unless given. */
const runStage = (
  stage: ChainShellStage,
  command: string[],
  options: { open?: number[]; stdin?: string } = {},
) => runChainStage(dash!, stage, command, { stdin: '', ...options });

/** A dash command printing the descriptors it has open (its own directory one excluded) and its limits. */
const REPORT = [
  dash ?? '/bin/sh',
  '-c',
  // builtins only: a fork could fail under the process limit just set
  'for n in 3 4 5 6 7 8 9; do if [ -e /proc/self/fd/$n ]; then echo "open $n"; fi; done\n' +
    'while IFS= read -r l; do echo "$l"; done < /proc/self/limits',
];

function limitRow(limits: string, name: string): string | undefined {
  const row = limits.split('\n').find((line) => line.startsWith(`${name}  `));
  return row?.slice(name.length).trim().split(/\s+/).slice(0, 2).join(' ');
}

describe('the script', () => {
  withDash('sets every limit exactly, soft CPU below hard', async () => {
    const out = await runStage(STAGE, REPORT);
    expect(out.code, out.stderr).toBe(0);
    expect(limitRow(out.stdout, 'Max address space')).toBe(
      `${768 * 1024 * 1024} ${768 * 1024 * 1024}`,
    );
    expect(limitRow(out.stdout, 'Max processes')).toBe('33 33');
    expect(limitRow(out.stdout, 'Max open files')).toBe('50 50');
    expect(limitRow(out.stdout, 'Max file size')).toBe(`${8 * 1024 * 1024} ${8 * 1024 * 1024}`);
    expect(limitRow(out.stdout, 'Max core file size')).toBe('0 0');
    expect(limitRow(out.stdout, 'Max cpu time')).toBe('7 8');
  });

  withDash('leaves the process and CPU limits alone when not given', async () => {
    const mine = await runStage({ ...STAGE, processes: undefined, cpuSeconds: 0 }, REPORT);
    expect(mine.code, mine.stderr).toBe(0);
    const before = await new Promise<string>((resolve) => {
      const child = spawn('/bin/cat', ['/proc/self/limits'], {
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      let text = '';
      child.stdout!.on('data', (chunk: Buffer) => {
        text += chunk.toString();
      });
      child.once('close', () => resolve(text));
    });
    expect(limitRow(mine.stdout, 'Max processes')).toBe(limitRow(before, 'Max processes'));
    expect(limitRow(mine.stdout, 'Max cpu time')).toBe(limitRow(before, 'Max cpu time'));
  });

  withDash('closes the inherited descriptors above keep, 3–9', async () => {
    const all = [3, 4, 5, 6, 7, 8, 9];
    for (const keep of [2, 3, 4]) {
      const out = await runStage({ ...STAGE, keep }, REPORT, { open: all });
      expect(out.code, out.stderr).toBe(0);
      const open = out.stdout.split('\n').filter((line) => line.startsWith('open '));
      expect(open).toEqual(all.filter((fd) => fd <= keep).map((fd) => `open ${fd}`));
    }
  });

  withDash(
    'refuses a descriptor above 9 it cannot close, unless told a closer follows',
    async () => {
      const echo = ['/bin/echo', 'reached'];
      const refused = await runStage({ ...STAGE, refuseHigh: true }, echo, { open: [12] });
      expect(refused.code).toBe(125);
      expect(refused.stdout).toBe('');
      expect(refused.stderr).toMatch(
        /^extfn-chain: inherited descriptor \/proc\/self\/fd\/\d\d+ is still open/,
      );
      const left = await runStage(STAGE, echo, { open: [12] });
      expect(left.stdout).toBe('reached\n');
      // the control: without 12, refused only for one this process leaks itself
      const control = await runStage({ ...STAGE, refuseHigh: true }, echo);
      const leaks = leakingDescriptors().some((fd) => fd > 9);
      expect(control.code).toBe(leaks ? 125 : 0);
    },
  );

  withDash('waits for the gate line; without one the command never runs', async () => {
    const gated = { ...STAGE, gate: true };
    expect((await runStage(gated, ['/bin/echo', 'reached'], { stdin: '\n' })).stdout).toBe(
      'reached\n',
    );
    const closed = await runStage(gated, ['/bin/echo', 'reached'], { stdin: '' });
    expect(closed.code).toBe(125);
    expect(closed.stdout).toBe('');
  });

  withDash('passes the command and its arguments as they are', async () => {
    const tricky = ['$(echo injected)', '; echo injected', '"$1"', '*', '`id`', 'a b'];
    const out = await runStage(STAGE, ['/usr/bin/printf', '%s\\n', ...tricky]);
    expect(out.stdout).toBe(`${tricky.join('\n')}\n`);
  });

  withDash('a failed ulimit stops the chain with its message first', async () => {
    // above fs.nr_open: refused even to root
    const out = await runStage({ ...STAGE, openFiles: 1 << 30 }, ['/bin/echo', 'reached']);
    expect(out.code).toBe(125);
    expect(out.stdout).toBe('');
    expect(out.stderr).toMatch(/^extfn-chain: \d+: ulimit: /);
  });

  test('only values its units express exactly', () => {
    expect(shellExpresses(STAGE)).toBe(true);
    expect(shellExpresses({ ...STAGE, memoryBytes: STAGE.memoryBytes + 1 })).toBe(false);
    expect(shellExpresses({ ...STAGE, fileSizeBytes: 1000 })).toBe(false);
    expect(shellExpresses({ ...STAGE, keep: 5 })).toBe(false);
  });
});

describe('the probe', () => {
  withDash('dash does all of it', async () => {
    expect(await probeChainShell(dash!)).toBeUndefined();
  });

  test.skipIf(!(linux && bash))('bash does not (its ulimit -p is the pipe size)', async () => {
    expect(await probeChainShell(bash!)).toMatch(/exit 125|Max/);
  });
});

describe('trees', () => {
  const policies: Array<[SandboxPolicy, boolean]> = [
    ['restricted', linux && hasBwrap && hasPython],
    ['unsandboxed', linux && isRoot && hasPython],
  ];
  const limits = {
    memoryBytes: 700 * 1024 * 1024,
    processes: 29,
    openFiles: 45,
    fileSizeBytes: 3 * 1024 * 1024,
    cpuSeconds: 9,
  };
  const program = `
import resource
names = ['AS', 'NPROC', 'NOFILE', 'FSIZE', 'CORE', 'CPU']
print(json.dumps({n: list(resource.getrlimit(getattr(resource, 'RLIMIT_' + n))) for n in names}))`;
  const expected = {
    AS: [limits.memoryBytes, limits.memoryBytes],
    NPROC: [limits.processes, limits.processes],
    NOFILE: [limits.openFiles, limits.openFiles],
    FSIZE: [limits.fileSizeBytes, limits.fileSizeBytes],
    CORE: [0, 0],
    CPU: [limits.cpuSeconds, limits.cpuSeconds + 1],
  };
  afterEach(() => {
    delete process.env.IMPROV_EXTFN_SHELL_CHAIN;
  });

  for (const [policy, available] of policies) {
    test.skipIf(!(available && dash))(
      `${policy}: the limits inside are the same through one shell and through the fallback`,
      async () => {
        await spawnerReady();
        expect(await chainShellReady()).toBe(dash);
        const oneShell = await pythonJson(program, policy, { limits });
        process.env.IMPROV_EXTFN_SHELL_CHAIN = '0';
        expect(chainShell()).toBeUndefined();
        const fallback = await pythonJson(program, policy, { limits });
        expect(oneShell).toEqual(expected);
        expect(fallback).toEqual(oneShell);
      },
    );

    test.skipIf(!(available && dash))(
      `${policy}: SIGXCPU at the soft CPU limit, SIGKILL at the hard one, through either chain`,
      async () => {
        const spin = `
def xcpu(signum, frame):
    print('xcpu', round(time.process_time()), flush=True)
signal.signal(signal.SIGXCPU, xcpu)
while True:
    pass`;
        for (const shell of ['1', '0']) {
          process.env.IMPROV_EXTFN_SHELL_CHAIN = shell;
          const result = await python(spin, { policy, limits: { cpuSeconds: 1 } });
          expect(result.stdout.toString()).toMatch(/^xcpu 1\n$/);
          expect(result.signal).toBe('SIGKILL');
        }
      },
    );
  }
});

describe('a limit the host cannot grant', () => {
  afterEach(() => {
    delete process.env.IMPROV_EXTFN_SHELL_CHAIN;
  });

  test.skipIf(!(linux && hasBwrap && hasPython && dash))(
    'fails the tree before the guest runs, with the fix, through either chain',
    async () => {
      for (const shell of ['1', '0']) {
        process.env.IMPROV_EXTFN_SHELL_CHAIN = shell;
        // above fs.nr_open: refused even to root
        const error = await python('print("ran")', {
          policy: 'restricted',
          limits: { openFiles: 1 << 30 },
        }).catch((e: unknown) => e);
        expect(ExtFnError.isInstance(error) && error.kind, `${shell}: ${error}`).toBe('Sandbox');
        expect((error as ExtFnError).fix).toBe(FIX_HARD_LIMIT);
      }
    },
  );
});

describe('which chain a tree gets', () => {
  const limits = resolveLimits(undefined, 10_000);
  const options = (policy: SandboxPolicy) => ({
    command: '/usr/bin/true',
    policy,
    functionName: 'chain',
  });
  afterEach(() => {
    delete process.env.IMPROV_EXTFN_SHELL_CHAIN;
  });

  test.skipIf(!(linux && hasBwrap && dash))(
    'restricted: one shell, then bwrap, unless turned off',
    async () => {
      expect(await chainShellReady()).toBe(dash);
      const { chain } = buildChain(options('restricted'), limits, '/usr/bin/true', false, []);
      const bwrapAt = chain.findIndex((arg) => /\/bwrap$/.test(arg));
      expect(chain[0]).toBe(dash);
      expect(chain.slice(0, bwrapAt).some((arg) => /prlimit|perl/.test(arg))).toBe(false);
      // inside: the process limit by the same shell where the namespace sees it (non-root)
      const inner = chain.slice(bwrapAt).indexOf('--') + bwrapAt + 1;
      if (!isRoot && isSystemPath(dash!)) expect(chain[inner]).toBe(dash);
      if (isRoot) expect(chain[inner]).toBe('/usr/bin/true');
      // a leak above 9 from the parent: Perl follows to close it
      const leaky = buildChain(options('restricted'), limits, '/usr/bin/true', false, [60]).chain;
      if (findExecutable('perl')) {
        const perlAt = leaky.findIndex((arg) => /\/perl$/.test(arg));
        expect(perlAt).toBeGreaterThan(0);
        expect(perlAt).toBeLessThan(leaky.findIndex((arg) => /\/bwrap$/.test(arg)));
      }

      process.env.IMPROV_EXTFN_SHELL_CHAIN = '0';
      const fallback = buildChain(options('restricted'), limits, '/usr/bin/true', false, []).chain;
      expect(fallback[0]).toMatch(/\/prlimit$/);
    },
  );

  test.skipIf(!(linux && dash))(
    'a limit the shell cannot express exactly takes the fallback',
    async () => {
      expect(await chainShellReady()).toBe(dash);
      const odd = { ...limits, memoryBytes: limits.memoryBytes + 100 };
      const { chain } = buildChain(options('unsandboxed'), odd, '/usr/bin/true', false, []);
      expect(chain[0]).toMatch(/\/prlimit$/);
    },
  );
});
