/**
 * Escapes attempted for real by a guest Python (files, /etc, namespaces,
 * network, environment, identity, seccomp, fail-closed), under
 * `restricted` (bubblewrap + seccomp + uid + rlimits) and `unsandboxed`
 * (uid + rlimits, no namespaces), with `trusted` as the control that shows the
 * attempt works when nothing stops it (so a broken probe cannot pass a test).
 */

import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ETC_ENTRIES, launchSandboxed, type SandboxPolicy } from '../src/index.js';
import { hasBwrap, hasPython, isRoot, linux, PYTHON, pythonJson } from './helpers.js';

const id = randomBytes(6).toString('hex');
const secret = `s3cr3t-${id}`;
const tmpMarker = `/tmp/extfn-marker-${id}`;
const tmpMarkerPrivate = `/tmp/extfn-marker-private-${id}`;
const cwdMarker = join(process.cwd(), `.extfn-marker-${id}`);
const homeMarker = join(homedir(), `.extfn-marker-${id}`);
// /srv and /var/tmp: host directories an interpreter never needs; /mnt is only listed
const varTmpMarker = `/var/tmp/extfn-marker-${id}`;
const srvMarker = `/srv/extfn-marker-${id}`;
const sharedMarkers = [varTmpMarker, ...(isRoot && existsSync('/srv') ? [srvMarker] : [])];
let server: Server;
let port = 0;
let accepted = 0;

