/** Pure parts of the sandbox, without starting trees: policy, limits, labels, seccomp program, bind rule, probe. */
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { interpreterTree } from '../src/binds.js';
import { explainExit, signalFromBwrapStatus } from '../src/explain.js';
import {
  cgroupSupport,
  DEFAULT_LIMITS,
  DENIED_SYSCALLS,
  fallbackAllowed,
  policyFor,
  probeSandbox,
  seccompProgram,
  UNAVAILABLE_SYSCALLS,
} from '../src/index.js';
import { resolveLimits } from '../src/limits.js';
import { hasBwrap, isRoot, linux } from './helpers.js';

describe('policyFor', () => {
  test('restricted unless the host asked for trusted; ALLOW_UNSANDBOXED only permits a fallback', () => {
    expect(policyFor({})).toBe('restricted');
    expect(policyFor({ IMPROV_EXTFN_ALLOW_UNSANDBOXED: '1' })).toBe('restricted');
    expect(fallbackAllowed({ IMPROV_EXTFN_ALLOW_UNSANDBOXED: '1' })).toBe(true);
    expect(fallbackAllowed({ IMPROV_EXTFN_ALLOW_UNSANDBOXED: 'true' })).toBe(false);
    expect(fallbackAllowed({})).toBe(false);
    expect(policyFor({ IMPROV_EXTFN_TRUSTED: '1' })).toBe('trusted');
    expect(policyFor({ IMPROV_EXTFN_TRUSTED: '1', IMPROV_EXTFN_ALLOW_UNSANDBOXED: '1' })).toBe(
      'trusted',
    );
    expect(policyFor({ IMPROV_EXTFN_TRUSTED: 'yes', IMPROV_EXTFN_ALLOW_UNSANDBOXED: 'true' })).toBe(
      'restricted',
    );
  });
});

describe('limits', () => {
  test('defaults, CPU seconds from the deadline, nonsense refused', () => {
    expect(DEFAULT_LIMITS.memoryBytes).toBe(1024 ** 3);
    expect(DEFAULT_LIMITS.stdoutBytes).toBe(1024 ** 2);
    expect(resolveLimits(undefined, 2500).cpuSeconds).toBe(4);
    expect(resolveLimits({ cpuSeconds: 9 }, 2500).cpuSeconds).toBe(9);
    expect(resolveLimits(undefined, undefined).cpuSeconds).toBe(0);
    expect(() => resolveLimits({ processes: -1 }, 1000)).toThrow(RangeError);
  });

  test('explainExit names the limit only for a failed exit', () => {
    expect(explainExit(0, null, 'MemoryError')).toBeUndefined();
    expect(explainExit(1, null, 'Traceback…\nMemoryError\n')).toBe('memory');
    expect(explainExit(1, null, 'OSError: [Errno 27] File too large')).toBe('file-size');
    expect(explainExit(null, 'SIGXFSZ', '')).toBe('file-size');
    expect(
      explainExit(1, null, 'BlockingIOError: [Errno 11] Resource temporarily unavailable'),
    ).toBe('processes');
    expect(explainExit(1, null, "RuntimeError: can't start new thread\n")).toBe('processes');
    expect(explainExit(1, null, 'ZeroDivisionError')).toBeUndefined();
  });

  test('cpu-time needs CPU the host saw spent, not just the signal', () => {
    const cpu = (usedSeconds: number | undefined) => ({ seconds: 2, usedSeconds });
    expect(explainExit(null, 'SIGXCPU', '')).toBeUndefined();
    expect(explainExit(null, 'SIGXCPU', '', cpu(undefined))).toBeUndefined();
    expect(explainExit(null, 'SIGXCPU', '', cpu(0.02))).toBeUndefined();
    expect(explainExit(null, 'SIGXCPU', '', cpu(1.9))).toBe('cpu-time');
    expect(explainExit(null, 'SIGKILL', '', cpu(1.0))).toBeUndefined();
    expect(explainExit(null, 'SIGKILL', '', cpu(2.9))).toBe('cpu-time');
    expect(explainExit(null, 'SIGKILL', '', { seconds: 0, usedSeconds: 9 })).toBeUndefined();
  });

  test('stderr labels come from the last words only', () => {
    // logged earlier, then an unrelated failure: no label
    const logged = 'retrying after MemoryError\nCannot allocate memory, shrinking\n';
    const unrelated =
      'Traceback (most recent call last):\n  File "<string>", line 3\nZeroDivisionError: division by zero\n';
    expect(explainExit(1, null, logged + unrelated)).toBeUndefined();
    // R ends with "Execution halted" after the error line
    expect(
      explainExit(1, null, 'Error: cannot allocate vector of size 7.5 Gb\nExecution halted\n\n'),
    ).toBe('memory');
  });

  test('bwrap statuses read as signals only for signals that can kill the namespace init', () => {
    expect(signalFromBwrapStatus(137)).toBe('SIGKILL');
    expect(signalFromBwrapStatus(139)).toBe('SIGSEGV');
    expect(signalFromBwrapStatus(159)).toBe('SIGSYS');
    // init ignores SIGXCPU, SIGXFSZ, SIGTERM…: these are plain exit(128 + N)
    expect(signalFromBwrapStatus(152)).toBeNull(); // SIGXCPU
    expect(signalFromBwrapStatus(153)).toBeNull(); // SIGXFSZ
    expect(signalFromBwrapStatus(143)).toBeNull(); // SIGTERM
    expect(signalFromBwrapStatus(1)).toBeNull();
    expect(signalFromBwrapStatus(200)).toBeNull();
  });
});

