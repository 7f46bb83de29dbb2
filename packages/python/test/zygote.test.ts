/**
 * Restricted Python workers cloned from a sandboxed zygote (docs/architecture.md,
 * "Zygote"), end to end through the runner: the same results as tree
 * workers, starts that really come from the zygote (a refresh of several
 * functions: one tree, then forks), the sandbox of each
 * worker tested by real attempts from bodies (host files, network, a sibling
 * worker's processes and /tmp, new namespaces, fork bomb, memory, deadline,
 * descriptors), a zygote that dies, and IMPROV_EXTFN_ZYGOTE=0.
 * Restricted sandbox, /usr/bin/python3.
 */
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ExtFnError, Value } from '@improv/extfn-core';
import { cgroupSupport } from '@improv/extfn-sandbox';
import { afterEach, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { closeIdleZygotes } from '../src/index.js';
import {
  alive,
  failure,
  noRestricted,
  PYTHON,
  restrictedOk,
  scopedRegistry,
  waitFor,
} from './helpers.js';

const saved = process.env.IMPROV_EXTFN_ZYGOTE;
afterEach(() => {
  if (saved === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
  else process.env.IMPROV_EXTFN_ZYGOTE = saved;
});
// every test starts without a zygote: the last test's may idle for the next runner
beforeEach(() => closeIdleZygotes());

/**
 * Boots the runner's zygote as a refresh of several functions does: two
 * starts at once, the first a tree, the second boots the zygote and is its
 * first fork (zygote-starts.ts).
 */
async function zygoteReady(
  registry: { eval(name: string, args: never[]): Promise<unknown> },
  runner: { stats(): { zygote?: string; zygoteStarts?: number; started: number } },
): Promise<void> {
  await Promise.all([registry.eval('warm', []), registry.eval('warm2', [])]);
  expect(runner.stats().zygote).toMatch(/^ready \(pid \d+\)$/);
  expect(runner.stats()).toMatchObject({ started: 2, zygoteStarts: 1 });
}

/** A text function's value, called with no arguments. */
async function textOf(
  registry: { eval(name: string, args: never[]): Promise<{ type: string }> },
  name: string,
): Promise<string> {
  const value = await registry.eval(name, []);
  expect(value.type).toBe('text');
  return (value as unknown as { value: string }).value;
}

/** The host pids of a process's children. */
function children(pid: number): number[] {
  const text = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
  return text ? text.split(/\s+/).map(Number) : [];
}

/** A process's minor page faults so far (/proc/PID/stat, field 10). */
function minorFaults(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[7]);
}

/** Fields of /proc/PID/status. */
function status(pid: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const at = line.indexOf(':');
    if (at > 0) out[line.slice(0, at)] = line.slice(at + 1).trim();
  }
  return out;
}

const T = (body: string) => [body, [], 'text'] as [string, [], 'text'];