beforeAll(async () => {
  process.env.IMPROV_TEST_SECRET = secret;
  process.env.AWS_SECRET_ACCESS_KEY = secret;
  writeFileSync(tmpMarker, 'tmp-marker', { mode: 0o644 });
  chmodSync(tmpMarker, 0o644);
  writeFileSync(tmpMarkerPrivate, 'private-marker', { mode: 0o600 });
  writeFileSync(cwdMarker, 'cwd-marker', { mode: 0o644 });
  chmodSync(cwdMarker, 0o644);
  writeFileSync(homeMarker, 'home-marker', { mode: 0o600 });
  for (const path of sharedMarkers) {
    writeFileSync(path, 'shared-marker', { mode: 0o644 });
    chmodSync(path, 0o644);
  }
  server = createServer((socket) => {
    accepted++;
    socket.end('hello');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
});

afterAll(async () => {
  delete process.env.IMPROV_TEST_SECRET;
  delete process.env.AWS_SECRET_ACCESS_KEY;
  for (const path of [tmpMarker, tmpMarkerPrivate, cwdMarker, homeMarker, ...sharedMarkers])
    rmSync(path, { force: true });
  for (const name of ['tmp', 'shm'])
    rmSync(`/${name === 'tmp' ? 'tmp' : 'dev/shm'}/extfn-prev-${id}`, { force: true });
  await new Promise((resolve) => server.close(resolve));
});

type Outcome = Record<string, unknown>;

/** Whether a user other than the owner can traverse to and read `path`. */
function othersCanRead(path: string): boolean {
  if ((statSync(path).mode & 0o004) === 0) return false;
  for (let dir = dirname(path); ; dir = dirname(dir)) {
    if ((statSync(dir).mode & 0o001) === 0) return false;
    if (dir === '/') return true;
  }
}
const READS = `print(json.dumps({
  'tmp': attempt(lambda: read(${JSON.stringify(tmpMarker)})),
  'tmpPrivate': attempt(lambda: read(${JSON.stringify(tmpMarkerPrivate)})),
  'cwd': attempt(lambda: read(${JSON.stringify(cwdMarker)})),
  'home': attempt(lambda: read(${JSON.stringify(homeMarker)})),
  'listHome': attempt(lambda: sorted(os.listdir('/home'))),
  'listRoot': attempt(lambda: len(os.listdir('/root')) >= 0),
}))`;

/** Writes outside /tmp: never run under trusted (as root they would succeed on the host). */
const WRITES = `
def write(path):
    with open(path, 'w') as f:
        f.write('x')
print(json.dumps({
  'usr': attempt(lambda: write('/usr/extfn-write-${id}')),
  'rootfs': attempt(lambda: write('/extfn-write-${id}')),
  'dev': attempt(lambda: write('/dev/extfn-write-${id}')),
  'devNull': attempt(lambda: write('/dev/null')),
}))`;

const canRestricted = linux && hasBwrap && hasPython;
const canUnsandboxed = linux && isRoot && hasPython;

describe('files of the host', () => {
  test.skipIf(!canUnsandboxed)('control: trusted reads every marker', async () => {
    const out = await pythonJson<Outcome>(READS, 'trusted');
    expect(out.tmp).toEqual({ ok: 'tmp-marker' });
    expect(out.tmpPrivate).toEqual({ ok: 'private-marker' });
    expect(out.cwd).toEqual({ ok: 'cwd-marker' });
    expect(out.home).toEqual({ ok: 'home-marker' });
    expect(out.listRoot).toEqual({ ok: true });
  });

  test.skipIf(!canRestricted)(
    'restricted: host /tmp, cwd, $HOME, /home, /root invisible; /usr read-only',
    async () => {
      const out = await pythonJson<Outcome>(READS, 'restricted');
      expect(out).toEqual({
        tmp: { errno: 'ENOENT' },
        tmpPrivate: { errno: 'ENOENT' },
        cwd: { errno: 'ENOENT' },
        home: { errno: 'ENOENT' },
        listHome: { ok: [] }, // there, and empty, as programs that look expect
        listRoot: { errno: 'ENOENT' },
      });
      // / and /dev are bwrap's own tmpfs, unbounded: read-only, or a body could fill memory
      expect(await pythonJson<Outcome>(WRITES, 'restricted')).toEqual({
        usr: { errno: 'EROFS' },
        rootfs: { errno: 'EROFS' },
        dev: { errno: 'EROFS' },
        devNull: { ok: null },
      });
    },
  );

  test.skipIf(!canUnsandboxed)(
    'unsandboxed: the uid drop guards private files, shared ones stay visible',
    async () => {
      const out = await pythonJson<Outcome>(READS, 'unsandboxed');
      expect(out).toEqual({
        tmp: { ok: 'tmp-marker' }, // no namespaces: what every user may read stays readable
        tmpPrivate: { errno: 'EACCES' },
        // the checkout may sit where others cannot reach it; then the uid drop guards it too
        cwd: othersCanRead(cwdMarker) ? { ok: 'cwd-marker' } : { errno: 'EACCES' },
        home: { errno: 'EACCES' },
        listHome: existsSync('/home') ? { ok: readdirSync('/home').sort() } : { errno: 'ENOENT' },
        listRoot: { errno: 'EACCES' },
      });
      expect(await pythonJson<Outcome>(WRITES, 'unsandboxed')).toEqual({
        usr: { errno: 'EACCES' },
        rootfs: { errno: 'EACCES' },
        dev: { errno: 'EACCES' },
        devNull: { ok: null },
      });
    },
  );
});

/** A world-readable file of the host's /etc that no interpreter needs (not in ETC_ENTRIES). */
const etcOther = readdirSync('/etc')
  .filter((name) => !(ETC_ENTRIES as readonly string[]).includes(name))
  .map((name) => `/etc/${name}`)
  .find((path) => {
    try {
      const stat = statSync(path);
      return stat.isFile() && (stat.mode & 0o004) !== 0 && readFileSync(path).length > 0;
    } catch {
      return false;
    }
  });

describe('/etc of the host', () => {
  const program = `print(json.dumps({
  'other': attempt(lambda: len(read(${JSON.stringify(etcOther)})) > 0),
  'passwd': attempt(lambda: 'root:' in read('/etc/passwd')),
  'shadow': attempt(lambda: len(read('/etc/shadow')) >= 0),
}))`;
  test.skipIf(!canRestricted || !etcOther)(
    `restricted: only what interpreters need (${etcOther} is not there)`,
    async () => {
      expect(await pythonJson<Outcome>(program, 'restricted')).toEqual({
        other: { errno: 'ENOENT' },
        passwd: { ok: true },
        shadow: { errno: 'ENOENT' },
      });
    },
  );

  test.skipIf(!linux || !hasPython || !etcOther)('control: trusted reads it', async () => {
    const out = await pythonJson<Outcome>(program, 'trusted');
    expect(out.other).toEqual({ ok: true });
  });
});

/**
 * A file under /etc that this user reads only through a supplementary group
 * (a non-root host carries its groups into the user namespace). CI creates
 * one for its unprivileged user; elsewhere there may be none.
 */
const groups = new Set(process.getgroups?.() ?? []);
const etcByGroup = readdirSync('/etc')
  .map((name) => `/etc/${name}`)
  .find((path) => {
    try {
      const stat = statSync(path);
      return (
        stat.isFile() &&
        (stat.mode & 0o004) === 0 &&
        (stat.mode & 0o040) !== 0 &&
        groups.has(stat.gid) &&
        stat.gid !== process.getgid?.() &&
        stat.uid !== process.getuid?.()
      );
    } catch {
      return false;
    }
  });

describe('/etc read through a supplementary group (non-root hosts)', () => {
  const program = `print(json.dumps(attempt(lambda: len(read(${JSON.stringify(etcByGroup)})) >= 0)))`;
  test.skipIf(!canRestricted || !etcByGroup)(
    `restricted: not bound, so the group cannot reach it (${etcByGroup ?? 'no such file for this user'})`,
    async () => {
      expect(await pythonJson(program, 'restricted')).toEqual({ errno: 'ENOENT' });
    },
  );
  test.skipIf(!linux || !hasPython || !etcByGroup)('control: trusted reads it', async () => {
    expect(await pythonJson(program, 'trusted')).toEqual({ ok: true });
  });
});

const SHARED_DIRS = `print(json.dumps({
  'varTmp': attempt(lambda: read(${JSON.stringify(varTmpMarker)})),
  'srv': attempt(lambda: read(${JSON.stringify(srvMarker)})),
  'listVarTmp': attempt(lambda: ${JSON.stringify(`extfn-marker-${id}`)} in os.listdir('/var/tmp')),
  'listSrv': attempt(lambda: len(os.listdir('/srv')) >= 0),
  'listMnt': attempt(lambda: len(os.listdir('/mnt')) >= 0),
}))`;

describe('/srv, /mnt and /var/tmp of the host', () => {
  const hostHas = (dir: string) => existsSync(dir);
  test.skipIf(!canUnsandboxed)('control: trusted reads and lists them', async () => {
    const out = await pythonJson<Outcome>(SHARED_DIRS, 'trusted');
    expect(out.varTmp).toEqual({ ok: 'shared-marker' });
    expect(out.listVarTmp).toEqual({ ok: true });
    if (sharedMarkers.includes(srvMarker)) expect(out.srv).toEqual({ ok: 'shared-marker' });
    if (hostHas('/srv')) expect(out.listSrv).toEqual({ ok: true });
    if (hostHas('/mnt')) expect(out.listMnt).toEqual({ ok: true });
  });

  test.skipIf(!canRestricted)('restricted: none of them exists inside', async () => {
    expect(await pythonJson<Outcome>(SHARED_DIRS, 'restricted')).toEqual({
      varTmp: { errno: 'ENOENT' },
      srv: { errno: 'ENOENT' },
      listVarTmp: { errno: 'ENOENT' },
      listSrv: { errno: 'ENOENT' },
      listMnt: { errno: 'ENOENT' },
    });
  });

  test.skipIf(!canUnsandboxed)(
    'unsandboxed: no namespaces, so what every user may read stays readable',
    async () => {
      const out = await pythonJson<Outcome>(SHARED_DIRS, 'unsandboxed');
      expect(out.varTmp).toEqual({ ok: 'shared-marker' });
      expect(out.listVarTmp).toEqual({ ok: true });
    },
  );
});

const NAMESPACES = ['cgroup', 'ipc', 'mnt', 'net', 'pid', 'user', 'uts'] as const;
const NS_LINKS = `print(json.dumps({n: os.readlink('/proc/self/ns/' + n) for n in ${JSON.stringify(NAMESPACES)}}))`;
const hostNamespaces = () =>
  Object.fromEntries(NAMESPACES.map((n) => [n, readlinkSync(`/proc/self/ns/${n}`)]));

/** A guest that creates a SysV shared memory segment and holds it until told to remove it. */
const SHM_GUEST = (key: number) => `
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
shmid = libc.shmget(${key}, 4096, 0o1000 | 0o600)  # IPC_CREAT
print(shmid if shmid >= 0 else -ctypes.get_errno(), flush=True)
sys.stdin.readline()
libc.shmctl(shmid, 0, None)  # IPC_RMID
`;

/** Whether the host's IPC namespace holds a shared memory segment with `key`. */
function hostShmKeys(): Set<number> {
  const lines = readFileSync('/proc/sysvipc/shm', 'utf8').trim().split('\n').slice(1);
  return new Set(lines.map((line) => Number(line.trim().split(/\s+/)[0])));
}

/** Runs SHM_GUEST and reports whether the host saw the segment while the guest held it. */
async function shmSeenByHost(policy: SandboxPolicy): Promise<{ shmid: number; seen: boolean }> {
  const key = 0x3e000000 + Math.floor(Math.random() * 0xffffff);
  const guest = launchSandboxed({
    command: PYTHON,
    args: ['-I', '-S', '-c', SHM_GUEST(key)],
    policy,
    timeoutMs: 10_000,
  });
  try {
    const line = await new Promise<string>((resolve, reject) => {
      let text = '';
      guest.stdout.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        if (text.includes('\n')) resolve(text.trim());
      });
      guest.exited.then(() => reject(new Error(`guest exited: ${guest.stderrTail()}`)), reject);
    });
    const seen = hostShmKeys().has(key);
    guest.stdin.end('\n');
    await guest.exited;
    return { shmid: Number(line), seen };
  } finally {
    await guest.kill();
    if (hostShmKeys().has(key)) execFileSync('ipcrm', ['-M', String(key)]);
  }
}