describe('seccomp program', () => {
  const program = seccompProgram();
  const view = new DataView(program.buffer);
  const at = (i: number) => ({
    code: view.getUint16(i * 8, true),
    jt: view.getUint8(i * 8 + 2),
    jf: view.getUint8(i * 8 + 3),
    k: view.getUint32(i * 8 + 4, true),
  });
  const count = program.length / 8;

  test('checks the architecture first and ends every path in a return', () => {
    expect(at(0)).toEqual({ code: 0x20, jt: 0, jf: 0, k: 4 }); // load seccomp_data.arch
    expect(at(1).k).toBe(0xc000003e);
    expect(at(2).k).toBe(0xc00000b7);
    expect(at(3)).toEqual({ code: 0x06, jt: 0, jf: 0, k: 0x80000000 }); // other ABIs: kill
    expect(at(count - 1).code).toBe(0x06);
    for (let i = 0; i < count; i++) {
      const { code, jt, jf } = at(i);
      if ((code & 0x07) === 0x05) expect(i + 1 + Math.max(jt, jf)).toBeLessThan(count);
    }
    expect(count).toBeLessThan(4096); // BPF_MAXINSNS
  });

  test('denies what the issue lists', () => {
    for (const name of [
      'ptrace',
      'mount',
      'open_tree',
      'fsopen',
      'unshare',
      'setns',
      'keyctl',
      'add_key',
    ]) {
      expect(DENIED_SYSCALLS).toContain(name);
    }
    for (const name of [
      'bpf',
      'perf_event_open',
      'userfaultfd',
      'io_uring_setup',
      'kexec_load',
      'init_module',
      'process_vm_readv',
      'kcmp',
      'pidfd_getfd',
      'process_madvise',
      'open_by_handle_at',
      'name_to_handle_at',
    ]) {
      expect(DENIED_SYSCALLS).toContain(name);
    }
    // memory no rlimit counts: unavailable (ENOSYS)
    for (const name of ['shmget', 'msgget', 'semget', 'memfd_create']) {
      expect(UNAVAILABLE_SYSCALLS).toContain(name);
    }
  });
});

describe('probeSandbox', () => {
  test.skipIf(!(linux && hasBwrap && isRoot))(
    'restricted here: every layer active, memoised',
    async () => {
      const probe = await probeSandbox({ policy: 'restricted' });
      expect(probe).toMatchObject({
        policy: 'restricted',
        ok: true,
        layers: { namespaces: true, seccomp: true, uidDrop: true, rlimits: true },
      });
      // cgroup v1 needs root, which this test runs as; whether v1 or v2 depends on the host
      const support = cgroupSupport();
      expect(probe.layers.cgroup).toBe(support.version);
      expect(probe.cgroupReason).toBe(support.reason);
      expect(probe.uid).toBeGreaterThanOrEqual(0x7000_0000); // a leased uid of its own
      expect(probe.bwrap?.version).toMatch(/^\d+\.\d+/);
      expect(probe.summary).toMatch(/^restricted: bubblewrap/);
      expect(await probeSandbox({ policy: 'restricted' })).toBe(probe);
    },
  );

  test('trusted is always available and says what it does not do', async () => {
    const probe = await probeSandbox({ policy: 'trusted' });
    expect(probe.ok).toBe(true);
    expect(probe.layers).toMatchObject({
      namespaces: false,
      uidDrop: false,
      rlimits: false,
      cleanEnv: true,
    });
    expect(probe.summary).toMatch(/host’s privileges/);
  });
});

describe('interpreterTree', () => {
  const homes = ['/home', '/root', '/home/ada', '/srv/work'];
  const tree = (path: string) => interpreterTree(path, 'f', homes);
  test('binds the interpreter’s own prefix, nothing under /usr', () => {
    expect(tree('/usr/bin/python3.11')).toBeUndefined();
    expect(tree('/opt/python-3.12/bin/python3.12')).toBe('/opt/python-3.12');
    expect(tree('/home/ada/.pyenv/versions/3.12.1/bin/python3.12')).toBe(
      '/home/ada/.pyenv/versions/3.12.1',
    );
    expect(tree('/opt/julia/julia')).toBe('/opt/julia');
  });

  test('refuses a tree that holds a home, /root, the working directory, ~/.local or a top-level dir', () => {
    for (const [path, why] of [
      ['/home/ada/bin/python', /holds \/home\/ada/],
      ['/home/ada/python', /holds \/home\/ada/],
      ['/root/bin/python', /holds \/root/],
      ['/srv/work/bin/python', /holds \/srv\/work/],
      ['/home/ada/.local/bin/python3', /shared ~\/\.local/],
      ['/opt/bin/python', /top-level/],
      ['/opt/python', /top-level/],
    ] as const) {
      const error = (() => {
        try {
          tree(path);
        } catch (e) {
          return e;
        }
      })() as ExtFnError;
      expect(ExtFnError.isInstance(error), path).toBe(true);
      expect(error.kind).toBe('Sandbox');
      expect(error.message).toMatch(why);
      expect(error.fix).toMatch(/prefix of its own/);
    }
  });
});
