/**
 * One function's body against another function's rows on the same worker
 * host, both submitted through the queue as an engine submits a model's
 * functions, both running at once on that host (a real process,
 * test/fixtures/cross-function-host.mjs, two chunks and two python workers at
 * a time). B (the victim) holds its first row with its arguments in memory,
 * its values in its chunk's frame (the worker's shared file), its secret in
 * files in /tmp and /dev/shm, a TCP listener, an abstract unix socket, a POSIX
 * message queue, its name in /proc and a SIGUSR1 counter, until the test
 * releases it. A (the hostile body) meanwhile looks for B's secret everywhere
 * it can read (files of /tmp, /dev/shm, /var/tmp, its home and working
 * directory; /proc's environ, cmdline, descriptors and memory of every
 * process it can see and of B's and the worker host's real pids; every key of
 * the Redis the host serves), signals B and probes the host, ptraces B, scans
 * every TCP port of 127.0.0.1 (Redis's, B's) and dials Redis on the host's
 * other addresses, lists the named unix sockets and dials B's, opens B's
 * message queue and overwrites B's files. A second hostile body then writes
 * forged answers for every request id on every descriptor it can write (its
 * only channel to the host). B checks at the end that nothing reached it (a
 * signal, a connection, a changed file fail its row); its results must come
 * back exact.
 *
 * Every attempt has its control. In the same sandbox, A finds what is its
 * own: a file it planted with B's secret pattern, its own memory, its own TCP
 * listener in the port scan, its own abstract socket in /proc/net/unix; the
 * forger's frames do reach the host (its own worker is ended for them). And
 * the very same bodies under a worker host with a Trusted policy
 * (IMPROV_EXTFN_TRUSTED=1, the host's choice) reach B's files, descriptors,
 * memory, pid, sockets, queue and signals, the host's environment (with the
 * Redis address) and Redis itself (where A reads B's job and its arguments: a
 * body that could talk to Redis could as well forge any job's results), and
 * B sees the tampering, the connections and the signal: so each check can
 * fail. A is told B's secret value only so that it can say where it found it
 * (its own job carries it as text, never in the forms it searches for).
 * Its own redis-server (A dials 127.0.0.1, no password), Restricted sandbox,
 * /usr/bin/python3.
 */
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { type AddressInfo, createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { queue } from '../src/index.js';
import {
  freshQueueName,
  hasRedisServer,
  noRedisServer,
  noSandbox,
  PYTHON,
  pythonOk,
  TestRedis,
  waitFor,
} from './helpers.js';

/** B: row 0 holds (until SIGUSR2, at most its third argument in seconds), then says what reached it. */
const VICTIM = `
import ctypes, os, signal, socket, time
secret, marker, hold, port = args
if hold > 0:
    name, text = 'xb%d' % int(marker), 'B-SECRET-%r' % secret
    got, released = [], []
    signal.signal(signal.SIGUSR1, lambda n, f: got.append(n))
    signal.signal(signal.SIGUSR2, lambda n, f: released.append(n))
    for where in ('/tmp', '/dev/shm'):
        with open(where + '/' + name, 'w') as f:
            f.write(text)
    # places to meet it: a TCP listener, an abstract unix socket, a POSIX message queue
    tcp = socket.socket()
    tcp.bind(('127.0.0.1', int(port)))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind('\\0' + name)
    for s in (tcp, unix):
        s.listen(8)
        s.setblocking(False)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mq_open.restype = ctypes.c_int
    if libc.mq_open(('/' + name).encode(), 0o100 | 2, 0o600, None) < 0:  # O_CREAT | O_RDWR
        raise RuntimeError('B could not make its message queue: errno %d' % ctypes.get_errno())
    # ready: the host finds B under this name in /proc, and A's row runs now
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)
    deadline = time.monotonic() + hold
    while not released and time.monotonic() < deadline:
        time.sleep(0.02)
    seen = []
    for where in ('/tmp', '/dev/shm'):
        with open(where + '/' + name) as f:
            if f.read() != text:
                seen.append('tampered ' + where)
        os.unlink(where + '/' + name)
    for what, s in (('tcp', tcp), ('unix', unix)):
        try:
            s.accept()
            seen.append('a connection on ' + what)
        except BlockingIOError:
            pass
        s.close()
    libc.mq_unlink(('/' + name).encode())
    if got:
        seen.append('signals %r' % got)
    if not released:
        seen.append('never released')
    if seen:
        raise RuntimeError('B saw: ' + ', '.join(seen))
result = secret * 2
`;

/** A: every way it has to B's data, pids, files and the queue; a JSON report of what each gave. */
const HOSTILE = `
import base64, ctypes, errno, json, os, signal, socket, stat, struct, time
cfg = json.loads(args[0])
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
def err(e):
    return errno.errorcode.get(e.errno, str(e)) if getattr(e, 'errno', None) else type(e).__name__
def cerr():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
# what B's secret looks like as text (its files, its memory) and as a float (its frame, its memory)
patterns = (('B-SECRET-' + cfg['needle']).encode(), struct.pack('<d', float(cfg['needle'])))
me, bpid, host, port, bport = os.getpid(), cfg['bpid'], cfg['host'], cfg['port'], cfg['bport']
mark_a, mark_b = 'xa%d' % cfg['marker'], 'xb%d' % cfg['marker']
out, found = {}, []
def who(pid):
    return 'self' if pid == me else 'B' if pid == bpid else 'host' if pid == host else 'other'
def look(label, data):
    if data and label not in found and any(p in data for p in patterns):
        found.append(label)
def tried(f):
    try:
        return f()
    except Exception as e:
        return err(e)

# control: a file of its own with B's pattern, which the search below must find
plant = '/tmp/' + mark_a
with open(plant, 'wb') as f:
    f.write(patterns[0] + b' ' + patterns[1])
# 1. files: every directory a body can write to or is put in
for where in ('/tmp', '/dev/shm', '/var/tmp', os.environ.get('HOME') or '/tmp', os.getcwd()):
    try:
        names = os.listdir(where)
    except OSError:
        continue
    for name in names:
        path = os.path.join(where, name)
        try:
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_size <= 4 << 20:
                with open(path, 'rb') as f:
                    look('file ' + path.replace(mark_a, '<A>').replace(mark_b, '<B>'), f.read())
        except OSError:
            pass
os.unlink(plant)

# 2. /proc: every pid it can see, and B's and the worker host's real pids
visible = [int(p) for p in os.listdir('/proc') if p.isdigit()]
others = [p for p in visible if p != me]
out['proc_others'] = len(others)
comms = {}
for pid in others + [bpid, host]:
    for what in ('environ', 'cmdline'):
        try:
            with open('/proc/%d/%s' % (pid, what), 'rb') as f:
                look(what + ' ' + who(pid), f.read())
        except OSError:
            pass
    try:
        with open('/proc/%d/comm' % pid) as f:
            comms[pid] = f.read().strip()
    except OSError:
        pass
out['b_in_proc'] = mark_b in comms.values()
def host_environ():
    with open('/proc/%d/environ' % host, 'rb') as f:
        return 'names the redis' if b'IMPROV_EXTFN_REDIS_URL=' in f.read() else 'no redis'
out['host_environ'] = tried(host_environ)
def scan_fds(pid):
    for name in os.listdir('/proc/%d/fd' % pid):
        path = '/proc/%d/fd/%s' % (pid, name)
        try:
            if stat.S_ISREG(os.stat(path).st_mode):
                with open(path, 'rb') as f:
                    look('fd ' + who(pid), f.read(64 << 20))
        except OSError:
            pass
    return 'listed'
budget = [768 << 20]
def scan_mem(pid):
    with open('/proc/%d/maps' % pid) as f:
        maps = f.read().splitlines()
    with open('/proc/%d/mem' % pid, 'rb', 0) as mem:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith('rw'):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split('-'))
            size = min(hi - lo, 256 << 20, budget[0])
            if size <= 0:
                break
            try:
                mem.seek(lo)
                data = mem.read(size)
            except (OSError, ValueError, OverflowError):
                continue
            budget[0] -= len(data)
            look('mem ' + who(pid), data)
    return 'read'
# B's descriptors (its frame's shared file among them) and memory; any python it can see too
out['b_fds'] = tried(lambda: scan_fds(bpid))
out['b_mem'] = tried(lambda: scan_mem(bpid))
for pid in others:
    if pid != bpid and (comms.get(pid, '').startswith('python') or comms.get(pid) == mark_b):
        tried(lambda: scan_fds(pid))
        tried(lambda: scan_mem(pid))
# control: the same memory scan finds the patterns in its own memory
tried(lambda: scan_mem(me))

# 3. signals: B (it counts SIGUSR1), the host (0: only whether it could), anyone (0), every pid
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
def kill(pid, sig):
    try:
        os.kill(pid, sig)
        return 'sent'
    except OSError as e:
        return err(e)
out['kill_b'] = kill(bpid, signal.SIGUSR1)
out['kill_host'] = kill(host, 0)
out['kill_any'] = kill(-1, 0)
reachable = 0
for pid in range(1, 65537):
    if pid != me:
        try:
            os.kill(pid, 0)
            reachable += 1
        except OSError as e:
            reachable += e.errno == errno.EPERM
out['pids_reachable'] = reachable

# 4. ptrace: B, and (control) a child of its own
def attach(pid):
    if libc.ptrace(16, pid, None, None) != 0:  # PTRACE_ATTACH
        return cerr()
    os.waitpid(pid, 0x40000000)  # __WALL: the attach's stop
    libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    return 'attached'
out['ptrace_b'] = attach(bpid)
def own_child():
    child = os.fork()
    if child == 0:
        time.sleep(10)
        os._exit(0)
    try:
        return attach(child)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
out['ptrace_own_child'] = tried(own_child)

# 5. the network: every TCP port of 127.0.0.1 (its own listener as control), Redis on the host's addresses
own = socket.socket()
own.bind(('127.0.0.1', 0))
own.listen(1)
own_port = own.getsockname()[1]
open_ports = []
for p in range(1, 65536):
    s = socket.socket()
    s.settimeout(0.5)
    try:
        # a connection to itself (its source port drawn equal to p) is no listener
        if s.connect_ex(('127.0.0.1', p)) == 0 and s.getsockname() != s.getpeername():
            open_ports.append('own' if p == own_port else 'redis' if p == port else 'B' if p == bport else p)
    finally:
        s.close()
own.close()
out['open_ports'] = open_ports
def dial(address):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((address, port))
        return 'connected'
    except OSError as e:
        return err(e)
    finally:
        s.close()
out['routes'] = [dial(a) for a in cfg['addrs']]
# Redis: PING, then every key, searched (job data with its arguments decoded)
def redis():
    s = socket.create_connection(('127.0.0.1', port), timeout=2)
    f = s.makefile('rb')
    def reply():
        line = f.readline()
        kind, rest = line[:1], line[1:-2]
        if kind in (b'+', b'-'):
            return rest
        if kind == b':':
            return int(rest)
        if kind == b'$':
            return None if int(rest) < 0 else f.read(int(rest) + 2)[:-2]
        if kind == b'*':
            return None if int(rest) < 0 else [reply() for _ in range(int(rest))]
        raise ValueError(line)
    def cmd(*parts):
        parts = [p if isinstance(p, bytes) else str(p).encode() for p in parts]
        s.sendall(b'*%d\\r\\n' % len(parts) + b''.join(b'$%d\\r\\n%s\\r\\n' % (len(p), p) for p in parts))
        return reply()
    def flat(x):
        if isinstance(x, list):
            for y in x:
                yield from flat(y)
        elif isinstance(x, bytes):
            yield x
    pong = cmd('PING')
    reads = {b'hash': ('HGETALL',), b'string': ('GET',), b'list': ('LRANGE', 0, -1),
             b'set': ('SMEMBERS',), b'zset': ('ZRANGE', 0, -1), b'stream': ('XRANGE', '-', '+')}
    for key in cmd('KEYS', '*'):
        how = reads.get(cmd('TYPE', key))
        if how is None:
            continue
        for blob in flat(cmd(how[0], key, *how[1:])):
            look('redis', blob)
            try:
                job = json.loads(blob)
                look('redis', base64.b64decode(job['args']))
            except Exception:
                pass
    s.close()
    return pong.decode()
out['redis'] = tried(redis)

# 6. unix sockets with a name, in its network namespace (its own abstract one as control)
unix = socket.socket(socket.AF_UNIX)
unix.bind('\\0' + mark_a)
unix.listen(1)
with open('/proc/net/unix') as f:
    rows = [line.split() for line in f.read().splitlines()[1:]]
out['unix_named'] = sorted({r[7].replace(mark_a, '<A>').replace(mark_b, '<B>') for r in rows if len(r) > 7})
unix.close()
def dial_unix():
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect('\\0' + mark_b)
        return 'connected'
    finally:
        s.close()
out['unix_b'] = tried(dial_unix)
# B's POSIX message queue (its own IPC namespace, or the host's)
libc.mq_open.restype = ctypes.c_int
mq = libc.mq_open(('/' + mark_b).encode(), 2, 0, None)  # O_RDWR
out['mq_b'] = 'opened' if mq >= 0 else cerr()

# 7. B's files, overwritten where they are
for where in ('/tmp', '/dev/shm'):
    def tamper():
        with open(where + '/' + mark_b, 'r+') as f:
            f.write('tampered by A')
        return 'written'
    out['tamper ' + where] = tried(tamper)

# 8. its environment: nothing of the host's (the Redis address above all)
out['env'] = sorted(os.environ)
out['env_names_redis'] = any('redis' in (k + v).lower() or str(port) in v for k, v in os.environ.items())
out['found'] = sorted(found)
result = json.dumps(out, sort_keys=True)
`;

/**
 * A's second try, at the one channel it has to the host: its own protocol
 * pipe. It writes answers for every request id a worker may be waiting on
 * (its own and B's alike: ids are per worker), as \`call\` and \`callf64\`
 * frames, to each descriptor it can write that is not a file or its stderr.
 */
const FORGER = `
import os, stat, struct
frames = b''
for i in range(1, 65):
    frames += b'{"id":%d,"values":[-1.0,-1.0,-1.0]}\\n' % i
    frames += b'{"id":%d,"rows":3,"bytes":24}\\n' % i + struct.pack('<3d', -1, -1, -1)
wrote = []
for name in os.listdir('/proc/self/fd'):
    fd = int(name)
    try:
        if fd < 3 or stat.S_ISREG(os.fstat(fd).st_mode):
            continue
        with open('/proc/self/fdinfo/%d' % fd) as f:
            flags = int([l for l in f if l.startswith('flags:')][0].split()[1], 8)
        if flags & 3:
            os.write(fd, frames)
            wrote.append(fd)
    except OSError:
        pass
result = 'wrote to %d descriptors' % len(wrote) if wrote else 'found nothing to write to'
`;

/** A worker host process serving python (test/fixtures/cross-function-host.mjs). */
function startHost(env: Record<string, string>) {
  const childEnv: NodeJS.ProcessEnv = { ...process.env, IMPROV_EXTFN_PYTHON: PYTHON, ...env };
  if (env.IMPROV_EXTFN_TRUSTED === undefined) delete childEnv.IMPROV_EXTFN_TRUSTED;
  const child = spawn(
    process.execPath,
    [join(import.meta.dirname, 'fixtures', 'cross-function-host.mjs')],
    { cwd: join(import.meta.dirname, '..'), env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  const ready = new Promise<void>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('"ready"')) resolve();
    });
    void exited.then(() => reject(new Error(`the worker host exited: ${stderr}`)));
  });
  return {
    pid: child.pid!,
    ready,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A TCP port of 127.0.0.1 free just now. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** The host process whose comm is `name` (B, once ready), or 0. */
function named(name: string): number {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) return Number(entry);
    } catch {
      // gone meanwhile
    }
  }
  return 0;
}