describe('namespaces', () => {
  test.skipIf(!canUnsandboxed)('control: trusted shares every namespace of the host', async () => {
    expect(await pythonJson(NS_LINKS, 'trusted')).toEqual(hostNamespaces());
  });

  test.skipIf(!canRestricted)(
    'restricted: new cgroup, ipc, mount, net, pid, user and uts namespaces',
    async () => {
      const inside = await pythonJson<Record<string, string>>(NS_LINKS, 'restricted');
      const host = hostNamespaces();
      for (const n of NAMESPACES) expect(inside[n], n).not.toBe(host[n]);
      expect(inside.ipc).toMatch(/^ipc:\[\d+\]$/);
    },
  );

  test.skipIf(!canRestricted || !existsSync('/proc/sysvipc/shm'))(
    'restricted: SysV shared memory is unavailable inside, and the host sees no segment',
    async () => {
      const { shmid, seen } = await shmSeenByHost('restricted');
      expect(shmid).toBe(-38); // ENOSYS from seccomp (memory.test.ts has the greedy attempt)
      expect(seen).toBe(false);
    },
  );

  test.skipIf(!canUnsandboxed || !existsSync('/proc/sysvipc/shm'))(
    'unsandboxed (control): without an IPC namespace the host sees the segment',
    async () => {
      expect(await shmSeenByHost('unsandboxed')).toMatchObject({ seen: true });
    },
  );
});

