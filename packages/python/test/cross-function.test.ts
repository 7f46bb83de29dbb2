/**
 * One function's body against another function's worker, both alive at once
 * (A holds its ground while B's worker starts and its row runs), in trees, in
 * workers forked from the zygote and in spares, under the default `restricted`
 * policy: A sets up every meeting point it can (files in /tmp and /dev/shm, an
 * abstract unix socket, a TCP listener on 127.0.0.1, SysV IPC (refused by the
 * filter), a POSIX message queue, flock and lockf on every module file and
 * library both map, an inotify watch) and counts the signals that reach it; B
 * signals every pid it can name and A's host pid, looks for A in /proc and for
 * each meeting point and for other workers' descriptors (a shared file), and
 * must start and answer despite A's locks. What still meets: advisory locks
 * and inotify on the shared read-only files (a covert channel between bodies,
 * not a harm: nothing of ours takes a lock). Restricted sandbox, /usr/bin/python3.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { Value } from '@improv/extfn-core';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { closeIdleZygotes } from '../src/index.js';
import { noRestricted, restrictedOk, scopedRegistry, waitFor } from './helpers.js';

const saved = process.env.IMPROV_EXTFN_ZYGOTE;
afterEach(() => {
  if (saved === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
  else process.env.IMPROV_EXTFN_ZYGOTE = saved;
});
beforeEach(() => closeIdleZygotes());

const T = (body: string, argTypes: string[] = []) => [body, argTypes, 'text'] as const;

/** Shared by both bodies: libc, errno names, the files both can open. */
const PRELUDE = `
import ctypes, errno, fcntl, json, os, signal, socket, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def err(e):
    return errno.errorcode.get(e.errno if isinstance(e, OSError) else e, str(e))
def cerr():
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
marker, port, key = args[0], int(args[1]), int(args[2])
IPC_CREAT, O_CREAT, O_RDWR = 0o1000, 0o100, 2
libc.mq_open.restype = ctypes.c_int
# read-only files every python worker opens or can open: the stdlib, the interpreter, the driver
# (the driver itself comes as -c source, no file): every module file loaded and every file mapped
shared = {os.path.realpath(m.__file__) for m in list(sys.modules.values()) if getattr(m, '__file__', None)}
with open('/proc/self/maps') as f:
    shared |= {line.split()[-1] for line in f if line.split()[-1].startswith('/')}
shared = sorted(p for p in shared if os.path.isfile(p))
`;

/** A: every meeting point it can set up, then a wait while B's row runs, then what reached it. */
const HOLDER = T(
  `${PRELUDE}
out, got = {}, []
# its own shared file, if any, at fd 3 (before the body opens anything)
import stat
try:
    st = os.fstat(3)
    out['fd3'] = 'own shared file' if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 else os.readlink('/proc/self/fd/3')
except OSError as e:
    out['fd3'] = err(e)
for s in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, lambda n, f: got.append(n))
for where in ('/tmp', '/dev/shm'):
    try:
        with open(where + '/' + marker, 'w') as f:
            f.write('from A')
        out[where] = 'written'
    except OSError as e:
        out[where] = err(e)
try:
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind('\\0' + marker)
    unix.listen(8)
    unix.setblocking(False)
    out['abstract'] = 'listening'
except OSError as e:
    unix, out['abstract'] = None, err(e)
try:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(('127.0.0.1', port))
    tcp.listen(8)
    tcp.setblocking(False)
    out['tcp'] = 'listening'
except OSError as e:
    tcp, out['tcp'] = None, err(e)
msg = libc.msgget(key, IPC_CREAT | 0o666)
out['msgget'] = 'ok' if msg >= 0 else cerr()
shm = libc.shmget(key, 4096, IPC_CREAT | 0o666)
out['shmget'] = 'ok' if shm >= 0 else cerr()
sem = libc.semget(key, 1, IPC_CREAT | 0o666)
out['semget'] = 'ok' if sem >= 0 else cerr()
mq = libc.mq_open(('/' + marker).encode(), O_CREAT | O_RDWR, 0o666, None)
out['mq_open'] = 'ok' if mq >= 0 else cerr()
held, locks = [], {}
for path in shared:
    try:
        fd = os.open(path, os.O_RDONLY)
        held.append(fd)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a read lock: all a read-only file allows
        locks[path] = 'flock+lockf'
    except OSError as e:
        locks[path] = err(e)
out['locks'] = sorted(set(locks.values()))
out['locked'] = len(locks)
IN_OPEN, IN_ACCESS = 0x20, 0x1
ino = libc.inotify_init1(os.O_NONBLOCK)
watched = ino >= 0 and libc.inotify_add_watch(ino, os.path.dirname(os.__file__).encode(), IN_OPEN | IN_ACCESS) >= 0
out['inotify'] = 'watching' if watched else cerr()
if watched:
    while True:  # what A itself caused so far
        try:
            os.read(ino, 65536)
        except BlockingIOError:
            break
# ready: the host sees this name in /proc and runs B's row now
libc.prctl(15, ctypes.c_char_p(marker.encode()), 0, 0, 0)
deadline = time.monotonic() + float(args[3])
while time.monotonic() < deadline:
    time.sleep(0.05)
events = 0
if watched:
    while True:
        try:
            events += len(os.read(ino, 65536))
        except BlockingIOError:
            break
out['inotify_saw_b'] = events > 0
# B's shared file (at B's fd 3, in the host's /dev/shm): not anywhere A can look
out['shm_entries'] = os.listdir('/dev/shm')
me, fds = os.getpid(), 0
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != me:
        try:
            fds += len(os.listdir('/proc/%s/fd' % p))
        except OSError:
            pass
out['others_fds'] = fds
out['signals'] = got
def accepted(s):
    try:
        s.accept()
        return 'connected'
    except BlockingIOError:
        return 'nobody'
out['abstract_after'] = accepted(unix) if unix else None
out['tcp_after'] = accepted(tcp) if tcp else None
with open('/tmp/' + marker) as f:
    out['tmp_after'] = f.read()
result = json.dumps(out, sort_keys=True)
`,
  ['text', 'number', 'number', 'number'],
);

