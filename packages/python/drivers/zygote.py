
# ---- the zygote (drivers/zygote.py) -------------------------------------------------
# The host appends this file to driver.py and runs the two as one program, in
# a sandbox tree like a worker's but under a relaxed seccomp filter (unshare,
# mount and clone's namespace flags let through) and with the environment
# variable IMPROV_EXTFN_ZYGOTE_DIR set (driver.py took it out and left
# `_zygote_dir`). It then serves no body: it clones workers, each already past
# the driver's imports, for a fraction of what a new sandbox tree and
# interpreter cost.
#
# Control (docs/protocol.md, "Zygote (Python)"): JSON lines from the host on
# stdin, answers on stdout. `{"op":"fork",…}` clones a worker and answers its
# pid at once; `{"id","exit"}` follows when the zygote reaps it. EOF or
# `{"op":"exit"}` ends the zygote, and with it every worker (each sits in pid
# namespaces below the zygote's, which the kernel kills with it).
#
# A worker goes, in this order, before any body code can run (each step's
# failure: one line on its stderr, the zygote's before step 3, and exit 70,
# which the host reads as "no zygote here"):
#   1. clone() into new user, mount, pid, net, ipc and uts namespaces: pid 1 of
#      its own, sees no sibling, reaches no sibling's socket;
#   2. its uid mapped to itself (never root inside), its own /tmp, /dev/shm
#      and /proc (a sibling's files and processes are not there);
#   3. its stdin/stdout and stderr: two connections to the host's socket in
#      the zygote's directory (a token line first), and the shared file;
#   4. that directory covered by an empty, mode-0, read-only tmpfs: a body
#      cannot dial the host again, read the filter, nor store files there;
#   5. no capabilities, no way to gain any (no_new_privs), not dumpable;
#   6. its own rlimits (the zygote's were sized for all its workers);
#   7. the strict seccomp filter stacked on the zygote's relaxed one;
#   8. only its own descriptors, at 0, 1, 2 (and 3): none of the zygote's
#      (its control pipes above all) survives;
#   9. its environment additions, then the driver serves as in a tree, and
#      the worker ends without the interpreter's finalization (_worker_serve).
# The zygote never reads what a worker writes, and stays single-threaded: a
# clone() copies the calling thread only, so no other may hold a lock then.
import array  # noqa: F401 (loaded once here, not by every worker's first chunk of over 8192 values: ~2 ms each)
import ctypes
import fcntl  # loaded once here, not by every worker (_setup_io, _loopback_up): ~2 ms each
import mmap  # likewise, for its first shared-file request (and a spare's warm-up)
import resource
import select
import _signal
import _socket

# linux/sched.h, linux/mount.h, linux/prctl.h, linux/seccomp.h, linux/capability.h
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
SIGCHLD = 17
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
SECCOMP_MODE_FILTER = 2
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1  # linux/sockios.h, linux/if.h
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SYS_CLONE = {'x86_64': 56, 'aarch64': 220}  # all other arguments 0: their order does not matter

EINVAL = 22
ZYGOTE_FAILED = 70  # a worker's exit status when a step before serving failed

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
# PyDLL: the GIL stays held across the call, so the child returns into Python holding it.
_syscall = ctypes.PyDLL(None, use_errno=True).syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long] + [ctypes.c_ulong] * 5


class _SockFprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [('version', ctypes.c_uint32), ('pid', ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [('effective', ctypes.c_uint32), ('permitted', ctypes.c_uint32),
                ('inheritable', ctypes.c_uint32)]


class _StepFailed(Exception):
    """A worker's step before serving failed: the message names it."""


def _check(rc, what):
    if rc != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, '%s: %s' % (what, os.strerror(errno)))


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _answer(message):
    """One control line to the host."""
    _write_all(1, _dumps_frame(message).encode('ascii') + b'\n')


def _load_filter(directory):
    """The strict seccomp program every worker stacks, read once: a worker's
    directory is covered before it could read it itself."""
    with open(directory + '/strict.bpf', 'rb') as f:
        program = f.read()
    if not program or len(program) % 8 or len(program) // 8 > 4096:
        raise ValueError('%s/strict.bpf is not a seccomp program (%d bytes)' % (directory, len(program)))
    buffer = ctypes.create_string_buffer(program, len(program))
    return buffer, _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))