describe('leftovers of a previous run', () => {
  const write = `
for d in ('/tmp', '/dev/shm'):
    with open(d + '/extfn-prev-${id}', 'w') as f: f.write('left')
print(json.dumps({}))`;
  const look = `print(json.dumps({d: attempt(lambda: read(d + '/extfn-prev-${id}')) for d in ('/tmp', '/dev/shm')}))`;

  test.skipIf(!canRestricted)('restricted: /tmp and /dev/shm are fresh for every run', async () => {
    await pythonJson(write, 'restricted');
    expect(await pythonJson(look, 'restricted')).toEqual({
      '/tmp': { errno: 'ENOENT' },
      '/dev/shm': { errno: 'ENOENT' },
    });
    expect(existsSync(`/tmp/extfn-prev-${id}`)).toBe(false);
  });

  test.skipIf(!canUnsandboxed)('unsandboxed (control): runs share the host /tmp', async () => {
    await pythonJson(write, 'unsandboxed');
    expect(await pythonJson(look, 'unsandboxed')).toEqual({
      '/tmp': { ok: 'left' },
      '/dev/shm': { ok: 'left' },
    });
  });
});

describe('network', () => {
  const connect = () => `
def go():
    s = socket.create_connection(('127.0.0.1', ${port}), timeout=3)
    data = s.recv(16).decode()
    s.close()
    return data
print(json.dumps(attempt(go)))`;

  test.skipIf(!canRestricted)('restricted: the host loopback is unreachable', async () => {
    const before = accepted;
    expect(await pythonJson(connect(), 'restricted')).toEqual({ errno: 'ECONNREFUSED' });
    expect(accepted).toBe(before);
  });

  test.skipIf(!canUnsandboxed)(
    'unsandboxed and trusted (control): the server answers',
    async () => {
      expect(await pythonJson(connect(), 'unsandboxed')).toEqual({ ok: 'hello' });
      expect(await pythonJson(connect(), 'trusted')).toEqual({ ok: 'hello' });
    },
  );
});

describe.each(['restricted', 'unsandboxed', 'trusted'] as const)('environment (%s)', (policy) => {
  const ok = policy === 'restricted' ? canRestricted : linux && hasPython;
  test.skipIf(!ok)('only HOME, PATH, LANG and what the runner asked for; no secret', async () => {
    const env = await pythonJson<Record<string, string>>(
      'print(json.dumps(dict(os.environ)))',
      policy,
      {
        env: { PYTHONHASHSEED: '0' },
      },
    );
    expect(JSON.stringify(env)).not.toContain(secret);
    expect(env).toMatchObject({
      HOME: '/tmp',
      PATH: '/usr/bin:/bin',
      LANG: 'C.UTF-8',
      PYTHONHASHSEED: '0',
    });
    // PWD is set by bwrap's --chdir; the run token marks the tree where no uid can
    const extra = Object.keys(env).filter(
      (key) =>
        !['HOME', 'PATH', 'LANG', 'PYTHONHASHSEED', 'PWD', 'IMPROV_EXTFN_SANDBOX_RUN'].includes(
          key,
        ),
    );
    expect(extra).toEqual([]);
  });
});

