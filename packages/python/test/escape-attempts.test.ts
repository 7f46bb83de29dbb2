/**
 * Escapes attempted for real by hostile bodies through the public API
 * (Registry + python runner) under the default `restricted` policy, in a
 * worker of its own tree and in one forked from the shared zygote: kernel
 * surfaces the seccomp program denies, the zygote's directory under its
 * cover, a sibling worker and the zygote by their host pids, kernel memory
 * in empty files, and a daemonized grandchild past the deadline. `trusted`
 * is the control where it makes sense: the same body gets through there.
 * Restricted sandbox, /usr/bin/python3. (The zygote's other attempts:
 * zygote.test.ts; the sandbox's own: packages/sandbox/test/attempts.test.ts.)
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { closeIdleZygotes } from '../src/index.js';
import {
  failure,
  hasPython,
  noRestricted,
  processesWith,
  restrictedOk,
  scopedRegistry,
  waitFor,
} from './helpers.js';

const saved = process.env.IMPROV_EXTFN_ZYGOTE;
afterEach(() => {
  if (saved === undefined) delete process.env.IMPROV_EXTFN_ZYGOTE;
  else process.env.IMPROV_EXTFN_ZYGOTE = saved;
});
beforeEach(() => closeIdleZygotes());

const seccompHere = ['x64', 'arm64'].includes(process.arch);
const T = (body: string, argTypes: string[] = []) => [body, argTypes, 'text'] as const;

/** Every call of the list, on the worker's own process where one is needed; the outcome of each. */
const SYSCALLS = T(`
import ctypes, errno, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
x86 = platform.machine() == 'x86_64'
NR = {'ptrace': 101 if x86 else 117, 'process_vm_readv': 310 if x86 else 270,
      'process_vm_writev': 311 if x86 else 271, 'kcmp': 312 if x86 else 272, 'pidfd_open': 434,
      'pidfd_getfd': 438, 'personality': 135 if x86 else 92, 'name_to_handle_at': 303 if x86 else 264,
      'open_by_handle_at': 304 if x86 else 265, 'bpf': 321 if x86 else 280, 'userfaultfd': 323 if x86 else 282,
      'perf_event_open': 298 if x86 else 241, 'io_uring_setup': 425, 'keyctl': 250 if x86 else 219,
      'add_key': 248 if x86 else 217, 'unshare': 272 if x86 else 97, 'setns': 308 if x86 else 268,
      'mount': 165 if x86 else 40, 'clone': 56 if x86 else 220, 'clone3': 435,
      'memfd_create': 319 if x86 else 279, 'execveat': 322 if x86 else 281, 'ioctl': 16 if x86 else 29}
def sc(name, *a):
    r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(x) for x in a])
    return 'ok' if r != -1 else errno.errorcode[ctypes.get_errno()]
def in_child(name, *a):
    # what would change the worker itself (PTRACE_TRACEME): in a child that exits at once
    pid = os.fork()
    if pid == 0:
        r = libc.syscall(ctypes.c_long(NR[name]), *[ctypes.c_long(x) for x in a])
        os._exit(0 if r != -1 else ctypes.get_errno())
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return 'ok' if code == 0 else errno.errorcode.get(code, str(code))
def addr(b):
    return ctypes.addressof(b)
class iovec(ctypes.Structure):
    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]
me = os.getpid()
src, dst = ctypes.create_string_buffer(b'secret', 8), ctypes.create_string_buffer(8)
local, remote = iovec(addr(dst), 6), iovec(addr(src), 6)
pidfd = libc.syscall(ctypes.c_long(NR['pidfd_open']), ctypes.c_long(me), ctypes.c_long(0))
handle = ctypes.create_string_buffer(8 + 128)
ctypes.c_uint.from_buffer(handle).value = 128
mount_id = ctypes.c_int()
attr = ctypes.create_string_buffer(128)  # perf_event_attr: a software cpu-clock counter of itself
ctypes.c_uint.from_buffer(attr, 0).value = 1
ctypes.c_uint.from_buffer(attr, 4).value = 128
params = ctypes.create_string_buffer(120)  # io_uring_params
names = [ctypes.create_string_buffer(b) for b in (b'/usr', b'user', b'k', b'm', b'', b'x', b'/nonexistent-extfn', b'tmpfs')]
usr, user, key, memfd_name, _, byte, nowhere, tmpfs = names
try:
    pty, ptmx = os.open('/dev/ptmx', os.O_RDWR | os.O_NOCTTY), 'ok'
except PermissionError:  # no pseudo-terminals in a tree: the filter must answer first on any fd
    pty, ptmx = os.open('/dev/null', os.O_RDWR), 'EACCES'
out = {
  'ptrace': in_child('ptrace', 0, 0, 0, 0),  # PTRACE_TRACEME
  'process_vm_readv': sc('process_vm_readv', me, addr(local), 1, addr(remote), 1, 0),
  'process_vm_writev': sc('process_vm_writev', me, addr(remote), 1, addr(local), 1, 0),
  'kcmp': sc('kcmp', me, me, 0, 0, 0),
  'pidfd_getfd': sc('pidfd_getfd', pidfd, 0, 0),
  'personality': sc('personality', 0x0040000),  # ADDR_NO_RANDOMIZE
  'name_to_handle_at': sc('name_to_handle_at', -100, addr(usr), addr(handle), addr(mount_id), 0),
  'open_by_handle_at': sc('open_by_handle_at', -100, addr(handle), 0),
  'bpf': sc('bpf', 0, 0, 0),
  'userfaultfd': sc('userfaultfd', 1),  # UFFD_USER_MODE_ONLY
  'perf_event_open': sc('perf_event_open', addr(attr), 0, -1, -1, 0),
  'io_uring_setup': sc('io_uring_setup', 1, addr(params)),
  'keyctl': sc('keyctl', 0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
  'add_key': sc('add_key', addr(user), addr(key), 0, 0, 0),
  'unshare': sc('unshare', 0),
  'setns': sc('setns', pidfd, 0),
  'mount': sc('mount', addr(tmpfs), addr(nowhere), addr(tmpfs), 0, 0),  # ENOENT for root where allowed
  'clone3': sc('clone3', 0, 0),
  'memfd_create': sc('memfd_create', addr(memfd_name), 0),
  'TIOCSTI': sc('ioctl', pty, 0x5412, addr(byte)),
  'TIOCLINUX': sc('ioctl', pty, 0x541c, addr(byte)),
  'tty': 'ok',
  'ptmx': ptmx,
}
try:
    os.close(os.open('/dev/tty', os.O_RDWR))
except OSError as e:
    out['tty'] = errno.errorcode[e.errno]
# clone with CLONE_NEWUSER, in a child that exits at once where it is let through
pid = libc.syscall(ctypes.c_long(NR['clone']), ctypes.c_long(0x10000000 | 17), *[ctypes.c_long(0)] * 4)
if pid == 0:
    os._exit(0)
out['clone_newuser'] = 'ok' if pid > 0 else errno.errorcode[ctypes.get_errno()]
if pid > 0:
    os.waitpid(pid, 0)
result = json.dumps(out, sort_keys=True)
`);