def _cap_last():
    try:
        with open('/proc/sys/kernel/cap_last_cap') as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63  # dropping a capability the kernel lacks fails harmlessly


# ---- one worker's request -------------------------------------------------------------

_LIMITS = ('memoryBytes', 'cpuSeconds', 'openFiles', 'fileSizeBytes', 'processes', 'tmpfsBytes')


class _Fork(object):
    """A fork line, checked and prepared in the zygote, so the clone's child
    does no more than its steps."""

    def __init__(self, request, directory):
        self.id = request.get('id')
        token = request.get('token')
        if not isinstance(token, str) or not token or not all(c in '0123456789abcdef' for c in token):
            raise ValueError('token must be lowercase hex')
        limits = request.get('limits')
        if not isinstance(limits, dict):
            raise ValueError('limits must be an object')
        for name in _LIMITS:
            value = limits.get(name)
            if type(value) is not int or value < 0:
                raise ValueError('limits.%s must be a non-negative integer' % (name,))
        self.limits = limits
        shared = request.get('shared')
        if shared is not None and (not isinstance(shared, str) or shared in ('', '.', '..') or '/' in shared):
            raise ValueError('shared must be a file name in the zygote directory, or null')
        self.shared = None if shared is None else '%s/%s' % (directory, shared)
        env = request.get('env') or {}
        if not isinstance(env, dict) or not all(
                isinstance(k, str) and k and '=' not in k and (v is None or isinstance(v, str))
                for k, v in env.items()):
            raise ValueError('env must map names to strings (or null to unset)')
        self.env = env
        self.socket = directory + '/s'
        self.directory = directory.encode()
        page = 4096  # /dev/shm gets a quarter of the budget, /tmp the rest (tmpfsSizes in packages/sandbox)
        self.shm_bytes = limits['tmpfsBytes'] // 4 // page * page
        self.tmp_bytes = limits['tmpfsBytes'] - self.shm_bytes
        if self.shm_bytes == 0:  # a tmpfs of size 0 has no bound at all (bwrap refuses it too)
            raise ValueError('limits.tmpfsBytes must be at least 16384')
        self.token = token
        self.warm = request.get('warm') is True  # a spare: _warm_up before its ready frame


# ---- the steps of a worker, in the clone's child ----------------------------------------

def _step1_after_clone():
    """Python's own state after a fork (threads, random's seed, locks), and
    none of the zygote's signal plumbing: its wakeup pipe is closed in step 8,
    and its number may then be a body's file. A session and process group of
    its own, as bwrap's --new-session gives a tree: the clone is in the
    zygote's, where kill(0, sig) would reach the zygote (SIGINT ends it) and
    every other function's worker."""
    ctypes.pythonapi.PyOS_AfterFork_Child()
    _signal.set_wakeup_fd(-1)
    _signal.signal(SIGCHLD, _signal.SIG_DFL)
    os.setsid()


def _step2_namespaces(work, uid, gid):
    """The uid the zygote runs as, mapped to itself (root is not mapped, so
    never reachable); fresh /tmp, /dev/shm and /proc."""
    for name, text in (('setgroups', 'deny'), ('uid_map', '%d %d 1' % (uid, uid)),
                       ('gid_map', '%d %d 1' % (gid, gid))):
        fd = os.open('/proc/self/' + name, os.O_WRONLY)
        try:
            os.write(fd, text.encode('ascii'))
        finally:
            os.close(fd)
    for path, size in ((b'/tmp', work.tmp_bytes), (b'/dev/shm', work.shm_bytes)):
        options = b'size=%d,mode=0755' % (size,)
        _check(_libc.mount(b'tmpfs', path, b'tmpfs', MS_NOSUID | MS_NODEV, options), 'mount tmpfs on ' + path.decode())
    os.chdir('/tmp')  # the working directory was the zygote's /tmp, now beneath the new one
    _loopback_up()
    # Fails with EPERM where the sandbox's /proc has covered parts (another
    # bubblewrap or kernel): the host then uses trees.
    _check(_libc.mount(b'proc', b'/proc', b'proc', MS_NOSUID | MS_NODEV | MS_NOEXEC, None), 'mount /proc')