const IDENTITY = `
status = read('/proc/self/status')
field = lambda name: [l.split()[1:] for l in status.splitlines() if l.startswith(name + ':')][0]
pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]
fds = sorted(int(f) for f in os.listdir('/proc/self/fd'))
fds = [f for f in fds if os.path.exists('/proc/self/fd/%d' % f)]  # drop listdir's own
print(json.dumps({'uid': os.getuid(), 'gid': os.getgid(), 'capEff': field('CapEff')[0], 'noNewPrivs': field('NoNewPrivs')[0],
  'groups': os.getgroups(), 'pids': pids, 'fds': fds}))`;

describe('identity, processes and descriptors', () => {
  test.skipIf(!canUnsandboxed)(
    'control: trusted runs as the host (root, capabilities)',
    async () => {
      const out = await pythonJson<Outcome>(IDENTITY, 'trusted');
      expect(out.uid).toBe(0);
      expect(out.capEff).not.toBe('0000000000000000');
      expect(out.pids).toContain(process.pid);
      expect(out.fds).toEqual([0, 1, 2]);
    },
  );

  for (const policy of ['restricted', 'unsandboxed'] as const) {
    const ok = policy === 'restricted' ? canRestricted : canUnsandboxed;
    test.skipIf(!ok)(
      `${policy}: unprivileged uid/gid, CapEff 0, no new privileges, fds 0-2 only`,
      async () => {
        const out = await pythonJson<Outcome>(IDENTITY, policy);
        expect(out.uid).not.toBe(0);
        expect(out.gid).not.toBe(0);
        if (isRoot || policy === 'unsandboxed') expect(out.groups).toEqual([]);
        // a non-root host cannot drop its groups (setgroups is denied in an unprivileged
        // user namespace; unmapped ones read as 65534): /etc is bound selectively instead
        else expect(out.groups).toHaveLength(groups.size);
        expect(out.capEff).toBe('0000000000000000');
        expect(out.noNewPrivs).toBe('1');
        expect(out.fds).toEqual([0, 1, 2]);
        if (policy === 'restricted') {
          // a pid namespace: bwrap's init, the guest, nothing of the host
          expect(out.pids).not.toContain(process.pid);
          expect((out.pids as number[]).every((pid) => pid < 10)).toBe(true);
        } else {
          expect(out.pids).toContain(process.pid); // no pid namespace here
        }
      },
    );
  }

  const killHost = (pid: number) =>
    `print(json.dumps(attempt(lambda: os.kill(${pid}, signal.SIGTERM))))`;
  const withVictim = async (run: (pid: number) => Promise<void>) => {
    const victim = spawn('/bin/sleep', ['30'], { stdio: 'ignore' });
    try {
      await run(victim.pid!);
    } finally {
      victim.kill('SIGKILL');
    }
    return victim;
  };

  test.skipIf(!canRestricted)(
    'restricted: a host process cannot be seen or signalled',
    async () => {
      await withVictim(async (pid) => {
        expect(await pythonJson(killHost(pid), 'restricted')).toEqual({ errno: 'ESRCH' });
        expect(existsSync(`/proc/${pid}`)).toBe(true);
      });
    },
  );

  test.skipIf(!canUnsandboxed)(
    'unsandboxed: a host process cannot be signalled (other uid); trusted can (control)',
    async () => {
      await withVictim(async (pid) => {
        expect(await pythonJson(killHost(pid), 'unsandboxed')).toEqual({ errno: 'EPERM' });
        expect(await pythonJson(killHost(pid), 'trusted')).toEqual({ ok: null });
      });
    },
  );
});