const REFUSED = {
  ptrace: 'EPERM',
  process_vm_readv: 'EPERM',
  process_vm_writev: 'EPERM',
  kcmp: 'EPERM',
  pidfd_getfd: 'EPERM',
  personality: 'EPERM',
  name_to_handle_at: 'EPERM',
  open_by_handle_at: 'EPERM',
  bpf: 'EPERM',
  userfaultfd: 'EPERM',
  perf_event_open: 'EPERM',
  io_uring_setup: 'EPERM',
  keyctl: 'EPERM',
  add_key: 'EPERM',
  unshare: 'EPERM',
  setns: 'EPERM',
  mount: 'EPERM',
  clone_newuser: 'EPERM',
  clone3: 'ENOSYS',
  memfd_create: 'ENOSYS',
  TIOCSTI: 'EPERM',
  TIOCLINUX: 'EPERM',
  tty: 'ENXIO', // no controlling terminal: bwrap's --new-session, the zygote's own session
  ptmx: 'EACCES', // no pseudo-terminals either (sandbox args.ts)
};

/** The zygote's directory under its cover: owned by the worker's uid, so it tries to open it up. */
const COVER = T(`
import errno, os, socket
d = '/run/extfn-zygote'
out = []
def attempt(what, f):
    try:
        f(); out.append(what + ':ok')
    except OSError as e:
        out.append(what + ':' + errno.errorcode[e.errno])
st = os.stat(d)
out.append('owner:%s mode:%o' % ('self' if st.st_uid == os.getuid() else 'other', st.st_mode & 0o7777))
attempt('chmod', lambda: os.chmod(d, 0o700))
attempt('create', lambda: os.close(os.open(d + '/f', os.O_CREAT | os.O_WRONLY, 0o600)))
attempt('mkdir', lambda: os.mkdir(d + '/x'))
attempt('list', lambda: os.listdir(d))
attempt('filter', lambda: open(d + '/strict.bpf', 'rb').read())
s = socket.socket(socket.AF_UNIX)
attempt('dial', lambda: s.connect(d + '/s'))
result = ' '.join(out)
`);

