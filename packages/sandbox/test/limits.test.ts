/**
 * Limits, deadlines and process trees, for real: each greedy or runaway guest
 * is bounded under `restricted` and `unsandboxed`, and the host is unharmed.
 */
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { ExtFnError } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { runSandboxed, type SandboxPolicy } from '../src/index.js';
import {
  hasBwrap,
  hasPython,
  hostProcessesWith,
  isRoot,
  linux,
  python,
  pythonJson,
} from './helpers.js';

const id = randomBytes(6).toString('hex');
const policies: Array<[SandboxPolicy, boolean]> = [
  ['restricted', linux && hasBwrap && hasPython],
  ['unsandboxed', linux && isRoot && hasPython],
];
const leftovers: string[] = [];
afterAll(() => {
  for (const path of leftovers) rmSync(path, { force: true });
});

async function rejection(promise: Promise<unknown>): Promise<ExtFnError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(ExtFnError.isInstance(error), String(error)).toBe(true);
  return error as ExtFnError;
}

describe.each(policies)('%s', (policy, available) => {
  const t = test.skipIf(!available);

  t('fork without bound: stopped by the process limit, the host unharmed', async () => {
    const program = `
children, error = 0, None
while children < 500:
    try:
        pid = os.fork()
    except OSError as e:
        error = errno.errorcode[e.errno]
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children += 1
print(json.dumps({'children': children, 'error': error}), flush=True)`;
    const out = await pythonJson<{ children: number; error: string }>(program, policy, {
      limits: { processes: 24 },
    });
    expect(out.error).toBe('EAGAIN');
    expect(out.children).toBeLessThan(24);
    expect(out.children).toBeGreaterThan(0);
    // the sleeping children died with the tree, and the host still starts processes
    expect((await pythonJson('print(json.dumps(1))', policy)) as unknown).toBe(1);
  });

  t('a fork bomb that lets the error escape: the exit is named a processes limit', async () => {
    // the children sleep, so each fork holds a process slot until the limit refuses one
    const program = `
while True:
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)`;
    const result = await python(program, { policy, limits: { processes: 16 } });
    expect(result.exitCode).toBe(1);
    expect(result.stderr).toMatch(/BlockingIOError: \[Errno 11\]/);
    expect(result.limit).toBe('processes');
    // threads count against the same limit
    const threads = await python(
      'import threading\nfor i in range(64): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()',
      { policy, limits: { processes: 16 } },
    );
    expect(threads.stderr).toMatch(/can't start new thread/);
    expect(threads.limit).toBe('processes');
    expect((await pythonJson('print(json.dumps(1))', policy)) as unknown).toBe(1);
  });

  t('allocate 2 GB: fails and is reported as a memory limit', async () => {
    const result = await python('x = bytearray(2 * 1024 ** 3)\nprint(len(x))', { policy });
    expect(result.exitCode).not.toBe(0);
    expect(result.stderr).toMatch(/MemoryError/);
    expect(result.limit).toBe('memory');
  });

  t('write a file larger than the file-size limit: refused and reported', async () => {
    const path = `/tmp/extfn-big-${policy}-${id}`;
    leftovers.push(path);
    const result = await python(
      `with open(${JSON.stringify(path)}, 'wb') as f:\n    f.write(b'x' * (2 * 1024 * 1024))`,
      { policy, limits: { fileSizeBytes: 1024 * 1024 } },
    );
    expect(result.exitCode).not.toBe(0);
    expect(result.limit).toBe('file-size');
  });

  t('burn CPU: stopped by RLIMIT_CPU and reported as cpu-time', async () => {
    const result = await python('while True: pass', {
      policy,
      timeoutMs: 10_000,
      limits: { cpuSeconds: 1 },
    });
    // SIGXCPU at the soft limit; a namespace's pid 1 ignores it and dies of SIGKILL a second later
    expect(result.signal).toBe(policy === 'restricted' ? 'SIGKILL' : 'SIGXCPU');
    expect(result.limit).toBe('cpu-time');
  });

  t('print 5 MB: Runtime "output too large"; 200 KB passes without a pipe deadlock', async () => {
    const error = await rejection(python("sys.stdout.write('x' * (5 * 1024 * 1024))", { policy }));
    expect(error.kind).toBe('Runtime');
    expect(error.limit).toBe('output');
    expect(error.message).toMatch(/output too large/);
    const ok = await python("sys.stdout.write('y' * 200_000); sys.stderr.write('e' * 200_000)", {
      policy,
    });
    expect(ok.exitCode).toBe(0);
    expect(ok.stdout.length).toBe(200_000);
    expect(ok.stderr.length).toBe(16 * 1024); // the bounded tail
  });

  t('loop forever: Timeout near the deadline', async () => {
    const began = Date.now();
    const error = await rejection(python('while True: pass', { policy, timeoutMs: 1000 }));
    const elapsed = Date.now() - began;
    expect(error.kind).toBe('Timeout');
    expect(error.limit).toBe('wall-clock');
    expect(error.ms).toBe(1000);
    expect(elapsed).toBeGreaterThanOrEqual(1000);
    expect(elapsed).toBeLessThan(1500); // the bound: timeout + 0.5 s
  });

  t('a setsid() grandchild sleeping past the deadline is killed', async () => {
    const marker = `31.${Date.now() % 100000}${policy.length}`;
    const program = `
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '${marker}'])
    os._exit(0)
print('started', flush=True)
time.sleep(30)`;
    const error = await rejection(python(program, { policy, timeoutMs: 1000 }));
    expect(error.kind).toBe('Timeout');
    expect(hostProcessesWith(marker)).toEqual([]);
  });

  t('a daemon left behind by a body that exits is killed with the tree', async () => {
    const marker = `32.${Date.now() % 100000}${policy.length}`;
    const program = `
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(0); os.close(1); os.close(2)
        os.execv('/bin/sleep', ['sleep', '${marker}'])
    os._exit(0)
print('bye')`;
    const result = await python(program, { policy, timeoutMs: 5000 });
    expect(result.exitCode).toBe(0);
    expect(hostProcessesWith(marker)).toEqual([]);
  });
});

describe('restricted only', () => {
  const t = test.skipIf(!(linux && hasBwrap && hasPython));

  t('fill /tmp: bounded by the tmpfs size', async () => {
    const out = await pythonJson<{ written: number; error: string }>(
      `
written, error, i = 0, None, 0
try:
    while written < 64 * 1024 * 1024:
        with open('/tmp/fill%d' % i, 'wb') as f:
            for _ in range(4):
                f.write(b'z' * 262144)
                written += 262144
        i += 1
except OSError as e:
    error = errno.errorcode[e.errno]
print(json.dumps({'written': written, 'error': error}))`,
      'restricted',
      { limits: { tmpfsBytes: 4 * 1024 * 1024 } },
    );
    expect(out.error).toBe('ENOSPC');
    expect(out.written).toBeLessThanOrEqual(4 * 1024 * 1024);
  });
});

describe('trusted keeps the deadline and output caps', () => {
  const t = test.skipIf(!(linux && hasPython));
  t('deadline, output cap, setsid grandchild', async () => {
    const marker = `33.${Date.now() % 100000}`;
    const program = `
if os.fork() == 0:
    os.setsid()
    os.execv('/bin/sleep', ['sleep', '${marker}'])
time.sleep(30)`;
    const timeout = await rejection(python(program, { policy: 'trusted', timeoutMs: 800 }));
    expect(timeout.kind).toBe('Timeout');
    expect(hostProcessesWith(marker)).toEqual([]);
    const output = await rejection(
      python("sys.stdout.write('x' * (5 * 1024 * 1024))", { policy: 'trusted' }),
    );
    expect(output.limit).toBe('output');
  });
});

describe('cancellation', () => {
  test.skipIf(!(linux && hasPython))('an AbortSignal ends the tree: Runtime aborted', async () => {
    const controller = new AbortController();
    const pending = python('time.sleep(30)', { policy: 'trusted', signal: controller.signal });
    setTimeout(() => controller.abort(new Error('user cancelled')), 200);
    const error = await rejection(pending);
    expect(error.kind).toBe('Runtime');
    expect(error.aborted).toBe(true);
    const already = await rejection(
      runSandboxed({ command: '/bin/true', timeoutMs: 1000, signal: AbortSignal.abort() }),
    );
    expect(already.aborted).toBe(true);
  });
});

describe('controls: without rlimits (trusted) the same greed succeeds', () => {
  const t = test.skipIf(!(linux && hasPython));
  t('30 processes, 2 GB, a 2 MiB file', async () => {
    const path = `/tmp/extfn-big-trusted-${id}`;
    leftovers.push(path);
    const out = await pythonJson<{ children: number; allocated: number; written: number }>(
      `
children = 0
for i in range(30):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)
        os._exit(0)
    children += 1
for i in range(children):
    os.wait()
import mmap
x = mmap.mmap(-1, 2 * 1024 ** 3)  # claims the address space like bytearray, without zeroing 2 GB
with open(${JSON.stringify(path)}, 'wb') as f:
    written = f.write(b'x' * (2 * 1024 * 1024))
print(json.dumps({'children': children, 'allocated': len(x), 'written': written}))`,
      'trusted',
      { limits: { processes: 24, fileSizeBytes: 1024 * 1024 } }, // ignored by trusted
    );
    expect(out).toEqual({ children: 30, allocated: 2 * 1024 ** 3, written: 2 * 1024 * 1024 });
  });
});

/**
 * The limit label must not be the guest's to choose where the host can know
 * better: exit statuses dressed as signals, self-sent signals and idling are
 * no CPU or file-size limit; stderr text counts only as the guest's last words,
 * and never under trusted, which sets no limits.
 */
describe('limit labels a guest cannot forge', () => {
  const restricted = test.skipIf(!(linux && hasBwrap && hasPython));
  const unsandboxed = test.skipIf(!(linux && isRoot && hasPython));
  const anyPolicy = test.skipIf(!(linux && hasPython));

  restricted('restricted: exit(152) and exit(153) are exits, not SIGXCPU or SIGXFSZ', async () => {
    for (const code of [152, 153, 143]) {
      const result = await python(`sys.exit(${code})`, { policy: 'restricted' });
      expect(result).toMatchObject({ exitCode: code, signal: null });
      expect(result.limit).toBeUndefined();
    }
  });

  restricted('restricted: exit(137) after idling past the CPU limit is no cpu-time', async () => {
    const result = await python('time.sleep(1.4)\nsys.exit(137)', {
      policy: 'restricted',
      timeoutMs: 10_000,
      limits: { cpuSeconds: 1 },
    });
    // bwrap reports it as 137 either way, so the signal stays ambiguous; the label does not
    expect(result.signal).toBe('SIGKILL');
    expect(result.limit).toBeUndefined();
  });

  unsandboxed('unsandboxed: a self-sent SIGXCPU or SIGKILL is no cpu-time', async () => {
    for (const [name, wait] of [
      ['SIGXCPU', 0],
      ['SIGKILL', 1.4],
    ] as const) {
      const result = await python(`time.sleep(${wait})\nos.kill(os.getpid(), signal.${name})`, {
        policy: 'unsandboxed',
        timeoutMs: 10_000,
        limits: { cpuSeconds: 1 },
      });
      expect(result.signal).toBe(name);
      expect(result.limit).toBeUndefined();
    }
  });

  anyPolicy('earlier stderr text does not label an unrelated failure', async () => {
    const policy: SandboxPolicy = linux && hasBwrap ? 'restricted' : 'trusted';
    const program = `
sys.stderr.write('MemoryError\\nCannot allocate memory\\n[Errno 11] Resource temporarily unavailable\\n')
sys.stderr.write('File too large\\n')
1 / 0`;
    const result = await python(program, { policy });
    expect(result.stderr).toMatch(/MemoryError[\s\S]*ZeroDivisionError/);
    expect(result.limit).toBeUndefined();
  });

  anyPolicy(
    'last words never label a clean exit; trusted sets no limits, so never a label',
    async () => {
      const policy: SandboxPolicy = linux && hasBwrap ? 'restricted' : 'trusted';
      const clean = await python("sys.stderr.write('MemoryError\\n')", { policy });
      expect(clean.exitCode).toBe(0);
      expect(clean.limit).toBeUndefined();
      const trusted = await python('raise MemoryError()', { policy: 'trusted' });
      expect(trusted.exitCode).toBe(1);
      expect(trusted.stderr).toMatch(/MemoryError/);
      expect(trusted.limit).toBeUndefined();
      const selfKilled = await python('os.kill(os.getpid(), signal.SIGXCPU)', {
        policy: 'trusted',
      });
      expect(selfKilled.signal).toBe('SIGXCPU');
      expect(selfKilled.limit).toBeUndefined();
    },
  );
});