/** B: A's host pid, every pid it can name, A in /proc, each of A's meeting points. */
const PROBER = T(
  `${PRELUDE}
t0 = time.monotonic()
out, me = {}, os.getpid()
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
try:
    os.kill(-1, signal.SIGUSR1)
    out['kill_all'] = 'ok'
except OSError as e:
    out['kill_all'] = err(e)
alive = []
for pid in range(1, 32769):
    try:
        os.kill(pid, 0)
        alive.append(pid)
    except OSError:
        pass
out['pids_alive'] = [p if p != me else 'self' for p in alive]
for pid in alive:  # whatever it can name, it signals
    if pid != me:
        os.kill(pid, signal.SIGUSR1)
try:
    os.kill(int(args[3]), signal.SIGUSR1)
    out['kill_host_pid'] = 'ok'
except OSError as e:
    out['kill_host_pid'] = err(e)
procs = [p for p in os.listdir('/proc') if p.isdigit()]
out['proc'] = ['self' if int(p) == me else p for p in sorted(procs, key=int)]
names = []
for p in procs:
    try:
        with open('/proc/%s/comm' % p) as f:
            names.append(f.read().strip())
    except OSError:
        pass
out['marker_in_proc'] = marker in names
out['tmp'] = os.path.exists('/tmp/' + marker)
out['shm'] = os.path.exists('/dev/shm/' + marker)
others = []
for where in ('/tmp', '/dev/shm'):
    try:
        others += [where + '/' + n for n in os.listdir(where)]
    except OSError as e:
        others.append(where + ':' + err(e))
out['tmp_entries'] = others
try:
    with open('/tmp/' + marker, 'w') as f:
        f.write('from B')
except OSError:
    pass
def dial(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(address)
        return 'connected'
    except OSError as e:
        return err(e) if e.errno else type(e).__name__
    finally:
        s.close()
out['abstract'] = dial(socket.AF_UNIX, '\\0' + marker)
out['tcp'] = dial(socket.AF_INET, ('127.0.0.1', port))
out['msgget'] = 'found' if libc.msgget(key, 0) >= 0 else cerr()
out['shmget'] = 'found' if libc.shmget(key, 0, 0) >= 0 else cerr()
out['semget'] = 'found' if libc.semget(key, 0, 0) >= 0 else cerr()
out['mq_open'] = 'found' if libc.mq_open(('/' + marker).encode(), O_RDWR, 0, None) >= 0 else cerr()
# other workers' descriptors (the shared file at 3 above all), through any /proc entry not its own
fds = []
for p in procs:
    if int(p) == me:
        continue
    try:
        fds += os.listdir('/proc/%s/fd' % p)
    except OSError:
        pass
out['others_fds'] = len(fds)
try:
    out['zygote_dir'] = os.listdir('/run/extfn-zygote')
except OSError as e:
    out['zygote_dir'] = err(e)
# A's locks: seen (a covert channel), and never waited on
seen = set()
for path in shared:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        seen.add('flock free')
    except OSError as e:
        seen.add('flock ' + err(e))
    try:  # a POSIX write lock needs a writable descriptor: a read lock beside A's, then A's seen
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        seen.add('lockf shared')
    except OSError as e:
        seen.add('lockf ' + err(e))
    os.close(fd)
out['locks'] = sorted(seen)
out['seconds'] = round(time.monotonic() - t0, 1)
result = json.dumps(out, sort_keys=True)
`,
  ['text', 'number', 'number', 'number'],
);

const FNS = {
  warm: T('result = "warm"'),
  warm2: T('result = "warm2"'),
  holder: HOLDER,
  prober: PROBER,
};

type Scoped = ReturnType<typeof scopedRegistry>;
type From = 'tree' | 'zygote' | 'spare';