/** A host pid (the zygote's, a sibling worker's) tried every way a body could reach a process. */
const REACH = T(
  `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
out = []
for pid in (int(args[0]), int(args[1])):
    def attempt(what, f):
        try:
            f(); out.append(what + ':ok')
        except OSError as e:
            out.append(what + ':' + errno.errorcode[e.errno])
    attempt('kill', lambda: os.kill(pid, 0))
    attempt('mem', lambda: open('/proc/%d/mem' % pid, 'rb').close())
    attempt('environ', lambda: open('/proc/%d/environ' % pid, 'rb').read())
    fd = libc.syscall(ctypes.c_long(434), ctypes.c_long(pid), ctypes.c_long(0))  # pidfd_open
    out.append('pidfd:' + ('ok' if fd >= 0 else errno.errorcode[ctypes.get_errno()]))
result = ' '.join(out)
`,
  ['number', 'number'],
);

/** Empty files on /tmp and /dev/shm: no block of either tmpfs, ~1 KiB of kernel memory each. */
const FILES = 600_000;
const EMPTY_FILES = T(`
import os
made = 0
while made < ${FILES}:
    os.close(os.open('%s/e%d' % (('/tmp', '/dev/shm')[made % 2], made), os.O_CREAT | os.O_WRONLY, 0o600))
    made += 1
result = 'made %d' % made
`);

/** A grandchild that leaves its session and parent, then the body spins past its deadline. */
const DAEMON = (marker: string) =>
  T(`
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, ['python3', '-c', 'import time; time.sleep(300)', '${marker}'])
    os._exit(0)
os.wait()
while True:
    pass
`);

/**
 * SIGINT to its whole process group, itself spared: in a group shared with
 * the zygote and other functions' workers it would end the zygote (Python's
 * handler) and interrupt their rows. Says whether the worker leads a session
 * and group of its own.
 */
const GROUP_SIGNAL = T(`
import os, signal
me, sid, pgid = os.getpid(), os.getsid(0), os.getpgid(0)
signal.signal(signal.SIGINT, signal.SIG_IGN)
os.kill(0, signal.SIGINT)
result = 'own session and group' if sid == me and pgid == me else 'sid %d pgid %d pid %d' % (sid, pgid, me)
`);

/** A row that sleeps long enough for another function's row to run beside it. */
const SLEEPER = T(`
import time
for _ in range(30):
    time.sleep(0.1)
result = 'slept'
`);