def _loopback_up():
    """`lo` up in the worker's new network namespace, as bwrap sets it up in a
    tree's: a body that talks to itself over 127.0.0.1 works the same in both."""
    from _struct import pack, unpack_from
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        request = pack('16s24x', b'lo')  # struct ifreq: the name, then a union (ifr_flags first)
        flags = unpack_from('H', fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request), 16)[0]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, pack('16sH22x', b'lo', flags | IFF_UP))
    finally:
        s.close()


def _dial(path, token, stream):
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(('%s %s\n' % (token, stream)).encode('ascii'))
    return s.detach()


def _step3_connect(work):
    """The worker's streams: stdin+stdout on one connection, stderr on a
    second (the host tells them apart by the line each starts with)."""
    stdio = _dial(work.socket, work.token, 'stdio')
    stderr = _dial(work.socket, work.token, 'stderr')
    shared = os.open(work.shared, os.O_RDWR) if work.shared is not None else None
    return stdio, stderr, shared


def _step4_cover(work):
    # Read-only: the worker's uid owns the cover's root, so a body could
    # otherwise chmod it and fill it with empty files (inodes no size counts).
    _check(_libc.mount(b'tmpfs', work.directory, b'tmpfs', MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                       b'size=4k,nr_inodes=1,mode=0'),
           'cover ' + work.directory.decode())


def _step5_capabilities(cap_last):
    _check(_libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0), 'PR_SET_DUMPABLE')
    for cap in range(cap_last + 1):  # needs CAP_SETPCAP: before capset
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != EINVAL:
            _check(-1, 'PR_CAPBSET_DROP %d' % (cap,))  # EINVAL: a capability this kernel lacks
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), 'PR_CAP_AMBIENT_CLEAR_ALL')
    header = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: effective, permitted and inheritable
    _check(_libc.capset(ctypes.byref(header), data), 'capset')
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 'PR_SET_NO_NEW_PRIVS')


def _step6_rlimits(limits):
    """As a tree's chain sets them (packages/sandbox chain-shell.ts). None may
    exceed the zygote's own hard limits: lowering needs no privilege."""
    wanted = [('AS', limits['memoryBytes'], limits['memoryBytes']),
              ('NOFILE', limits['openFiles'], limits['openFiles']),
              ('FSIZE', limits['fileSizeBytes'], limits['fileSizeBytes']),
              ('CORE', 0, 0),
              ('NPROC', limits['processes'], limits['processes'])]
    if limits['cpuSeconds'] > 0:  # soft: SIGXCPU (which names the cause); hard, a second later: SIGKILL
        wanted.append(('CPU', limits['cpuSeconds'], limits['cpuSeconds'] + 1))
    for name, soft, hard in wanted:
        which = getattr(resource, 'RLIMIT_' + name)
        try:
            resource.setrlimit(which, (soft, hard))
        except (OSError, ValueError) as e:
            raise _StepFailed('RLIMIT_%s %d:%d above the zygote\'s %d:%d (%s)'
                              % ((name, soft, hard) + resource.getrlimit(which) + (e,)))


def _step7_seccomp(fprog):
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0), 'seccomp')


def _step8_descriptors(stdio, stderr, shared, fd_bound):
    # 0-2 are the zygote's (control pipes, its stderr) until replaced here;
    # the new ones are above 2, so each dup2 only overwrites what is done with.
    os.dup2(stdio, 0)
    os.dup2(stdio, 1)
    os.dup2(stderr, 2)
    last = 2
    if shared is not None:
        if shared != 3:
            os.dup2(shared, 3)
        last = 3
    os.closerange(last + 1, fd_bound)  # every descriptor the zygote could have had
    return last