/** A registry whose next starts are trees, forks from the zygote, or spares (forked ahead). */
async function workers(from: From): Promise<Scoped> {
  if (from === 'tree') process.env.IMPROV_EXTFN_ZYGOTE = '0';
  else delete process.env.IMPROV_EXTFN_ZYGOTE;
  const scoped = scopedRegistry('restricted', FNS as never, { maxWorkers: 2 });
  // two starts at once: they boot the zygote, and two spares are wanted after them
  await Promise.all([scoped.registry.eval('warm', []), scoped.registry.eval('warm2', [])]);
  if (from === 'tree') expect(scoped.runner.stats().zygoteStarts).toBe(0);
  else expect(scoped.runner.stats().zygote).toMatch(/^ready \(pid \d+\)$/);
  if (from === 'spare')
    expect(await waitFor(() => scoped.runner.stats().spares === 2, 15_000)).toBe(true);
  return scoped;
}

/** Whether a host process has `name` as its comm (A's sign that it is ready). */
function named(name: string): boolean {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === name) return true;
    } catch {
      // gone meanwhile
    }
  }
  return false;
}

const parsed = (value: Value) => JSON.parse((value as { type: string; value: string }).value);

describe.skipIf(!restrictedOk)(
  `one function against another ${restrictedOk ? '' : noRestricted}`,
  () => {
    describe.each(['tree', 'zygote', 'spare'] as const)(
      'each in a worker of its own: %s',
      (from) => {
        test('A meets B nowhere: no signal, pid, /proc entry, file, socket, queue or descriptor; its locks stall nothing', async () => {
          const scoped = await workers(from);
          const marker = `xf${randomBytes(5).toString('hex')}`; // 12 characters: fits a comm
          const port = 20_000 + (randomBytes(2).readUInt16BE() % 40_000);
          const key = 1 + randomBytes(3).readUIntBE(0, 3);
          const stats = scoped.runner.stats();
          const before = new Set(scoped.runner.workerPids());
          const holding = scoped.registry
            .eval('holder', [
              Value.text(marker),
              Value.number(port),
              Value.number(key),
              // long enough for B's start and row on a loaded host: the lock below shows B ran inside it
              Value.number(8),
            ])
            .catch((error: unknown) => Value.text(JSON.stringify({ error: String(error) })));
          // A has set everything up (it names itself last), and waits while B starts and runs
          expect(await waitFor(() => named(marker), 10_000)).toBe(true);
          const aPid = scoped.runner.workerPids().find((pid) => !before.has(pid)) ?? 0;
          expect(aPid).toBeGreaterThan(0);
          const b = parsed(
            await scoped.registry.eval('prober', [
              Value.text(marker),
              Value.number(port),
              Value.number(key),
              Value.number(aPid),
            ]),
          );
          const a = parsed(await holding);
          const after = scoped.runner.stats();
          expect(after.zygoteStarts ?? 0).toBe(from === 'tree' ? 0 : (stats.zygoteStarts ?? 0) + 2);
          if (from === 'spare') expect(after.spareStarts).toBe((stats.spareStarts ?? 0) + 2);
          // A's side: each meeting point was really there (SysV IPC: refused by the filter)
          expect(a).toEqual({
            '/tmp': 'written',
            '/dev/shm': 'written',
            abstract: 'listening',
            tcp: 'listening',
            mq_open: 'ok',
            msgget: 'ENOSYS',
            shmget: 'ENOSYS',
            semget: 'ENOSYS',
            locks: ['flock+lockf'],
            locked: expect.any(Number),
            inotify: 'watching',
            // a covert channel, not a harm: B's opens of the shared stdlib reach A's watch
            inotify_saw_b: expect.any(Boolean),
            // what reached A while B ran: nothing
            signals: [],
            abstract_after: 'nobody',
            tcp_after: 'nobody',
            tmp_after: 'from A',
            // its own: a fork's shared file; a tree's fd 3 is a socket of its own chain
            fd3: from === 'tree' ? expect.stringMatching(/^socket:/) : 'own shared file',
            shm_entries: [marker],
            others_fds: 0,
          });
          expect(a.locked).toBeGreaterThan(10);
          // B's side: only itself, and none of A's meeting points
          expect(b).toEqual({
            kill_all: 'ESRCH',
            pids_alive: ['self'],
            kill_host_pid: 'ESRCH',
            proc: ['self'],
            marker_in_proc: false,
            tmp: false,
            shm: false,
            tmp_entries: [],
            abstract: 'ECONNREFUSED',
            tcp: 'ECONNREFUSED',
            msgget: 'ENOSYS',
            shmget: 'ENOSYS',
            semget: 'ENOSYS',
            mq_open: 'ENOENT',
            others_fds: 0,
            // a tree has no zygote directory; a fork's is covered
            zygote_dir: from === 'tree' ? 'ENOENT' : 'EACCES',
            // A's locks are there (the same files: a covert channel), and B started and ran beside
            // them: had anything of ours waited on one of them, B would have run only after A let go
            locks: ['flock EAGAIN', 'lockf shared'],
            seconds: expect.any(Number),
          });
        }, 60_000);
      },
    );
  },
);