const SYSCALLS = `
libc = ctypes.CDLL(None, use_errno=True)
NR = {'x86_64': {'ptrace': 101, 'keyctl': 250, 'unshare': 272, 'setns': 308, 'io_uring_setup': 425, 'perf_event_open': 298},
      'aarch64': {'ptrace': 117, 'keyctl': 219, 'unshare': 97, 'setns': 268, 'io_uring_setup': 425, 'perf_event_open': 241}}[platform.machine()]
def sc(name, *a):
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(x) for x in a])
    return 'ok' if r != -1 else errno.errorcode[ctypes.get_errno()]
out = {
  'ptrace': sc('ptrace', 16, 999999999, 0, 0),      # PTRACE_ATTACH to no one: ESRCH unless denied first
  'keyctl': sc('keyctl', 0, -3, 0),                  # KEYCTL_GET_KEYRING_ID of the session keyring
  'unshare': sc('unshare', 0),                       # succeeds when allowed
  'userns': sc('unshare', 0x10000000),               # CLONE_NEWUSER: a nested user namespace
  'setns': sc('setns', -1, 0),                       # EBADF unless denied first
  'io_uring_setup': sc('io_uring_setup', 1, 0),      # EFAULT unless denied first
  'perf_event_open': sc('perf_event_open', 0, 0, -1, -1, 0),
  'TIOCSTI': 'ok' if libc.ioctl(0, 0x5412, ctypes.c_char_p(b'x')) != -1 else errno.errorcode[ctypes.get_errno()],
  'remount': attempt(lambda: (libc.mount(None, b'/usr', None, 32 | 4096 | 1, None) == -1 and errno.errorcode[ctypes.get_errno()]) or 'ok'),
}
print(json.dumps(out), flush=True)
`;

describe('seccomp', () => {
  test.skipIf(!canRestricted || !['x64', 'arm64'].includes(process.arch))(
    'restricted: ptrace, keyctl, unshare, setns, io_uring, perf, TIOCSTI and remount are denied',
    async () => {
      const out = await pythonJson<Outcome>(SYSCALLS, 'restricted');
      expect(out).toEqual({
        ptrace: 'EPERM',
        keyctl: 'EPERM',
        unshare: 'EPERM',
        userns: 'EPERM',
        setns: 'EPERM',
        io_uring_setup: 'EPERM',
        perf_event_open: 'EPERM',
        TIOCSTI: 'EPERM',
        remount: { ok: 'EPERM' },
      });
    },
  );

  test.skipIf(!canUnsandboxed || process.arch !== 'x64')(
    'control: without the filter the same calls reach the kernel',
    async () => {
      const out = await pythonJson<Outcome>(SYSCALLS, 'unsandboxed');
      expect(out).toMatchObject({
        ptrace: 'ESRCH',
        keyctl: 'ok',
        unshare: 'ok',
        userns: 'ok', // an unprivileged uid may create one where nothing forbids it
        setns: 'EBADF',
        io_uring_setup: 'EFAULT',
        TIOCSTI: 'ENOTTY',
      });
      expect(out.remount).not.toEqual({ ok: 'ok' }); // the uid drop still refuses it
    },
  );

  test.skipIf(!canRestricted || process.arch !== 'x64')(
    'restricted: x32 syscall entry kills the process',
    async () => {
      const program = `libc = ctypes.CDLL(None, use_errno=True)
print('before', flush=True)
r = libc.syscall(ctypes.c_long(0x40000000 | 39))
print('after', r, flush=True)`;
      const { python } = await import('./helpers.js');
      const denied = await python(program, { policy: 'restricted' });
      expect(denied.stdout.toString()).toBe('before\n');
      expect(denied).toMatchObject({ exitCode: null, signal: 'SIGSYS' });
      const control = await python(program, { policy: 'trusted' });
      expect(control.stdout.toString()).toMatch(/^before\nafter /);
    },
  );
});

/**
 * The rest of the list, each called for real so that, without the filter,
 * it reaches the kernel and succeeds (or fails there for another reason):
 * on the guest's own process where it needs one, so no host state is touched.
 */