const ATTEMPTS = {
  warm: T('result = "warm"'),
  warm2: T('result = "warm2"'),
  // a host file the sandbox does not bind, and one it binds read-only
  readHost: T(
    [
      'out = []',
      'for p in ("/etc/shadow", "/root", "/work", "/home/extfnci"):',
      '    try:',
      '        open(p).read(); out.append(p + ":read")',
      '    except OSError as e:',
      '        out.append(p + ":" + type(e).__name__)',
      'result = " ".join(out)',
    ].join('\n'),
  ),
  network: T(
    [
      'import errno, socket',
      'out = []',
      'for addr in (("1.1.1.1", 53), ("127.0.0.1", 22)):',
      '    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)',
      '    s.settimeout(2)',
      '    try:',
      '        s.connect(addr); out.append("connected")',
      '    except OSError as e:',
      '        out.append(errno.errorcode.get(e.errno, str(e)))',
      '    s.close()',
      'result = " ".join(out)',
    ].join('\n'),
  ),
  // what a worker sees of other processes: /proc, and signals to every pid
  siblings: T(
    [
      'import os',
      'procs = sorted(int(n) for n in os.listdir("/proc") if n.isdigit())',
      'seen = []',
      'for pid in range(2, 5000):',
      '    try:',
      '        os.kill(pid, 0); seen.append(pid)',
      '    except OSError:',
      '        pass',
      'try:',
      '    os.kill(-1, 9); killall = "sent"',
      'except OSError as e:',
      '    killall = type(e).__name__',
      'result = "pid=%d procs=%s seen=%s ppid=%d killall=%s" % (os.getpid(), procs, seen, os.getppid(), killall)',
    ].join('\n'),
  ),
  writeTmp: T(
    'open("/tmp/secret-of-writer", "w").write("x")\nimport os\nresult = " ".join(sorted(os.listdir("/tmp")))',
  ),
  readTmp: T('import os\nresult = " ".join(sorted(os.listdir("/tmp"))) or "empty"'),
  namespaces: T(
    [
      'import ctypes, os',
      'libc = ctypes.CDLL(None, use_errno=True)',
      'out = []',
      'rc = libc.unshare(0x10000000)',
      'out.append("unshare=%d/%d" % (rc, ctypes.get_errno()))',
      'rc = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)',
      'out.append("mount=%d/%d" % (rc, ctypes.get_errno()))',
      'status = open("/proc/self/status").read()',
      'for key in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp"):',
      '    out.append([l for l in status.splitlines() if l.startswith(key + ":")][0].replace("\\t", ""))',
      'result = " ".join(out)',
    ].join('\n'),
  ),
  forkBomb: T(
    [
      'import os, time',
      'n = 0',
      'kids = []',
      'try:',
      '    for _ in range(500):',
      '        pid = os.fork()',
      '        if pid == 0:',
      '            time.sleep(30); os._exit(0)',
      '        kids.append(pid); n += 1',
      'except OSError as e:',
      '    err = type(e).__name__',
      'else:',
      '    err = "none"',
      'for pid in kids:',
      '    os.kill(pid, 9); os.waitpid(pid, 0)',
      'result = "%d %s" % (n, err)',
    ].join('\n'),
  ),
  forkTen: T(
    [
      'import os',
      'n = 0',
      'for _ in range(10):',
      '    pid = os.fork()',
      '    if pid == 0:',
      '        os._exit(0)',
      '    os.waitpid(pid, 0); n += 1',
      'result = str(n)',
    ].join('\n'),
  ),
  memory: T('x = bytearray(3 << 30)\nresult = "allocated"'),
  /** 150 MiB touched and kept across calls; answers a token its worker drew at its first call. */
  ...Object.fromEntries(
    ['hold1', 'hold2', 'hold3'].map((name) => [
      name,
      T(
        [
          'import os, sys',
          "if not hasattr(sys, '_kept'):",
          "    sys._kept = bytearray(b'\\x01') * (150 << 20)",
          '    sys._token = os.urandom(8).hex()',
          'result = sys._token',
        ].join('\n'),
      ),
    ]),
  ),
  /** Six children of 200 MiB each: every one under RLIMIT_AS, the worker's tree over its budget. */
  spread: T(
    [
      'import os, time',
      'r, w = os.pipe()',
      'kids = []',
      'for i in range(6):',
      '    pid = os.fork()',
      '    if pid == 0:',
      '        try:',
      '            x = bytearray(200 << 20)',
      '            for j in range(0, len(x), 4096): x[j] = 1',
      "            os.write(w, b'.')",
      '            time.sleep(30)',
      '        finally:',
      '            os._exit(0)',
      '    kids.append(pid)',
      'held = 0',
      'while held < 6:',
      '    held += len(os.read(r, 6))',
      'for pid in kids: os.kill(pid, 9)',
      'result = "held all six"',
    ].join('\n'),
  ),
  spin: T('while True:\n    pass'),
  descriptors: T(
    [
      'import os, stat',
      'out = []',
      'for fd in range(0, 1024):',
      '    try:',
      '        st = os.fstat(fd)',
      '    except OSError:',
      '        continue',
      '    kind = "sock" if stat.S_ISSOCK(st.st_mode) else "reg" if stat.S_ISREG(st.st_mode) else "chr" if stat.S_ISCHR(st.st_mode) else "fifo" if stat.S_ISFIFO(st.st_mode) else "other"',
      '    out.append("%d:%s:%d" % (fd, kind, st.st_nlink))',
      'result = " ".join(out)',
    ].join('\n'),
  ),
  redial: T(
    [
      'import socket, os',
      's = socket.socket(socket.AF_UNIX)',
      'try:',
      '    s.connect("/run/extfn-zygote/s"); result = "connected"',
      'except OSError as e:',
      '    result = type(e).__name__',
    ].join('\n'),
  ),
};