const FNS = {
  warm: T('result = "warm"'),
  warm2: T('result = "warm2"'),
  sibling: T('result = "sibling"'),
  syscalls: SYSCALLS,
  cover: COVER,
  reach: REACH,
  emptyFiles: EMPTY_FILES,
};

type Registry = ReturnType<typeof scopedRegistry>['registry'];
type Runner = ReturnType<typeof scopedRegistry>['runner'];

/** A registry whose next starts come from the zygote (two at once boot it), or trees only. */
async function workers(
  from: 'zygote' | 'tree',
  fns: Record<string, unknown>,
  options: Record<string, unknown> = {},
): Promise<{ registry: Registry; runner: Runner }> {
  if (from === 'tree') process.env.IMPROV_EXTFN_ZYGOTE = '0';
  else delete process.env.IMPROV_EXTFN_ZYGOTE;
  const scoped = scopedRegistry('restricted', fns as never, { maxWorkers: 2, ...options });
  await Promise.all([scoped.registry.eval('warm', []), scoped.registry.eval('warm2', [])]);
  if (from === 'zygote') expect(scoped.runner.stats().zygote).toMatch(/^ready \(pid \d+\)$/);
  else expect(scoped.runner.stats().zygoteStarts).toBe(0);
  return scoped;
}

/** The function's text value; the start it took came from the zygote when `from` says so. */
async function text(
  from: 'zygote' | 'tree',
  { registry, runner }: { registry: Registry; runner: Runner },
  name: string,
  args: Value[] = [],
): Promise<string> {
  const forks = runner.stats().zygoteStarts ?? 0;
  const value = (await registry.eval(name, args)) as { type: string; value: string };
  expect(value.type).toBe('text');
  expect(runner.stats().zygoteStarts).toBe(from === 'zygote' ? forks + 1 : 0);
  return value.value;
}

describe.skipIf(!restrictedOk)(`hostile python bodies ${restrictedOk ? '' : noRestricted}`, () => {
  describe.each(['tree', 'zygote'] as const)('in a worker of its own %s', (from) => {
    test.skipIf(!seccompHere)(
      'every kernel surface of the list is refused, each by a real call',
      async () => {
        const scoped = await workers(from, FNS);
        expect(JSON.parse(await text(from, scoped, 'syscalls'))).toEqual(REFUSED);
      },
      60_000,
    );

    test(`${FILES} empty files (no tmpfs block, kernel memory each): killed for memory, the next call works`, async () => {
      const scoped = await workers(from, FNS, { limits: { memoryBytes: 128 << 20 } });
      const forks = scoped.runner.stats().zygoteStarts ?? 0;
      const error = await failure(scoped.registry.eval('emptyFiles', [], { timeoutMs: 90_000 }));
      expect(ExtFnError.isInstance(error), String(error)).toBe(true);
      expect(error.kind).toBe('Runtime');
      expect(error.limit).toBe('memory');
      if (from === 'zygote') expect(scoped.runner.stats().zygoteStarts).toBe(forks + 1);
      expect(await scoped.registry.eval('warm', [])).toEqual(Value.text('warm'));
    }, 120_000);

    test('a signal to its whole process group reaches no other worker and not the zygote', async () => {
      const scoped = await workers(from, { ...FNS, group: GROUP_SIGNAL, sleeper: SLEEPER });
      const zygote = scoped.runner.stats().zygote;
      const before = scoped.runner.workerPids().length;
      const sleeping = scoped.registry.eval('sleeper', []);
      // its worker is there (so its row runs while the other signals)
      expect(await waitFor(() => scoped.runner.workerPids().length > before, 10_000)).toBe(true);
      const group = await text(from, scoped, 'group');
      expect(await sleeping.catch((error: unknown) => String(error))).toEqual(Value.text('slept'));
      expect(group).toBe('own session and group');
      expect(scoped.runner.stats().zygote).toBe(zygote);
      if (from === 'zygote') expect(zygote).toMatch(/^ready \(pid \d+\)$/);
      expect(await scoped.registry.eval('warm', [])).toEqual(Value.text('warm'));
    }, 60_000);

    test('a daemonized grandchild does not outlive the deadline', async () => {
      const marker = `extfn-daemon-${randomBytes(6).toString('hex')}`;
      const scoped = await workers(from, { ...FNS, daemon: DAEMON(marker) });
      const call = failure(scoped.registry.eval('daemon', [], { timeoutMs: 3000 }));
      // it ran: the grandchild is there, outside the body's session, before the deadline
      expect(await waitFor(() => processesWith(marker).length === 1, 10_000)).toBe(true);
      const error = await call;
      expect(error.kind).toBe('Timeout');
      expect(await waitFor(() => processesWith(marker).length === 0, 5000)).toBe(true);
      if (from === 'zygote') expect(scoped.runner.stats().zygote).toMatch(/^ready/);
    }, 60_000);
  });

  describe('in a worker forked from the zygote', () => {
    test('its directory stays covered: owned by the worker, but no chmod, file, listing, filter or dial', async () => {
      const scoped = await workers('zygote', FNS);
      expect(await text('zygote', scoped, 'cover')).toBe(
        'owner:self mode:0 chmod:EROFS create:EACCES mkdir:EACCES list:EACCES filter:EACCES dial:EACCES',
      );
    }, 60_000);

    test('the zygote and a sibling worker, named by their host pids: not there to signal, read or open', async () => {
      const scoped = await workers('zygote', FNS);
      expect(await text('zygote', scoped, 'sibling')).toBe('sibling');
      const zygoteBwrap = Number(/pid (\d+)/.exec(scoped.runner.stats().zygote ?? '')?.[1]);
      const sibling = scoped.runner.workerPids().at(-1)!;
      expect(zygoteBwrap).toBeGreaterThan(0);
      const out = await text('zygote', scoped, 'reach', [
        Value.number(zygoteBwrap),
        Value.number(sibling),
      ]);
      const none = 'kill:ESRCH mem:ENOENT environ:ENOENT pidfd:ESRCH';
      expect(out).toBe(`${none} ${none}`);
    }, 60_000);
  });
});