const MORE_SYSCALLS = `
libc = ctypes.CDLL(None, use_errno=True)
x86 = platform.machine() == 'x86_64'
NR = {'personality': 135 if x86 else 92, 'kcmp': 312 if x86 else 272, 'pidfd_open': 434, 'pidfd_getfd': 438,
      'process_madvise': 440, 'process_vm_readv': 310 if x86 else 270, 'process_vm_writev': 311 if x86 else 271,
      'name_to_handle_at': 303 if x86 else 264, 'open_by_handle_at': 304 if x86 else 265, 'bpf': 321 if x86 else 280,
      'userfaultfd': 323 if x86 else 282, 'add_key': 248 if x86 else 217, 'request_key': 249 if x86 else 218,
      'ioctl': 16 if x86 else 29, 'clone3': 435, 'memfd_create': 319 if x86 else 279, 'io_uring_enter': 426,
      'io_uring_register': 427, 'ptrace': 101 if x86 else 117}
def sc(name, *a):
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(x) for x in a])
    return 'ok' if r != -1 else errno.errorcode[ctypes.get_errno()]
def addr(b):
    return ctypes.addressof(b)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
src, dst = ctypes.create_string_buffer(b'secret', 8), ctypes.create_string_buffer(8)
local, remote = iovec(addr(dst), 6), iovec(addr(src), 6)
pidfd = libc.syscall(ctypes.c_long(NR['pidfd_open']), ctypes.c_long(os.getpid()), ctypes.c_long(0))
handle = ctypes.create_string_buffer(8 + 128)
ctypes.c_uint.from_buffer(handle).value = 128
mount_id = ctypes.c_int()
try:
    pty = os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY)
except PermissionError:  # no pseudo-terminals inside (args.ts): the filter must answer first on any fd
    pty = os.open('/dev/null', os.O_RDWR)
# kept referenced: a buffer freed before the call would turn an answer into ENOENT or EFAULT
usr, user, key, none, byte, ff = (ctypes.create_string_buffer(b) for b in (b'/usr', b'user', b'k', b'extfn-none', b'x', b'\x0c'))
memfd_name = ctypes.create_string_buffer(b'm')
out = {
  'personality?': sc('personality', 0xffffffff),                  # the query: allowed everywhere
  'personality': sc('personality', 0x0040000),                     # ADDR_NO_RANDOMIZE
  'kcmp': sc('kcmp', os.getpid(), os.getpid(), 0, 0, 0),           # KCMP_FILE of fd 0 with itself
  'pidfd_getfd': sc('pidfd_getfd', pidfd, 0, 0),                   # its own fd 0
  'process_madvise': sc('process_madvise', pidfd, 0, 0, 0, 0),     # no ranges
  'process_vm_readv': sc('process_vm_readv', os.getpid(), addr(local), 1, addr(remote), 1, 0),
  'process_vm_writev': sc('process_vm_writev', os.getpid(), addr(remote), 1, addr(local), 1, 0),
  'name_to_handle_at': sc('name_to_handle_at', -100, addr(usr), addr(handle), addr(mount_id), 0),
  'open_by_handle_at': sc('open_by_handle_at', -100, addr(handle), 0),
  'bpf': sc('bpf', 0, 0, 0),                                       # EINVAL/EFAULT unless denied first
  'userfaultfd': sc('userfaultfd', 1),                             # UFFD_USER_MODE_ONLY: any user may
  'add_key': sc('add_key', addr(user), addr(key), 0, 0, 0),
  'request_key': sc('request_key', addr(user), addr(none), 0, 0),
  'io_uring_enter': sc('io_uring_enter', -1, 0, 0, 0, 0, 0),
  'io_uring_register': sc('io_uring_register', -1, 0, 0, 0),
  'ptrace_traceme': sc('ptrace', 0, 0, 0, 0),                       # PTRACE_TRACEME needs no target
  'clone3': sc('clone3', 0, 0),                                    # EFAULT unless unavailable first
  'memfd_create': sc('memfd_create', addr(memfd_name), 0),
  # a fresh pty of its own: TIOCSTI with junk in the high word (the kernel reads 32 bits), TIOCLINUX
  'TIOCSTI_high': sc('ioctl', pty, 0x100005412, addr(byte)),
  'TIOCLINUX': sc('ioctl', pty, 0x541c, addr(ff)),
}
print(json.dumps(out), flush=True)
`;