describe.skipIf(!restrictedOk)(
  `python workers from a zygote ${restrictedOk ? '' : noRestricted}`,
  () => {
    beforeAll(() => {
      delete process.env.IMPROV_EXTFN_ZYGOTE;
    });

    test('results equal tree workers for a number, a text and a datetime function; starts come from the zygote', async () => {
      const fns = {
        warm: ['result = 1', [], 'number'],
        warm2: ['result = 2', [], 'number'],
        num: ['result = args[0] * 2.5 + 1', ['number'], 'number'],
        txt: ['result = args[0].upper() + "!" * 3', ['text'], 'text'],
        when: [
          'from datetime import timedelta\nresult = args[0] + timedelta(days=1, hours=2)',
          ['datetime'],
          'datetime',
        ],
      } as const;
      const calls = async (registry: ReturnType<typeof scopedRegistry>['registry']) => [
        await registry.eval('num', [Value.number(4.2)]),
        await registry.eval('txt', [Value.text('héllo')]),
        await registry.eval('when', [Value.datetime(new Date(Date.UTC(2024, 1, 28, 23, 30)))]),
      ];
      const zyg = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      await zygoteReady(zyg.registry, zyg.runner);
      const fromZygote = await calls(zyg.registry);
      const stats = zyg.runner.stats();
      expect(stats.zygoteStarts).toBe(4); // warm2's, then one per function
      expect(stats.started).toBe(5); // and warm's tree
      // the worker is a child of the zygote, pid 1 of its own pid namespace below bwrap's
      const zygotePid = Number(/pid (\d+)/.exec(stats.zygote ?? '')?.[1]);
      const workers = zyg.runner.workerPids();
      const nested = workers.filter((pid) => status(pid).NSpid?.split(/\s+/).length === 3);
      expect(nested.length).toBe(4);
      expect(workers.length).toBe(5);
      for (const pid of nested) {
        const ppid = Number(status(pid).PPid);
        expect(Number(status(ppid).PPid)).toBe(zygotePid); // worker → zygote → bwrap
        expect(status(pid).NSpid?.split(/\s+/).at(-1)).toBe('1');
      }
      // a root host with cgroups: each worker in a cgroup of its own, not the zygote's
      const cgroupOf = (pid: number) =>
        readFileSync(`/proc/${pid}/cgroup`, 'utf8')
          .split('\n')
          .filter((line) => /:(memory|pids):/.test(line))
          .join(' ');
      if (process.getuid?.() === 0 && cgroupOf(zygotePid).includes('/tree-')) {
        const groups = new Set(nested.map(cgroupOf));
        expect(groups.size).toBe(nested.length);
        expect(groups.has(cgroupOf(zygotePid))).toBe(false);
      }

      process.env.IMPROV_EXTFN_ZYGOTE = '0';
      const trees = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      const fromTrees = await calls(trees.registry);
      expect(trees.runner.stats().zygoteStarts).toBe(0);
      expect(trees.runner.stats().zygote).toBe('not used');
      expect(fromZygote).toEqual(fromTrees);
      expect(fromZygote[0]).toEqual(Value.number(11.5));
    }, 60_000);

    test('a cold refresh of four functions at once: the first a tree, the other three forks', async () => {
      const fns = Object.fromEntries(
        [0, 1, 2, 3].map((k) => [`f${k}`, [`result = args[0] * 2 + ${k}`, ['number'], 'number']]),
      );
      const { registry, runner } = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      const rows = Array.from({ length: 2000 }, (_, i) => [Value.number(i)]);
      const results = await Promise.all([0, 1, 2, 3].map((k) => registry.evalBatch(`f${k}`, rows)));
      results.forEach((column, k) => {
        expect(column.length).toBe(2000);
        expect(column[1999]).toEqual(Value.number(1999 * 2 + k));
      });
      expect(runner.stats()).toMatchObject({ started: 4, zygoteStarts: 3 });
      expect(runner.stats().zygote).toMatch(/^ready/);
    }, 60_000);

    test('a body in a zygote worker: no host files, no network, no sibling, no new namespaces', async () => {
      const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
        maxWorkers: 2,
      });
      await zygoteReady(registry, runner);
      const text = (name: string) => textOf(registry, name);
      expect(await text('readHost')).toBe(
        '/etc/shadow:FileNotFoundError /root:FileNotFoundError /work:FileNotFoundError /home/extfnci:FileNotFoundError',
      );
      // its own network namespace: nothing outside, loopback up and empty as in a tree
      expect(await text('network')).toBe('ENETUNREACH ECONNREFUSED');
      // the writer keeps its worker (and /tmp) alive while the reader looks
      expect(await text('writeTmp')).toBe('secret-of-writer');
      expect(await text('readTmp')).toBe('empty');
      const siblings = await text('siblings');
      expect(siblings).toBe('pid=1 procs=[1] seen=[] ppid=0 killall=ProcessLookupError');
      // kill(-1) inside its namespace finds nobody (ESRCH): the writer's worker still serves
      expect(await text('writeTmp')).toBe('secret-of-writer');
      expect(await text('namespaces')).toBe(
        'unshare=-1/1 mount=-1/1 CapEff:0000000000000000 CapBnd:0000000000000000 NoNewPrivs:1 Seccomp:2',
      );
      expect(await text('redial')).toMatch(/PermissionError|FileNotFoundError/);
      // the same descriptors as a tree worker's (the driver's streams, /dev/null, the
      // unlinked shared file), none more: nothing of the zygote's survives in a worker
      const kinds = (list: string) =>
        list
          .split(' ')
          .map((fd) => fd.split(':').slice(1).join(':'))
          .sort();
      const fromZygote = await text('descriptors');
      process.env.IMPROV_EXTFN_ZYGOTE = '0';
      const trees = scopedRegistry('restricted', ATTEMPTS as never, { maxWorkers: 2 });
      const fromTree = (await trees.registry.eval('descriptors', [])) as { value: string };
      expect(trees.runner.stats().zygoteStarts).toBe(0);
      expect(kinds(fromZygote)).toEqual(kinds(fromTree.value));
      expect(fromZygote.split(' ').slice(0, 3)).toEqual(['0:chr:1', '1:sock:1', '2:sock:1']);
      expect(runner.stats().zygoteStarts).toBeGreaterThanOrEqual(8);
    }, 90_000);

    test.skipIf(cgroupSupport().version !== false)(
      `without a cgroup (${cgroupSupport().reason}), a forked worker whose children hold more than its budget is killed for memory`,
      async () => {
        const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
          maxWorkers: 2,
          limits: { memoryBytes: 256 << 20 },
        });
        await zygoteReady(registry, runner);
        const error = await failure(registry.eval('spread', [], { timeoutMs: 20_000 }));
        expect(ExtFnError.isInstance(error)).toBe(true);
        expect(error.kind).toBe('Runtime');
        expect(error.limit).toBe('memory');
        expect(error.functionName).toBe('spread');
        expect(await registry.eval('warm', [])).toEqual(Value.text('warm'));
        expect(runner.stats().zygoteStarts).toBeGreaterThanOrEqual(2);
      },
      60_000,
    );

    test('forked workers together may hold more than the budget of one: the zygote and they live on', async () => {
      const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
        maxWorkers: 4,
        limits: { memoryBytes: 256 << 20 },
      });
      await zygoteReady(registry, runner);
      const holders = ['hold1', 'hold2', 'hold3'];
      const first = await Promise.all(holders.map((name) => textOf(registry as never, name)));
      // 450 MiB in three workers, more than the 320 MiB budget of any one tree: long
      // enough for the host to have looked at every tree's memory several times
      await new Promise((resolve) => setTimeout(resolve, 500));
      const again = await Promise.all(holders.map((name) => textOf(registry as never, name)));
      expect(again).toEqual(first);
      expect(runner.stats().zygote).toMatch(/^ready/);
      expect(runner.stats().killed).toBe(0);
    }, 60_000);

    test('fork bomb bounded per worker, memory and deadline: typed errors, the next call works', async () => {
      const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
        maxWorkers: 2,
      });
      await zygoteReady(registry, runner);
      const bomb = registry.eval('forkBomb', []);
      const [count, error] = ((await bomb) as { value: string }).value.split(' ');
      expect(error).toBe('BlockingIOError'); // EAGAIN: RLIMIT_NPROC of the worker
      expect(Number(count)).toBeGreaterThan(10);
      expect(Number(count)).toBeLessThan(64);
      expect(await registry.eval('forkTen', [])).toEqual(Value.text('10'));

      const memory = await failure(registry.eval('memory', []));
      expect(ExtFnError.isInstance(memory)).toBe(true);
      expect(memory.message).toMatch(/MemoryError|memory/);
      expect(memory.functionName).toBe('memory');
      expect(await registry.eval('warm', [])).toEqual(Value.text('warm'));

      const spin = await failure(registry.eval('spin', [], { timeoutMs: 1500 }));
      expect(spin.kind).toBe('Timeout');
      expect(await registry.eval('spin', [], { timeoutMs: 1500 }).catch((e) => e.kind)).toBe(
        'Timeout',
      );
      expect(await registry.eval('readTmp', [])).toEqual(Value.text('empty'));
      expect(runner.stats().zygoteStarts).toBeGreaterThanOrEqual(5);
    }, 90_000);

    test('spare workers: forked ahead while nothing runs, taken by the next starts, each under the same sandbox', async () => {
      const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
        maxWorkers: 2,
      });
      await zygoteReady(registry, runner);
      const text = (name: string) => textOf(registry, name);
      // a refresh of four functions at once: four starts in one burst, so four spares wanted
      await Promise.all(['writeTmp', 'readTmp', 'forkTen', 'descriptors'].map(text));
      expect(await waitFor(() => runner.stats().spares === 4, 15_000)).toBe(true);
      const before = runner.stats();
      // four functions never started: each takes a spare, and its body meets what a fork's meets
      expect(await text('readHost')).toBe(
        '/etc/shadow:FileNotFoundError /root:FileNotFoundError /work:FileNotFoundError /home/extfnci:FileNotFoundError',
      );
      expect(await text('network')).toBe('ENETUNREACH ECONNREFUSED');
      // no sibling: not the other spares, not the workers
      expect(await text('siblings')).toBe(
        'pid=1 procs=[1] seen=[] ppid=0 killall=ProcessLookupError',
      );
      expect(await text('namespaces')).toBe(
        'unshare=-1/1 mount=-1/1 CapEff:0000000000000000 CapBnd:0000000000000000 NoNewPrivs:1 Seccomp:2',
      );
      const after = runner.stats();
      expect(after.spareStarts).toBe((before.spareStarts ?? 0) + 4);
      expect(after.zygoteStarts).toBe((before.zygoteStarts ?? 0) + 4);
      expect(after.started).toBe(before.started + 4);
      // a spare holds no body's state: what a body leaves behind stays in its own worker
      expect(await text('readTmp')).toBe('empty');
      // spares killed while they wait: a start then forks, as if there had been none
      const bwrap = Number(/pid (\d+)/.exec(runner.stats().zygote ?? '')?.[1]);
      const zygotePid = children(bwrap)[0]!;
      // the zygote's children that are no pool worker: the spares, once a worker just
      // evicted (exiting, or not reaped yet) is gone
      const notWorkers = () =>
        children(zygotePid).filter((pid) => !runner.workerPids().includes(pid));
      expect(
        await waitFor(() => runner.stats().spares === 4 && notWorkers().length === 4, 15_000),
      ).toBe(true);
      const spares = notWorkers();
      for (const pid of spares) process.kill(pid, 'SIGKILL');
      const forks = runner.stats().zygoteStarts ?? 0;
      expect(await text('redial')).toMatch(/PermissionError|FileNotFoundError/);
      expect(runner.stats()).toMatchObject({
        zygoteStarts: forks + 1,
        spareStarts: after.spareStarts,
      });
      const workers = runner.workerPids();
      await registry.close();
      expect(await waitFor(() => !workers.some(alive), 5000)).toBe(true);
      await closeIdleZygotes();
    }, 90_000);

    test("a spare is warmed up: its first chunk of 32 768 rows faults in far fewer pages than a fork's", async () => {
      const fns = Object.fromEntries(
        ['a', 'b', 'c', 'd', 'new'].map((name) => [
          name,
          ['result = args[0] + args[1]', ['number', 'number'], 'number'],
        ]),
      );
      const rows = 32_768;
      const columns = [
        Float64Array.from({ length: rows }, (_, i) => i),
        new Float64Array(rows).fill(0.5),
      ];
      /** Minor faults of the worker `new` starts, over its first chunk of `rows` rows. */
      const firstChunkFaults = async (spares: boolean) => {
        await closeIdleZygotes();
        process.env.IMPROV_EXTFN_ZYGOTE_SPARES = spares ? '4' : '0';
        const { registry, runner } = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
        await Promise.all(
          ['a', 'b'].map((name) => registry.eval(name, [Value.number(1), Value.number(2)])),
        );
        await Promise.all(
          ['a', 'b', 'c', 'd'].map((name) =>
            registry.eval(name, [Value.number(1), Value.number(2)]),
          ),
        );
        if (spares)
          expect(await waitFor(() => (runner.stats().spares ?? 0) >= 1, 15_000)).toBe(true);
        const before = new Set(runner.workerPids());
        const { spareStarts } = runner.stats();
        expect(await registry.eval('new', [Value.number(1), Value.number(2)])).toEqual(
          Value.number(3),
        );
        expect(runner.stats().spareStarts).toBe((spareStarts ?? 0) + (spares ? 1 : 0));
        const pid = runner.workerPids().find((p) => !before.has(p))!;
        const faults0 = minorFaults(pid);
        const { values, errors } = await registry.evalColumns('new', columns);
        expect(errors.size).toBe(0);
        expect(values[rows - 1]).toBe(rows - 1 + 0.5);
        expect(runner.workerPids()).toContain(pid); // the same worker served it
        const delta = minorFaults(pid) - faults0;
        await registry.close(); // its zygote idles, then closeIdleZygotes ends it
        return delta;
      };
      try {
        const forked = await firstChunkFaults(false);
        const spare = await firstChunkFaults(true);
        // ~700 against ~120 on the 2-core VM: the fork touches its chunk's memory and
        // shared file for the first time, the spare did that before it was taken
        expect(spare).toBeLessThan(forked / 2);
      } finally {
        delete process.env.IMPROV_EXTFN_ZYGOTE_SPARES;
        await closeIdleZygotes();
      }
    }, 90_000);

    test('a spare compiled a body of the driver before it was taken: a load on it faults in few pages, and leaves no trace of that body', async () => {
      const fns = {
        a: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
        b: ['result = args[0] * args[1]', ['number', 'number'], 'number'],
        c: ['result = args[0] - args[1]', ['number', 'number'], 'number'],
        // what a traceback could find of the driver's own body: nothing
        lines: [
          "import linecache, sys\nresult = ' '.join(sorted(k for k in linecache.cache if 'warm' in k)) or 'none'",
          [],
          'text',
        ],
      };
      await closeIdleZygotes();
      const { registry, runner } = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      try {
        // two starts at once: a tree, and the zygote's boot with its first fork
        expect(
          await Promise.all(
            ['a', 'c'].map((name) => registry.eval(name, [Value.number(1), Value.number(2)])),
          ),
        ).toEqual([Value.number(3), Value.number(-1)]);
        expect(await waitFor(() => (runner.stats().spares ?? 0) >= 1, 15_000)).toBe(true);
        const bwrap = Number(/pid (\d+)/.exec(runner.stats().zygote ?? '')?.[1]);
        const zygotePid = children(bwrap)[0]!;
        // each spare's count once every warm-up is over (they then wait on their pipes)
        let spares = new Map<number, number>();
        expect(
          await waitFor(() => {
            const now = new Map(
              children(zygotePid)
                .filter((pid) => !runner.workerPids().includes(pid))
                .map((pid) => [pid, minorFaults(pid)]),
            );
            const still =
              now.size > 0 && [...now].every(([pid, faults]) => spares.get(pid) === faults);
            spares = now;
            return still;
          }, 15_000),
        ).toBe(true);
        const { spareStarts } = runner.stats();
        expect(await registry.eval('b', [Value.number(2), Value.number(3)])).toEqual(
          Value.number(6),
        );
        expect(runner.stats().spareStarts).toBe((spareStarts ?? 0) + 1);
        const pid = runner.workerPids().find((p) => spares.has(p))!;
        expect(pid).toBeDefined();
        // the load and one row: ~12 pages on the 2-core VM; ~95 when the spare's first
        // compile comes with the body (the parser's and compiler's copy-on-write pages)
        expect(minorFaults(pid) - spares.get(pid)!).toBeLessThan(40);
        expect(await waitFor(() => (runner.stats().spares ?? 0) >= 1, 15_000)).toBe(true);
        expect(await registry.eval('lines', [])).toEqual(Value.text('none'));
        expect(runner.stats().spareStarts).toBe((spareStarts ?? 0) + 2); // on a spare too
      } finally {
        await registry.close();
        await closeIdleZygotes();
      }
    }, 60_000);

    test('IMPROV_EXTFN_ZYGOTE_SPARES=0: no spare is made, every start forks', async () => {
      process.env.IMPROV_EXTFN_ZYGOTE_SPARES = '0';
      try {
        const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
          maxWorkers: 2,
        });
        await zygoteReady(registry, runner);
        await Promise.all(
          ['writeTmp', 'readTmp', 'forkTen'].map((name) => registry.eval(name, [])),
        );
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(runner.stats().spares).toBe(0);
        expect(await registry.eval('readTmp', [])).toEqual(Value.text('empty'));
        expect(await registry.eval('network', [])).toEqual(Value.text('ENETUNREACH ECONNREFUSED'));
        expect(runner.stats()).toMatchObject({ spareStarts: 0, zygoteStarts: 5 });
      } finally {
        delete process.env.IMPROV_EXTFN_ZYGOTE_SPARES;
      }
    }, 60_000);

    test('the zygote killed: the next call still works (a new zygote, or a tree)', async () => {
      const { registry, runner } = scopedRegistry('restricted', ATTEMPTS as never, {
        maxWorkers: 2,
      });
      await zygoteReady(registry, runner);
      expect(await registry.eval('readTmp', [])).toEqual(Value.text('empty'));
      const zygotePid = Number(/pid (\d+)/.exec(runner.stats().zygote ?? '')?.[1]);
      expect(zygotePid).toBeGreaterThan(0);
      process.kill(zygotePid, 'SIGKILL');
      expect(await waitFor(() => !runner.stats().zygote?.includes(`pid ${zygotePid}`), 5000)).toBe(
        true,
      );
      // its start boots a new zygote and forks from it
      expect(await registry.eval('forkTen', [])).toEqual(Value.text('10'));
      expect(await waitFor(() => runner.stats().zygote?.startsWith('ready') === true, 15_000)).toBe(
        true,
      );
      expect(runner.stats().zygote).not.toContain(`pid ${zygotePid})`);
      const before = runner.stats().zygoteStarts ?? 0;
      expect(await registry.eval('writeTmp', [])).toEqual(Value.text('secret-of-writer'));
      expect(runner.stats().zygoteStarts).toBe(before + 1);
      // closed with the runner: its workers are gone; the zygote idles until closeIdleZygotes
      const second = Number(/pid (\d+)/.exec(runner.stats().zygote ?? '')?.[1]);
      const workers = runner.workerPids();
      await registry.close();
      expect(runner.stats().zygote).toBe('closed');
      expect(await waitFor(() => !workers.some(alive), 5000)).toBe(true);
      expect(alive(second)).toBe(true);
      await closeIdleZygotes();
      expect(await waitFor(() => !alive(second), 5000)).toBe(true);
    }, 60_000);

    test("idle after the runner's close: a new runner's first start forks from it at once", async () => {
      const fns = { warm: ['result = 1', [], 'number'], warm2: ['result = 2', [], 'number'] };
      const first = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      await zygoteReady(first.registry, first.runner);
      const zygote = first.runner.stats().zygote;
      await first.registry.close();
      // alone, a new runner's first start would be a tree (see the next test)
      const next = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      expect(await next.registry.eval('warm', [])).toEqual(Value.number(1));
      expect(next.runner.stats()).toMatchObject({ started: 1, zygoteStarts: 1, zygote });
      await next.registry.close();
      // with no zygote idle, the same first start is a tree
      await closeIdleZygotes();
      const cold = scopedRegistry('restricted', fns as never, { maxWorkers: 2 });
      expect(await cold.registry.eval('warm', [])).toEqual(Value.number(1));
      expect(cold.runner.stats()).toMatchObject({ started: 1, zygoteStarts: 0 });
    }, 60_000);

    test('an idle zygote does not keep the host process alive, and dies with it', async () => {
      // a host that boots a zygote, closes its registry and ends on its own
      const script = [
        "import { Registry } from '@improv/extfn-core';",
        `import { python } from ${JSON.stringify(fileURLToPath(new URL('../dist/index.js', import.meta.url)))};`,
        `const runner = python({ interpreter: ${JSON.stringify(PYTHON)}, policy: 'restricted', maxWorkers: 2 });`,
        'const registry = new Registry({ runners: [runner] });',
        "for (const name of ['a', 'b']) registry.register({ name, language: 'python', body: 'result = 1', argTypes: [], returnType: 'number' });",
        "await Promise.all([registry.eval('a', []), registry.eval('b', [])]);",
        'const pid = Number(/pid (\\d+)/.exec(runner.stats().zygote)?.[1]);',
        "const dir = readFileSync(['/proc', pid, 'cmdline'].join('/'), 'utf8').split('\\0').find((a) => a.includes('extfn-zygote-'));",
        'await registry.close();',
        'let idle = true; try { process.kill(pid, 0); } catch { idle = false; }',
        'console.log(JSON.stringify({ pid, dir, idle }));',
      ];
      const started = Date.now();
      const out = await new Promise<string>((resolve, reject) =>
        execFile(
          process.execPath,
          [
            '--input-type=module',
            '-e',
            `import { readFileSync } from 'node:fs';\n${script.join('\n')}`,
          ],
          { cwd: fileURLToPath(new URL('..', import.meta.url)), timeout: 25_000 },
          (error, stdout, stderr) =>
            error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(stdout),
        ),
      );
      const { pid, dir, idle } = JSON.parse(out) as { pid: number; dir: string; idle: boolean };
      expect(idle).toBe(true); // it was idle when the host ended…
      expect(Date.now() - started).toBeLessThan(20_000); // …which did not wait its 30 s
      expect(await waitFor(() => !alive(pid), 5000)).toBe(true);
      expect(dir).toMatch(/extfn-zygote-/);
      expect(existsSync(dir)).toBe(false);
    }, 60_000);
  },
);