def _step9_environment(env):
    # Both views: posix.environ (the driver's, and what `os` is made from) and
    # `os.environ`, which ctypes imported in the zygote already.
    real_os = sys.modules.get('os')
    for name, value in env.items():
        key = name.encode(sys.getfilesystemencoding(), 'surrogateescape')
        if value is None:
            os.environ.pop(key, None)
            os.unsetenv(key)
            if real_os is not None and real_os is not os:
                real_os.environ.pop(name, None)
        else:
            os.environ[key] = value.encode(sys.getfilesystemencoding(), 'surrogateescape')
            os.putenv(key, os.environ[key])
            if real_os is not None and real_os is not os:
                real_os.environ[name] = value


def _worker(work, uid, gid, fprog, cap_last, fd_bound):
    """The clone's child: every step up to serving. Returns the shared file's
    descriptor (or None); never returns on a failure."""
    err = 2  # the zygote's stderr until the worker's own is connected
    step = 'after clone'
    try:
        _step1_after_clone()
        step = 'namespaces'
        _step2_namespaces(work, uid, gid)
        step = 'connect'
        stdio, err, shared = _step3_connect(work)
        step = 'cover the zygote directory'
        _step4_cover(work)
        step = 'capabilities'
        _step5_capabilities(cap_last)
        step = 'rlimits'
        _step6_rlimits(work.limits)
        step = 'seccomp'
        _step7_seccomp(fprog)
        step = 'descriptors'
        last = _step8_descriptors(stdio, err, shared, fd_bound)
        err = 2
        step = 'environment'
        _step9_environment(work.env)
        return 3 if last == 3 else None
    except BaseException as e:
        try:
            _write_all(err, ('extfn zygote: worker %s: step "%s" failed: %s\n' % (work.id, step, e)).encode(
                'utf-8', 'backslashreplace'))
        finally:
            os._exit(ZYGOTE_FAILED)


def _clone(number):
    """One clone() into every new namespace at once: the child is pid 1 of its
    pid namespace, and the zygote's own child (it reaps it). What os.fork()
    does around the call, Python's before/after-fork hooks included."""
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _syscall(number, flags | SIGCHLD, 0, 0, 0, 0)
    if pid != 0:
        errno = ctypes.get_errno()
        ctypes.pythonapi.PyOS_AfterFork_Parent()
        if pid < 0:
            raise OSError(errno, 'clone: %s' % (os.strerror(errno),))
    return pid


# ---- the zygote's loop -------------------------------------------------------------------

def _exit_of(status):
    if os.WIFSIGNALED(status):
        return {'signal': os.WTERMSIG(status)}
    return {'code': os.WEXITSTATUS(status)}


def _reap(live):
    """Answers an exit line for every worker that has ended; never blocks."""
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        wid = live.pop(pid, _UNSET)
        if wid is not _UNSET:
            _answer({'id': wid, 'exit': _exit_of(status)})