describe.skipIf(!hasPython)('control: trusted, where nothing stops a body', () => {
  test.skipIf(!seccompHere)(
    'the same calls reach the kernel',
    async () => {
      const { registry } = scopedRegistry('trusted', FNS as never);
      const out = JSON.parse(((await registry.eval('syscalls', [])) as { value: string }).value);
      for (const [name, refused] of Object.entries(REFUSED)) {
        // a tty is never there; the kernel itself refuses these to a non-root host: mount
        // and TIOCSTI without CAP_SYS_ADMIN, open_by_handle_at without CAP_DAC_READ_SEARCH
        const kernelRefuses = ['mount', 'TIOCSTI', 'open_by_handle_at'];
        if (name === 'tty' || (process.getuid?.() !== 0 && kernelRefuses.includes(name))) continue;
        expect(out[name], name).not.toBe(refused);
      }
      // what the kernel grants any user on its own process
      expect(out).toMatchObject({
        ptrace: 'ok',
        process_vm_readv: 'ok',
        kcmp: 'ok',
        pidfd_getfd: 'ok',
        personality: 'ok',
        name_to_handle_at: 'ok',
        unshare: 'ok',
        memfd_create: 'ok',
      });
    },
    30_000,
  );

  test('a host process named by its pid is reached', async () => {
    const victim = spawn('/bin/sleep', ['30'], { stdio: 'ignore' });
    try {
      const { registry } = scopedRegistry('trusted', FNS as never);
      const value = (await registry.eval('reach', [
        Value.number(victim.pid!),
        Value.number(victim.pid!),
      ])) as { value: string };
      expect(value.value.split(' ').slice(0, 4)).toEqual([
        'kill:ok',
        'mem:ok',
        'environ:ok',
        'pidfd:ok',
      ]);
    } finally {
      victim.kill('SIGKILL');
    }
  }, 30_000);
});