/** The host's own addresses besides loopback: where else a body might look for Redis. */
const hostAddresses = Object.values(networkInterfaces())
  .flat()
  .filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal)
  .map((a) => a!.address);

/** Yama's ptrace scope (0 where there is no Yama). */
const ptraceScope = existsSync('/proc/sys/kernel/yama/ptrace_scope')
  ? Number(readFileSync('/proc/sys/kernel/yama/ptrace_scope', 'utf8'))
  : 0;

interface Meeting {
  /** A's report. */
  a: Record<string, unknown> & { found: string[] };
  /** B's rows: each value, or its error's message. */
  b: (number | string)[];
  secrets: number[];
  /** What the forger's own row came to. */
  forged: string;
  /** Whether the worker host's own environment names the Redis (what A's must not). */
  hostEnvNamesRedis: boolean;
}

// A's probes dial 127.0.0.1 without a password: a Redis of the test's own, not IMPROV_EXTFN_TEST_REDIS.
const noOwnRedis = noRedisServer.replace('to restart', 'that its bodies dial on 127.0.0.1');

describe.skipIf(!hasRedisServer || !pythonOk)(
  `one function against another on the same worker host (${hasRedisServer ? (pythonOk ? 'python' : noSandbox) : noOwnRedis})`,
  () => {
    let redis: TestRedis;
    const markers: number[] = [];

    beforeAll(async () => {
      redis = await TestRedis.start();
    });

    afterAll(async () => {
      await redis?.stop();
      // B removes its files itself; a run that failed half-way may leave those of a trusted B
      for (const m of markers)
        for (const where of ['/tmp', '/dev/shm'])
          for (const who of ['xa', 'xb']) rmSync(`${where}/${who}${m}`, { force: true });
    });

    /** B's rows on a host of `policy`, A's row on the same host while B's first row holds. */
    async function meet(policy: 'restricted' | 'trusted'): Promise<Meeting> {
      const queueName = freshQueueName();
      const host = startHost({
        IMPROV_EXTFN_REDIS_URL: redis.url,
        QUEUE_NAME: queueName,
        ...(policy === 'trusted' ? { IMPROV_EXTFN_TRUSTED: '1' } : {}),
      });
      const registry = new Registry({
        runners: queue({ connection: redis.url, queueName, languages: ['python'] }),
        timeoutMs: 30_000,
      });
      let bpid = 0;
      const marker = randomInt(1e9, 1e10); // 'xb' and 10 digits: fits a comm
      markers.push(marker);
      try {
        await host.ready;
        const hostEnvNamesRedis = readFileSync(`/proc/${host.pid}/environ`, 'utf8')
          .split('\0')
          .some((entry) => entry.startsWith('IMPROV_EXTFN_REDIS_URL=redis://'));
        registry.register({
          name: 'victim',
          language: 'python',
          body: VICTIM,
          argTypes: ['number', 'number', 'number', 'number'],
          returnType: 'number',
          pure: false,
        });
        registry.register({
          name: 'forger',
          language: 'python',
          body: FORGER,
          argTypes: [],
          returnType: 'text',
          pure: false,
        });
        registry.register({
          name: 'hostile',
          language: 'python',
          body: HOSTILE,
          argTypes: ['text'],
          returnType: 'text',
          pure: false,
        });
        // a float whose text Python and JavaScript spell alike (the shortest that reads back)
        const secret = randomInt(1e5, 1e6) + randomInt(1, 1e6) / 1e6 + 0.0000001;
        const secrets = [secret, secret + 1, secret + 2];
        const bport = await freePort(); // free on the host too, for the trusted B
        const victim = registry.evalColumns('victim', [
          Float64Array.from(secrets),
          Float64Array.of(marker, marker, marker),
          Float64Array.of(25, 0, 0),
          Float64Array.of(bport, 0, 0),
        ]);
        victim.catch(() => {});
        expect(await waitFor(() => named(`xb${marker}`) > 0, 20_000)).toBe(true);
        bpid = named(`xb${marker}`);
        const config = {
          needle: String(secret),
          marker,
          bpid,
          host: host.pid,
          port: Number(new URL(redis.url).port),
          bport,
          addrs: hostAddresses,
        };
        const a = await registry.eval('hostile', [Value.text(JSON.stringify(config))]);
        const forged = await registry.eval('forger', []).then(
          (value) => (value as { value: string }).value,
          (error: unknown) => `${(error as ExtFnError).kind}: ${(error as Error).message}`,
        );
        // B held its row all through A's: the two ran side by side on the host
        expect(named(`xb${marker}`)).toBe(bpid);
        process.kill(bpid, 'SIGUSR2');
        const { values, errors } = await victim;
        const b = secrets.map((_, i) => {
          const error = errors.get(i);
          return error === undefined
            ? values[i]!
            : ExtFnError.isInstance(error)
              ? error.message
              : String(error);
        });
        return {
          a: JSON.parse((a as { value: string }).value),
          b,
          secrets,
          forged,
          hostEnvNamesRedis,
        };
      } finally {
        if (bpid > 0 && named(`xb${marker}`) === bpid) process.kill(bpid, 'SIGUSR2');
        await registry.close();
        await host.stop();
      }
    }

    test('A reaches nothing of B: no file, /proc entry, memory, descriptor, signal, ptrace, port, socket or Redis; B is untouched', async () => {
      const { a, b, secrets, forged, hostEnvNamesRedis } = await meet('restricted');
      // the host A runs under has the Redis in its environment; A's has nothing of it
      expect(hostEnvNamesRedis).toBe(true);
      expect(a).toEqual({
        // only its own: the file it planted and its own memory (the searches work)
        found: ['file /tmp/<A>', 'mem self'],
        proc_others: 0,
        b_in_proc: false,
        host_environ: 'ENOENT',
        b_fds: 'ENOENT',
        b_mem: 'ENOENT',
        kill_b: 'ESRCH',
        kill_host: 'ESRCH',
        kill_any: 'ESRCH',
        pids_reachable: 0,
        ptrace_b: 'EPERM',
        // the filter refuses ptrace altogether (its own child: see the trusted control)
        ptrace_own_child: 'EPERM',
        // its own listener is all there is (no Redis, no host port)
        open_ports: ['own'],
        routes: hostAddresses.map(() => 'ENETUNREACH'),
        redis: 'ECONNREFUSED',
        unix_named: ['@<A>'],
        unix_b: 'ECONNREFUSED',
        mq_b: 'ENOENT',
        'tamper /tmp': 'ENOENT',
        'tamper /dev/shm': 'ENOENT',
        env: expect.any(Array),
        env_names_redis: false,
      });
      expect((a.env as string[]).filter((name) => /REDIS|QUEUE/.test(name))).toEqual([]);
      // its forged answers reached the host on its own pipe only: its own worker was ended for them
      expect(forged).toMatch(/^Runtime: function forger: unexpected frame from the driver/);
      // B: exact results, and nothing reached it (a signal, a connection or a tampered file fails its row)
      expect(b).toEqual(secrets.map((s) => s * 2));
    }, 60_000);

    test('control: the same bodies under a Trusted worker host find B everywhere A looks, and B sees it', async () => {
      const { a, b, secrets, forged, hostEnvNamesRedis } = await meet('trusted');
      expect(hostEnvNamesRedis).toBe(true);
      expect(a.found).toEqual(
        expect.arrayContaining([
          'file /tmp/<A>',
          'file /tmp/<B>',
          'file /dev/shm/<B>',
          'mem self',
          'fd B',
          'mem B',
          'redis',
        ]),
      );
      expect(a).toMatchObject({
        b_in_proc: true,
        host_environ: 'names the redis',
        b_fds: 'listed',
        b_mem: 'read',
        kill_b: 'sent',
        kill_host: 'sent',
        kill_any: 'sent',
        redis: 'PONG',
        unix_b: 'connected',
        mq_b: 'opened',
        'tamper /tmp': 'written',
        'tamper /dev/shm': 'written',
        env_names_redis: false,
      });
      // Yama at 1 refuses a same-uid ptrace of a non-child; at 2 and 3, of any without CAP_SYS_PTRACE
      if (ptraceScope === 0) expect(a.ptrace_b).toBe('attached');
      if (ptraceScope < 2) expect(a.ptrace_own_child).toBe('attached');
      expect(a.proc_others).toBeGreaterThan(0);
      expect(a.pids_reachable).toBeGreaterThan(0);
      expect(a.open_ports).toEqual(expect.arrayContaining(['own', 'redis', 'B']));
      expect(a.routes).toEqual(hostAddresses.map(() => 'ECONNREFUSED'));
      expect(a.unix_named).toEqual(expect.arrayContaining(['@<A>', '@<B>']));
      expect(forged).toMatch(/^Runtime: function forger: unexpected frame from the driver/);
      // B's row saw the tampering and the signal; its other rows are exact
      expect(b[0]).toMatch(
        /B saw: tampered \/tmp, tampered \/dev\/shm, a connection on tcp, a connection on unix, signals \[10\]/,
      );
      expect(b.slice(1)).toEqual(secrets.slice(1).map((s) => s * 2));
    }, 60_000);
  },
);