describe('seccomp: the rest of the list, by real calls', () => {
  const expected = {
    'personality?': 'ok',
    personality: 'EPERM',
    kcmp: 'EPERM',
    pidfd_getfd: 'EPERM',
    process_madvise: 'EPERM',
    process_vm_readv: 'EPERM',
    process_vm_writev: 'EPERM',
    name_to_handle_at: 'EPERM',
    open_by_handle_at: 'EPERM',
    bpf: 'EPERM',
    userfaultfd: 'EPERM',
    add_key: 'EPERM',
    request_key: 'EPERM',
    io_uring_enter: 'EPERM',
    io_uring_register: 'EPERM',
    ptrace_traceme: 'EPERM',
    clone3: 'ENOSYS',
    memfd_create: 'ENOSYS',
    TIOCSTI_high: 'EPERM',
    TIOCLINUX: 'EPERM',
  };
  test.skipIf(!canRestricted || !['x64', 'arm64'].includes(process.arch))(
    'restricted: each is refused before the kernel sees it',
    async () => {
      expect(await pythonJson<Outcome>(MORE_SYSCALLS, 'restricted')).toEqual(expected);
    },
  );

  test.skipIf(!linux || !hasPython || !['x64', 'arm64'].includes(process.arch))(
    'control: trusted (no filter) gets past it on every one',
    async () => {
      const out = await pythonJson<Outcome>(MORE_SYSCALLS, 'trusted');
      // the kernel itself refuses these to a non-root host: open_by_handle_at without
      // CAP_DAC_READ_SEARCH, TIOCSTI without CAP_SYS_ADMIN (dev.tty.legacy_tiocsti=0)
      const kernelRefuses = isRoot ? [] : ['open_by_handle_at', 'TIOCSTI_high'];
      for (const [name, refused] of Object.entries(expected)) {
        if (refused !== 'ok' && !kernelRefuses.includes(name))
          expect(out[name], name).not.toBe(refused);
      }
      // the ones the kernel grants any user on its own process
      expect(out).toMatchObject({
        personality: 'ok',
        kcmp: 'ok',
        pidfd_getfd: 'ok',
        process_vm_readv: 'ok',
        name_to_handle_at: 'ok',
        ptrace_traceme: 'ok',
        memfd_create: 'ok',
      });
    },
  );
});

// A body that holds pseudo-terminals takes them from a pool every devpts
// instance but the host's first shares (kernel.pty.max less kernel.pty.reserve):
// other containers' terminals. Opened until refused, at most 8 (the control
// stays gentle with the host's).
const PTYS = `
import errno, json, os
out, held = {}, []
for name, path in (('ptmx', '/dev/ptmx'), ('pts/ptmx', '/dev/pts/ptmx')):
    try:
        held.append(os.open(path, os.O_RDWR | os.O_NOCTTY))
        out[name] = 'ok'
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
try:
    while len(held) < 8:
        held.extend(os.openpty())
    out['openpty'] = 'ok'
except OSError as e:
    out['openpty'] = errno.errorcode[e.errno]
out['ttys'] = sum(os.isatty(fd) for fd in held)
print(json.dumps(out), flush=True)
`;

describe('pseudo-terminals', () => {
  test.skipIf(!canRestricted)('restricted: none to open, however asked for', async () => {
    expect(await pythonJson<Outcome>(PTYS, 'restricted')).toEqual({
      ptmx: 'EACCES',
      'pts/ptmx': 'EACCES',
      openpty: 'EACCES',
      ttys: 0,
    });
  });

  test.skipIf(!linux || !hasPython || !existsSync('/dev/ptmx'))(
    'control: trusted opens them on the host (skipped where the host has no /dev/ptmx)',
    async () => {
      const out = await pythonJson<Outcome>(PTYS, 'trusted');
      expect(out).toMatchObject({ ptmx: 'ok', openpty: 'ok' });
      expect(out.ttys).toBeGreaterThanOrEqual(8);
    },
  );
});

describe('fail closed', () => {
  test('restricted with no bwrap: Sandbox error with a fix, nothing started', async () => {
    const { python } = await import('./helpers.js');
    const error = await python(`open('/dev/shm/extfn-failclosed-${id}', 'w')`, {
      policy: 'restricted',
      bwrapPath: '/nonexistent/bwrap',
    }).catch((e: unknown) => e);
    expect(ExtFnError.isInstance(error)).toBe(true);
    const sandbox = error as ExtFnError;
    expect(sandbox.kind).toBe('Sandbox');
    expect(sandbox.fix).toMatch(/install bubblewrap/);
    expect(sandbox.fix).not.toMatch(/IMPROV_EXTFN_/); // never advice to weaken the sandbox
    expect(existsSync(`/dev/shm/extfn-failclosed-${id}`)).toBe(false);
  });

  test('launchSandboxed fails closed too once the probe has failed', async () => {
    const { launchSandboxed, probeSandbox } = await import('../src/index.js');
    const probe = await probeSandbox({ policy: 'restricted', bwrapPath: '/nonexistent/bwrap' });
    expect(probe.ok).toBe(false);
    expect(probe.layers.namespaces).toBe(false);
    expect(() =>
      launchSandboxed({
        command: '/bin/sh',
        policy: 'restricted',
        bwrapPath: '/nonexistent/bwrap',
      }),
    ).toThrow(/bubblewrap/);
  });

  test.skipIf(!canUnsandboxed)('the bwrap path does not matter to unsandboxed', async () => {
    const out = await pythonJson('print(json.dumps(os.getuid() != 0))', 'unsandboxed', {
      bwrapPath: '/nonexistent/bwrap',
    });
    expect(out).toBe(true);
  });
});