def _zygote(directory):
    """Serves the control lines. Returns in a worker only (its Fork and
    shared descriptor), which then serves below; the zygote ends here."""
    number = SYS_CLONE.get(os.uname().machine)
    fprog_buffer, fprog = _load_filter(directory)  # noqa: F841 (the buffer must outlive the worker's prctl)
    if number is None:
        raise OSError('no clone() number for %s' % (os.uname().machine,))
    cap_last = _cap_last()
    fd_bound = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # no descriptor of the zygote is above it
    if fd_bound == resource.RLIM_INFINITY or fd_bound > 1 << 20:
        fd_bound = 1 << 20
    uid, gid = os.getuid(), os.getgid()
    # SIGCHLD wakes the loop through a pipe: select() never sleeps while a
    # worker waits to be reaped, and no timer polls while nothing happens.
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    _signal.signal(SIGCHLD, lambda signum, frame: None)
    _signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    live = {}  # pid → id of the fork line
    pending = b''
    _answer({'zygote': 'ready'})
    while True:
        _reap(live)
        readable = select.select([0, wake_r], [], [])[0]
        if wake_r in readable:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if 0 not in readable:
            continue
        data = os.read(0, 1 << 16)
        if not data:
            return None  # EOF: the host has gone
        pending += data
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            if not line.strip():
                continue
            try:
                request = _loads_frame(line)
            except Exception as e:
                request = 'not a control line: %s' % (e,)
            if not isinstance(request, dict):
                _answer({'id': None, 'error': request if isinstance(request, str) else 'not a JSON object'})
                continue
            op = request.get('op')
            if op == 'exit':
                return None
            if op != 'fork':
                _answer({'id': request.get('id'), 'error': 'unknown op %r' % (op,)})
                continue
            try:
                work = _Fork(request, directory)
                pid = _clone(number)
            except Exception as e:
                _answer({'id': request.get('id'), 'error': str(e)})
                continue
            if pid == 0:
                return work, _worker(work, uid, gid, fprog, cap_last, fd_bound)
            live[pid] = work.id
            _answer({'id': work.id, 'pid': pid})


# ---- a spare's warm-up ---------------------------------------------------------------------

_WARM_ROWS = 65536  # twice a batch's usual chunk (32 768 rows)
_WARM_NAME = 'extfn-warm-up'


def _warm_up():
    """What a worker's first chunks would pay, paid by a spare while the host
    is idle (packages/interpreter/src/spare-workers.ts): the memory a chunk of
    number rows allocates touched once (the allocator keeps it: a float
    arena by _keep_arenas, the heap by malloc's raised mmap threshold), and
    the shared file the host sized and filled for it mapped, each page
    written (with the zeros it holds: no request has used it yet). ~700
    first-touch page faults per worker otherwise, ~1.7 ms of its CPU on the
    2-core VM. And a body of the driver's own compiled and dropped: the
    first body a fork compiles pays ~90 copy-on-write faults in the parser
    and compiler (3-6 ms of its CPU here; the next body 0.3 ms), which a
    start on a spare would otherwise pay before its first row. Runs our
    code only, after every step of the sandbox; a failure here only leaves
    the worker colder."""
    try:
        floats = list(map(float, range(_WARM_ROWS)))
        packed = array.array('d', floats).tobytes()
        _keep_arenas([floats])
        del floats, packed
        if _shared_fd is not None:
            size = os.fstat(_shared_fd).st_size
            if size > 0:
                view = _shared_view(size)
                for at in range(0, size, mmap.PAGESIZE):
                    view[at] = 0
                view.release()
        _Loaded({'name': _WARM_NAME, 'argTypes': ['number', 'number'], 'returnType': 'number',
                 'body': 'result = args[0] + args[1]'})
    except Exception:
        pass
    _body_lines.pop('<%s>' % (_WARM_NAME,), None)  # no trace of it for a body's traceback to find


def _worker_serve(shared, warm=False):
    """A worker from here on: the driver set up and serving as in a tree. It
    then ends as the interpreter would (non-daemon threads waited for, atexit
    functions run, standard streams flushed, the same exit status) but
    without the interpreter's finalization: tearing down a heap it shares
    copy-on-write with the zygote copies nearly every page of it, ~40 ms of
    CPU per worker on a loaded 2-core VM, as much as all the rest of its life."""
    status = 0
    try:
        _setup_io()
        _setup_shared(shared)
        if warm:
            _warm_up()
        _serve()
    except SystemExit as e:
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xff
        else:
            sys.stderr.write('%s\n' % (e.code,))
            status = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    try:
        threading = sys.modules.get('threading')
        if threading is not None:
            threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        sys.excepthook(*sys.exc_info())
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(status)


if _zygote_dir is not None:
    _zygote_worker = _zygote(_zygote_dir)
    if _zygote_worker is not None:  # a clone's child, past its steps
        _worker_serve(_zygote_worker[1], _zygote_worker[0].warm)
