# The @improv/extfn Python driver, protocol v1 (docs/protocol.md).
#
# Started as `python3 -s -S -B -c <bootstrap>`; the bootstrap reads this file's
# length and text from stdin and runs it. It then serves frames on stdin:
# `load` compiles the body once, `call`/`callf64`/`callcols` run it per row
# (or per chunk for vectorized bodies), `exit` ends.
# Frames go out on a private copy of the original stdout; fd 1 and sys.stdout
# are pointed elsewhere, so nothing the body prints can corrupt a result.
import sys
try:
    # `posix`, what `os` wraps, comes loaded with the interpreter; `os` imports
    # stat, posixpath and _collections_abc (~3 ms of every worker start). A
    # body's own `import os` gets the whole module, its environ made from posix's.
    import posix as os
    _PATHSEP, _DEVNULL = ':', '/dev/null'
except ImportError:  # not a POSIX system
    import os
    _PATHSEP, _DEVNULL = os.pathsep, os.devnull

if sys.version_info < (3, 8):
    sys.stderr.write('@improv/extfn-python needs CPython 3.8 or later, this is %s\n' % sys.version.split()[0])
    sys.exit(2)

if sys.path and sys.path[0] in ('', '.'):
    del sys.path[0]  # never import from the working directory (what -P does on 3.11+)


def _env(name, pop=False):
    """A variable of the environment as os.environ has it, or None; `pop` also
    takes it out of the environment (os.environ's, and the one children inherit)."""
    environ = os.environ  # posix's: bytes to bytes on POSIX
    key = name.encode('ascii') if os.__name__ == 'posix' else name
    value = environ.pop(key, None) if pop else environ.get(key)
    if pop and value is not None:
        os.unsetenv(key)
    if isinstance(value, bytes):  # decoded as os.environ decodes it
        value = value.decode(sys.getfilesystemencoding(), 'surrogateescape')
    return value


# The libraries the host allows (python({ packages })), bound read-only by the
# sandbox: appended after the standard library, so none can shadow it. Their
# .pth files are not run: nothing executes before the body but the driver.
for _dir in (_env('IMPROV_EXTFN_PYTHON_PATH') or '').split(_PATHSEP):
    if _dir and _dir not in sys.path:
        sys.path.append(_dir)

# A zygote (drivers/zygote.py, which the host appends to this source) defines
# everything below but serves nothing itself: each worker it clones sets up
# its own descriptors and then serves. Taken out of the environment at once,
# so no body sees it.
_zygote_dir = _env('IMPROV_EXTFN_ZYGOTE_DIR', pop=True)


def _setup_io():
    """Binds the request stream to the driver and fd 0/1 away from the body.
    On fd 0/1/2 as they are now: at start in a worker tree, after its dup2s
    in a zygote's worker."""
    global _proto_in, _proto_out_fd, _stdin, _serving_pid
    _serving_pid = os.getpid()  # the one process that answers (_write)
    # The bootstrap read exactly the driver's bytes from fd 0 (os.read, no
    # buffering), so everything after them is the request stream.
    _proto_in = open(os.dup(0), 'rb', buffering=1 << 16)  # what os.fdopen does
    _proto_out_fd = os.dup(1)
    try:  # larger pipes: a megabyte column moves in a few system calls, not hundreds
        import fcntl
        for fd in (_proto_in.fileno(), _proto_out_fd):
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass  # not a pipe, an older Python, or a lower pipe-max-size: the default size works
    devnull = os.open(_DEVNULL, os.O_RDWR)
    os.dup2(devnull, 0)  # the body cannot read (and desynchronise) the request stream
    os.dup2(2, 1)  # print() and child processes write to stderr from now on
    os.close(devnull)
    _stdin = sys.stdin = open(_DEVNULL, 'r')  # what a body's input() reads


if _zygote_dir is None:
    _setup_io()

# `_ast`, not `ast`: the node classes without the module's imports (contextlib, enum…),
# ~9 ms of every worker start; _ast_parse and _ast_walk are what the driver uses of the rest.
import _ast as ast
import _json
import builtins
import math
from time import perf_counter as _perf_counter  # a built-in module: nothing to load
# `_datetime`, the C module `datetime` re-exports: importing `datetime` runs its
# pure-Python twin first (~3 ms of every worker start). The classes are the same
# objects, so a body's own `import datetime` sees the very same types.
try:
    from _datetime import datetime, timedelta, timezone
except ImportError:  # an interpreter without the accelerator
    from datetime import datetime, timedelta, timezone
# Not imported here, each where it is needed: `array` (~5 ms: it imports
# collections), `itertools` (~0.4 ms, text columns only), `mmap` (~0.6 ms, the
# shared file only). A worker start pays for what every function needs.

_UNSET = object()
_INF = float('inf')
_NAN_WIRE = {'NaN': float('nan'), 'Infinity': _INF, '-Infinity': -_INF, '-0': -0.0,
             '+Infinity': _INF, 'inf': _INF, '-inf': -_INF, 'nan': float('nan')}
_ENUM_MAX = 4294967295
_UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=_UTC)


class _LazyPattern(object):
    """A global pattern compiled on its first use, which puts it in its place:
    `re` costs ~7 ms of every worker start, and most functions never need it."""

    def __init__(self, name, pattern, ignore_case):
        self._name, self._pattern, self._ignore_case = name, pattern, ignore_case

    def match(self, text):
        import re
        compiled = re.compile(self._pattern, re.I if self._ignore_case else 0)
        globals()[self._name] = compiled
        return compiled.match(text)


_ISO = _LazyPattern('_ISO', r'(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?(?:\.(\d{1,9}))?(Z|[+-]\d{2}:?\d{2})$', True)
_LITTLE = sys.byteorder == 'little'
_fromiso = datetime.fromisoformat


# ---- frames' JSON -------------------------------------------------------------------
# Through the C accelerator `json` itself uses (`import json` would import `re`
# and compile a dozen patterns: ~7 ms of every worker start). Whatever it does
# not take goes to `json`, for json's exact result or error.

class _JsonContext(object):
    """What json's C scanner reads of a decoder: json.loads' defaults."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {'NaN': float('nan'), 'Infinity': _INF, '-Infinity': -_INF}.__getitem__


def _json_refused(o):
    raise TypeError('Object of type %s is not JSON serializable' % (o.__class__.__name__,))


def _frame_encoder():
    """json.dumps(x, separators=(',', ':'), allow_nan=False) as the C encoder json uses for it."""
    return _json.make_encoder({}, _json_refused, _json.encode_basestring_ascii, None, ':', ',',
                              False, False, False)


try:
    _scan_json = _json.make_scanner(_JsonContext)
    if (''.join(_frame_encoder()({'a': [1, 2.5, '\xe9', None, True]}, 0)) != '{"a":[1,2.5,"\\u00e9",null,true]}'
            or _scan_json('{"a":[1,2.5,"\\u00e9",null,true]}', 0) != ({'a': [1, 2.5, '\xe9', None, True]}, 32)):
        raise ValueError('not the json this driver knows')
except Exception:  # another Python's accelerator: json itself
    _scan_json = None


def _dumps_frame(header):
    if _scan_json is None:
        import json
        return json.dumps(header, separators=(',', ':'), allow_nan=False)
    return ''.join(_frame_encoder()(header, 0))


def _loads_frame(line):
    if _scan_json is not None:
        try:
            text = line.decode('utf-8')
            value, end = _scan_json(text, 0)
            if not text[end:].strip(' \t\n\r'):
                return value
        except Exception:
            pass
    import json
    return json.loads(line)


def _only_the_worker():
    """Ends a process the body forked that came back into the driver (its
    copy of the body returned or raised), before it writes a result: the
    worker's own answer is the one the host gets, not whichever came first
    (the second would also fail the worker as a frame nobody asked for)."""
    if os.getpid() != _serving_pid:
        os._exit(0)


def _write(header, payload=None):
    _only_the_worker()
    data = _dumps_frame(header).encode('ascii') + b'\n'
    if payload is not None and len(payload) < 1 << 16:
        data += payload
        payload = None
    for part in (data, payload):  # a large payload goes as it is, without a copy
        view = memoryview(part).cast('B') if part is not None else b''
        while view:
            n = os.write(_proto_out_fd, view)
            view = view[n:]


# ---- values in --------------------------------------------------------------------

def _number_in(x):
    t = type(x)
    if t is float:
        return x
    if t is int:
        return float(x)
    return _NAN_WIRE[x]


class _ArgumentError(ValueError):
    """An argument Python cannot hold: reported without the driver's traceback."""


class _Instant(datetime):
    """A datetime argument with more than microsecond precision: keeps its
    nanoseconds so an unchanged value goes back exactly. Arithmetic on it
    gives a plain datetime."""
    __slots__ = ('_wire',)


def _datetime_in(text):
    # The host's usual spelling (milliseconds, Z) at C speed; fromisoformat
    # takes "Z" from Python 3.11 on, so older ones fall through to the regex.
    if len(text) == 24 and text[23] == 'Z' and text[19] == '.' and text[10] == 'T' and text[4] == '-':
        try:
            value = _fromiso(text)
            if value.tzinfo is _UTC:
                return value
        except ValueError:
            pass
    m = _ISO.match(text)
    if not m:
        raise _ArgumentError('datetime %r is not an ISO-8601 instant with a four-digit year '
                             '(0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z)' % (text,))
    y, mo, d, h, mi, s, frac, zone = m.groups()
    frac = frac or ''
    micro = int((frac + '000000')[:6])
    try:
        value = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0), micro, tzinfo=_UTC)
        if zone.upper() != 'Z':
            sign = 1 if zone[0] == '+' else -1
            digits = zone[1:].replace(':', '')
            value -= sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    except (ValueError, OverflowError) as e:
        raise _ArgumentError('datetime %s is not an instant in 0001-01-01T00:00:00Z .. '
                             '9999-12-31T23:59:59.999999999Z (%s)' % (text, e))
    if len(frac) > 6 and int(frac[6:]) != 0:
        exact = _Instant(value.year, value.month, value.day, value.hour, value.minute,
                         value.second, value.microsecond, tzinfo=_UTC)
        exact._wire = text
        return exact
    return value


def _bool_in(x):
    return x


def _text_in(x):
    return x


def _enum_in(x):
    return x


_IN = {'number': _number_in, 'boolean': _bool_in, 'text': _text_in,
       'datetime': _datetime_in, 'enum': _enum_in}


# ---- values out -------------------------------------------------------------------

class _ResultTypeError(Exception):
    def __init__(self, message, got):
        Exception.__init__(self, message)
        self.got = got


def _describe(x):
    t = type(x)
    if t is datetime and x.tzinfo is None:
        return 'naive datetime %s (no tzinfo)' % (x.isoformat(),)
    name = t.__name__ if t.__module__ == 'builtins' else '%s.%s' % (t.__module__, t.__qualname__)
    try:
        text = repr(x)
    except BaseException:
        return name
    if len(text) > 40:
        text = text[:40] + '…'
    return '%s %s' % (name, text)


def _mismatch(expected, x, why=None):
    got = why or _describe(x)
    return _ResultTypeError('result expected %s, got %s' % (expected, got), got)


def _number_out(x):
    t = type(x)
    if t is float or (t is not bool and isinstance(x, float)):
        x = float(x)
        if x != x:
            return 'NaN'
        if x == _INF:
            return 'Infinity'
        if x == -_INF:
            return '-Infinity'
        if x == 0.0 and math.copysign(1.0, x) < 0:
            return '-0'
        return x
    if t is bool or isinstance(x, bool):
        raise _mismatch('number', x)
    if isinstance(x, int):
        return _int_to_float(x)
    if hasattr(x, '__float__') and _is_real(x):  # numpy scalars and other Reals
        return _number_out(float(x))
    raise _mismatch('number', x)


def _int_to_float(x):
    try:
        return float(x)
    except OverflowError:
        raise _mismatch('number', x, 'int of %d bits (too large for a float)' % (x.bit_length(),))


def _is_real(x):
    import numbers
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _f64_out(x):
    """Like _number_out but for the binary path: NaN and infinities stay floats."""
    t = type(x)
    if t is float:
        return x
    if t is int:
        return _int_to_float(x)
    if t is bool or isinstance(x, bool):
        raise _mismatch('number', x)
    if isinstance(x, (int, float)) or (hasattr(x, '__float__') and _is_real(x)):
        return float(x)
    raise _mismatch('number', x)


def _boolean_out(x):
    if x is True or x is False:
        return x
    if type(x).__name__ == 'bool_' and hasattr(x, 'item'):  # numpy.bool_
        return bool(x)
    raise _mismatch('boolean', x)


_max_output = 1 << 20


def _text_out(x):
    if not isinstance(x, str):
        raise _mismatch('text', x)
    x = str(x)
    if len(x) * 6 > _max_output and len(_json.encode_basestring_ascii(x)) > _max_output:
        raise _OutputTooLarge()
    return x


def _datetime_out(x):
    if not isinstance(x, datetime):
        raise _mismatch('datetime', x)
    wire = getattr(x, '_wire', None) if type(x) is _Instant else None
    if wire is not None:
        return wire
    if x.tzinfo is _UTC:  # the usual case (arguments arrive in UTC): isoformat at C speed
        return x.isoformat()[:-6] + 'Z'
    offset = x.utcoffset()
    if offset is None:
        raise _mismatch('datetime', x, 'naive datetime %s (set tzinfo, e.g. timezone.utc)' % (x.isoformat(),))
    u = (x - offset).replace(tzinfo=None)
    # isoformat (C speed) pads the year to four digits and writes all six
    # fraction digits or none; the host reads any number of them.
    return u.isoformat() + 'Z'


def _enum_out(x):
    if isinstance(x, bool) or not isinstance(x, int):
        if type(x).__name__.startswith(('int', 'uint')) and hasattr(x, '__index__'):
            x = x.__index__()  # numpy integers
        else:
            raise _mismatch('enum', x)
    if x < 0 or x > _ENUM_MAX:
        raise _mismatch('enum', x, 'int %d (enum is an integer in [0, %d])' % (x, _ENUM_MAX))
    return int(x)


_OUT = {'number': _number_out, 'boolean': _boolean_out, 'text': _text_out,
        'datetime': _datetime_out, 'enum': _enum_out}


# ---- output of the body --------------------------------------------------------------

class _OutputTooLarge(Exception):
    pass


class _Capture(object):
    """sys.stdout while a row runs: kept per row, forwarded to stderr, capped."""

    encoding = 'utf-8'
    errors = 'strict'

    def __init__(self):
        self.parts = []
        self.size = 0
        self.over = False

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError('write() argument must be str, not %s' % type(text).__name__)
        self.size += len(text)
        if self.size > _max_output:
            self.over = True
            raise _OutputTooLarge()
        self.parts.append(text)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def writable(self):
        return True

    def fileno(self):
        return 1

    def discard(self):
        """Drops what was printed (a run whose output must not be forwarded)."""
        self.parts, self.size, self.over = [], 0, False

    def take(self):
        """Forwards what the row printed to stderr; returns its tail for error reports."""
        text = ''.join(self.parts)
        self.parts = []
        self.size = 0
        self.over = False
        if text:
            data = text.encode('utf-8', 'backslashreplace')
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(2, view):]
            except OSError:
                pass
        return text[-4096:]


_capture = _Capture()
sys.stdout = _capture


# ---- compiling the body ------------------------------------------------------------

# Calls that look at or change the namespace itself: inside a function they
# would see the function's locals, not the module's, so such bodies run with exec.
_DYNAMIC_NAMES = frozenset(['locals', 'vars', 'globals', 'exec', 'eval', 'dir', '__annotations__'])
_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.GeneratorExp)


def _ast_parse(source, filename):
    return compile(source, filename, 'exec', ast.PyCF_ONLY_AST)  # what ast.parse does


def _ast_walk(node):
    """Every node under `node` and itself (in no particular order, as ast.walk promises none)."""
    todo = [node]
    while todo:
        node = todo.pop()
        yield node
        for name in node._fields:
            field = getattr(node, name, None)
            if isinstance(field, ast.AST):
                todo.append(field)
            elif isinstance(field, list):
                todo.extend(item for item in field if isinstance(item, ast.AST))


def _needs_exec(tree):
    stored = set()
    for node in _ast_walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module == '__future__' or any(a.name == '*' for a in node.names)):
            return True
        if isinstance(node, ast.Name):
            if node.id in _DYNAMIC_NAMES:
                return True
        # What the body defines is named after where it is defined: in the
        # wrapper, `class A` would be `__extfn__.<locals>.A` (its repr, its
        # error messages), so such bodies run at module level.
        if isinstance(node, _DEFINITIONS):
            return True
    # Names the module level binds: in a function they become locals, which
    # would hide a builtin of the same name before its assignment runs.
    for node in tree.body:
        for sub in _ast_walk(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stored.add(sub.name)
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                stored.add(sub.id)
            elif isinstance(sub, ast.alias):
                stored.add((sub.asname or sub.name).split('.')[0])
    return any(hasattr(builtins, name) for name in stored)


_body_lines = {}


class _LinecacheStandIn(type(sys)):
    """linecache until something reads it: importing it imports tokenize and
    `re` (~7 ms of every worker start). The first attribute read imports it and
    gives it the bodies' lines; later reads go to it."""

    def __getattr__(self, name):
        return getattr(_linecache(), name)


def _linecache():
    if isinstance(sys.modules.get('linecache'), _LinecacheStandIn):
        del sys.modules['linecache']
    import linecache
    linecache.cache.update(_body_lines)
    return linecache


def _remember_lines(filename, entry):
    _body_lines[filename] = entry
    module = sys.modules.get('linecache')
    if module is not None and not isinstance(module, _LinecacheStandIn):
        module.cache[filename] = entry


if 'linecache' not in sys.modules:
    sys.modules['linecache'] = _LinecacheStandIn('linecache')


class _Body(object):
    """A compiled body: `run(args)` returns the result or _UNSET."""

    def __init__(self, name, source):
        self.filename = '<%s>' % (name,)
        # linecache lets tracebacks show the body's own lines.
        lines = source.splitlines(True)
        _remember_lines(self.filename, (len(source), None, lines, self.filename))
        tree = _ast_parse(source, self.filename)
        module_code = compile(tree, self.filename, 'exec', dont_inherit=True)  # module-level rules first
        self.globals = {'__builtins__': builtins, '__name__': '__extfn__'}
        self.mode = 'exec' if _needs_exec(tree) else 'function'
        if self.mode == 'exec':
            self.code = module_code
            self.call = self._run_exec
            self.pristine = dict(self.globals)  # never a row's own: each runs in a copy
            return
        # Wrap the parsed statements (not the text) in a function, so each
        # row is a call, the body's own line numbers stay, and the body text
        # is exactly what the user wrote.
        last = max([getattr(n, 'end_lineno', None) or getattr(n, 'lineno', 0) for n in _ast_walk(tree)] + [len(lines), 1])
        wrapper = _ast_parse('def __extfn__(args):\n    return result\n', self.filename)
        fdef = wrapper.body[0]
        ret = fdef.body[0]
        shift = last + 1 - ret.lineno
        for node in _ast_walk(ret):  # what ast.increment_lineno does
            if 'lineno' in node._attributes:
                node.lineno += shift
            if getattr(node, 'end_lineno', None) is not None:
                node.end_lineno += shift
        self.result_line = ret.lineno
        fdef.body = list(tree.body) + [ret]
        code = compile(wrapper, self.filename, 'exec', dont_inherit=True)
        exec(code, self.globals)
        function = self.globals.pop('__extfn__')
        replace = {'co_name': '<module>'}
        if hasattr(function.__code__, 'co_qualname'):
            replace['co_qualname'] = '<module>'
        function.__code__ = function.__code__.replace(**replace)
        self.function = function
        # Every row's frame shares self.globals: what a row writes there
        # (sys._getframe().f_globals, …) is undone before the next (_reset_row).
        self.pristine = dict(self.globals)
        # Rows call the function directly; a NameError from its last line means "result not set".
        self.call = function

    def unset(self, error):
        """Whether a NameError comes from the synthetic `return result`: the body never set it."""
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code is self.function.__code__ and tb.tb_lineno == self.result_line

    def _run_exec(self, args):
        namespace = dict(self.globals)
        namespace['args'] = args
        exec(self.code, namespace)
        return namespace.get('result', _UNSET)


_EXIT_FIX = ('a body must return a value (set result), or raise an exception such as ValueError '
             'to fail its row')


def _error(e, filename, output=''):
    """A row's exception as the protocol's error object."""
    if isinstance(e, _OutputTooLarge):
        return {'type': 'OutputLimit', 'message': 'output too large', 'limit': 'output',
                'traceback': output}
    if isinstance(e, _ResultTypeError):
        return {'type': 'ResultTypeError', 'message': str(e), 'got': e.got}
    if isinstance(e, _ArgumentError):
        return {'type': 'ValueError', 'message': str(e)}
    import traceback
    tb = e.__traceback__
    # Drop the driver's own frames: the traceback starts in the body.
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    if tb is None:
        tb = e.__traceback__
    t = type(e)
    name = t.__qualname__ if t.__module__ in ('builtins', '__extfn__') else '%s.%s' % (t.__module__, t.__qualname__)
    try:
        message = str(e)
    except BaseException:
        message = '<unprintable %s>' % (t.__name__,)
    # The two that would end the interpreter outside a row: say so, and what to do.
    if isinstance(e, SystemExit):
        try:
            code = '' if e.code is None else repr(e.code)[:80]
        except BaseException:
            code = '…'
        message = ('the body raised SystemExit(%s) (sys.exit()), which would end the interpreter: '
                   '%s' % (code, _EXIT_FIX))
    elif isinstance(e, KeyboardInterrupt):
        message = ('the body raised KeyboardInterrupt (or sent SIGINT to its own process), which '
                   'would end the interpreter: %s' % (_EXIT_FIX,))
    text = ''.join(traceback.format_exception(t, e, tb))
    out = {'type': name, 'message': message, 'traceback': (output + text)[-16384:]}
    # Guest-reported, like the sandbox's stderr reading: a body can pick the label
    # of its own failure, never turn a success into one.
    if isinstance(e, MemoryError):
        out['limit'] = 'memory'
    elif (isinstance(e, BlockingIOError) and e.errno == 11) or (
            isinstance(e, RuntimeError) and "can't start new thread" in message):
        out['limit'] = 'processes'  # fork/clone refused: the process limit
    return out


# ---- serving --------------------------------------------------------------------------

class _Loaded(object):
    def __init__(self, fn):
        self.name = fn['name']
        self.arg_types = fn['argTypes']
        self.arg_in = [_IN[t] for t in fn['argTypes']]
        self.out = _OUT[fn['returnType']]
        self.return_type = fn['returnType']
        # A plain float result goes out as it is only for a number function:
        # any other type takes its converter, which refuses a float.
        self.floats_out = self.return_type == 'number'
        self.vectorized = fn.get('vectorized') is True
        if self.vectorized and not self.arg_in:
            raise ValueError('function %s: a vectorized function needs at least one argument '
                             '(its columns tell the body how many rows there are)' % (self.name,))
        body = fn['body']
        if 'random' in body:
            # Seed before the first row: a generator imported by the row itself
            # would otherwise start from os.urandom.
            import random  # noqa: F401
        self.numpy = None
        if self.vectorized or 'numpy' in body:
            # Vectorized bodies get numpy arrays where numpy is allowed; and
            # numpy's global generator is then seeded before the first row too.
            try:
                import numpy
                self.numpy = numpy
            except ImportError:
                pass
        self.body = _Body(self.name, body)
        self.all_numbers = all(t == 'number' for t in fn['argTypes'])

    def convert(self, row):
        if self.all_numbers:
            return [x if type(x) is float else _number_in(x) for x in row]
        return [f(x) for f, x in zip(self.arg_in, row)]


# ---- determinism ----------------------------------------------------------------------

def _generators():
    """How many global random generators are loaded (random, numpy.random)."""
    modules = sys.modules
    return ('random' in modules) + ('numpy.random' in modules)


_seeded = []  # random's state after seed(0): restoring it costs a third of seeding


def _reseed():
    # A global generator in the body's reach gets the same seed every row, so
    # a row's result never depends on the rows before it.
    random = sys.modules.get('random')
    if random is not None:
        if _seeded:
            random.setstate(_seeded[0])
        else:
            random.seed(0)
            _seeded.append(random.getstate())
    np_random = sys.modules.get('numpy.random')
    if np_random is not None and hasattr(np_random, 'seed'):
        np_random.seed(0)


# ---- recursion ------------------------------------------------------------------------
# The driver calls a body from different depths of its own stack: the row loop,
# map() on the fast paths, once over columns when vectorized, from a worker a
# zygote cloned or one started alone. The interpreter's limit counts every frame
# (and some C calls), so with one limit a row could nest deeper on one path than
# on another, and give RecursionError or a value by path. So each call site sets
# the real limit to the one a body sees (sys.getrecursionlimit(), 1000 unless a
# row sets it) plus the depth the body's frame will have there, so a body nests
# exactly as deep as a script's top level does at that limit (at 1000, 998 calls
# down on CPython 3.12, 997 on 3.8-3.10; 3.11 gives module-level code a frame
# more once quickened). A row that sets the limit sets it for itself
# (_reset_row puts it back).

_real_getlimit = sys.getrecursionlimit
_real_setlimit = sys.setrecursionlimit
_LIMIT = _real_getlimit()
_limit = [_LIMIT, 0]  # what a body sees, and what the current call site adds to it


def _here():
    """The recursion depth of this frame, as the interpreter's refusal of
    sys.setrecursionlimit(1) reports it; None if it does not."""
    limit = _real_getlimit()
    try:
        _real_setlimit(1)
    except RecursionError as e:
        try:
            return int(str(e).split(' depth ', 1)[1].split(':', 1)[0])
        except (IndexError, ValueError):
            return None
    _real_setlimit(limit)
    return None


_HERE_EXEC = compile('result = _here()', '<extfn-depth>', 'exec')


def _fake_exec(args):
    """An exec-mode body's call (_Body._run_exec), its module frame saying its depth."""
    namespace = {'_here': _here}
    exec(_HERE_EXEC, namespace)
    return namespace['result']


def _below():
    """How much deeper than its caller's frame a body's frame is, by its mode
    and whether it is called directly or through list.extend(map(...))."""
    base = _here()
    below = {}
    for mode, fake in (('function', lambda args: _here()), ('exec', _fake_exec)):
        below[mode, False] = fake(None)
        mapped = []
        mapped.extend(map(fake, [None]))
        below[mode, True] = mapped[0]
    if base is None or None in below.values():
        return None
    return dict((k, v - base) for k, v in below.items())


_BELOW = _below()


def _top():
    """The depth of a script's top level: the bootstrap's (python -c), the
    outermost frame, which ran this module through exec(), itself or through
    the precompiled driver's stub (bootstrap.ts): each exec() a level as an
    exec-mode body's module frame is below its caller."""
    frame = sys._getframe(1)  # this module's
    execs = 0
    while frame.f_back is not None:
        execs += 1
        frame = frame.f_back
    return _here() - 2 - execs * (_BELOW['exec', False] - 1)


_TOP = None if _BELOW is None else _top()


def _site(body, mapped=False):
    """Sets the real limit for a body its caller is about to call, directly or
    (`mapped`) through list.extend(map(...)), so the body gets the limit it sees."""
    if _BELOW is None:
        return  # an interpreter that does not say its depth: one limit for every path
    # _here() is two frames below the caller; the body will be _BELOW below it.
    extra = _here() - 2 + _BELOW[body.mode, mapped] - _TOP
    _limit[1] = extra
    _real_setlimit(_limit[0] + extra)


def _limit_changed():
    """Whether a row left the recursion limit other than the call site set it."""
    return _limit[0] != _LIMIT or _real_getlimit() != _LIMIT + _limit[1]


def _getrecursionlimit():
    """sys.getrecursionlimit() for a body: the limit it has (see _site)."""
    return _limit[0]


def _setrecursionlimit(limit):
    """sys.setrecursionlimit() for a body: the limit the body's own frame and
    the frames under it get, on every path (see _site); for its row only."""
    import operator
    limit = operator.index(limit)  # the errors the real one gives for a float or a str
    if limit < 1:
        raise ValueError('recursion limit must be greater or equal than 1')
    try:
        _real_setlimit(limit + _limit[1])
    except RecursionError:  # said in the body's terms, not the site's
        raise RecursionError('cannot set the recursion limit to %d: the body is already deeper '
                             'than that' % (limit,)) from None
    _limit[0] = limit


_getrecursionlimit.__name__ = 'getrecursionlimit'
_setrecursionlimit.__name__ = 'setrecursionlimit'
sys.getrecursionlimit = _getrecursionlimit
sys.setrecursionlimit = _setrecursionlimit


def _changed(body):
    """Whether a row left sys.stdout, sys.stdin, the recursion limit or the
    globals every row of a function-mode body shares other than a fresh row
    finds them. The globals are compared, not looked for in the source: a
    row reaches them through sys._getframe().f_globals,
    inspect.currentframe(), a traceback's frames…. By identity, so no object
    of the body's is asked whether it is equal."""
    g, pristine = body.globals, body.pristine
    return (getattr(sys, 'stdout', None) is not _capture or getattr(sys, 'stdin', None) is not _stdin
            or _limit_changed() or len(g) != len(pristine)
            or any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(g.items(), pristine.items())))


def _reset_row(body):
    """Puts back what a row may have replaced for the rows after it, so a row
    finds what eval's request finds, whichever rows ran before it in its chunk."""
    sys.stdout = _capture
    sys.stdin = _stdin
    if _limit_changed():
        _limit[0] = _LIMIT
        _real_setlimit(_LIMIT + _limit[1])
    if _changed(body):  # now the globals alone: cleared only when written (a clear voids lookup caches)
        body.globals.clear()
        body.globals.update(body.pristine)


def _before_rerun(fn):
    """The row loaded a generator itself (random through tempfile, numpy), so it
    started from os.urandom: drops what the row printed, puts back what it
    replaced and seeds, for the caller to run it again (from its own frame, at
    the depth the first run had) on arguments made anew (the first run may
    have changed its list). Returns the generators now loaded."""
    _capture.discard()
    _reset_row(fn.body)
    _reseed()
    return _generators()


# ---- rows -----------------------------------------------------------------------------

def _row_failed(fn, e, capture):
    """A row's exception (or unset result) as its protocol error; forwards what it printed."""
    tail = ''
    over = capture.over
    if capture.size or over:
        tail = capture.take()
    if isinstance(e, NameError) and fn.body.mode == 'function' and fn.body.unset(e):
        e = _not_set()
    if over or isinstance(e, _OutputTooLarge):
        e = _OutputTooLarge()
    return _error(e, fn.body.filename, tail)


def _not_set():
    # A fresh exception each time: re-raising one instance would grow its traceback chain.
    return _ResultTypeError('result was not set (assign it, e.g. `result = args[0]`)', 'nothing')


def _rows(fn, rows, to_args, out, failed, floats_as_is, fresh):
    """The one row loop, for JSON rows and f64 columns alike. `to_args` makes a
    row's argument list (None: the row already is one), `fresh(i)` makes row
    i's anew from the request for a re-run, `out` converts a result for the
    wire or raises, `failed` stands in for a failed row's value, and
    `floats_as_is` says every float goes out unchanged (f64 frames). Checks that
    are rare (a new import, output printed, a result that is not a plain
    float) are taken out of line: this loop is the hot path."""
    values = []
    append = values.append
    errors = {}
    body = fn.body
    run = body.call
    g, pristine = body.globals, body.pristine
    sys_ = sys
    capture = _capture
    stdin = _stdin
    modules = sys.modules
    known = len(modules)
    generators = _generators()
    inf = _INF
    floats_out = fn.floats_out
    _site(body)
    getlimit = _real_getlimit
    limit = _LIMIT + _limit[1]
    i = -1
    for row in rows:
        i += 1
        # What the row before replaced (sys.stdout, sys.stdin, the shared
        # globals, the recursion limit) put back: checked at C speed (`!=` may
        # ask a value the body put in the globals; each request's _reset_row
        # compares by identity).
        try:
            if (g != pristine or sys_.stdout is not capture or sys_.stdin is not stdin
                    or getlimit() != limit):
                _reset_row(body)
        except BaseException:  # one was deleted, or that value's __eq__ raised
            _reset_row(body)
        try:
            args = row if to_args is None else to_args(row)
            if generators:
                _reseed()
            r = run(args)
            if len(modules) != known:  # the row imported something: a generator?
                if _generators() != generators:
                    generators = _before_rerun(fn)
                    r = run(fresh(i))
                known = len(modules)
            if capture.size:  # the row printed: forward it (over the cap fails the row)
                if capture.over:
                    raise _OutputTooLarge()
                capture.take()
            if type(r) is float and floats_out and (floats_as_is or -inf < r < inf and r != 0.0):
                append(r)
            elif r is _UNSET:
                raise _not_set()
            else:
                append(out(r))
        except BaseException as e:
            append(failed)
            errors[str(i)] = _row_failed(fn, e, capture)
    return values, errors


def _call(fn, rows, plain=False):
    """JSON rows in, JSON-ready values out."""
    if fn.vectorized:
        return _call_vectorized(fn, rows)
    if fn.all_numbers:
        # `plain`: every argument is a finite JSON float, so a row is usable
        # as parsed; copied, so a re-run (fresh) gets it as it came.
        to_args = list if plain else fn.convert
    else:
        to_args = fn.convert
    return _rows(fn, rows, to_args, fn.out, None, False, lambda i: to_args(rows[i]))


def _map_rows(fn, cols, n, failed):
    """The body over every row through map(), in the row loop's order: the
    results, with `failed` and an error at rows that raised. None when a row
    printed, loaded a generator or replaced what _reset_row puts back (the
    row loop's bookkeeping is needed), or raised StopIteration: map() then
    ends there, taken for the end of the rows, and the row loop gives that
    row its error as eval does."""
    capture = _capture
    rows = map(list, zip(*cols)) if cols else ([] for _ in range(n))
    _site(fn.body, mapped=True)
    results = map(fn.body.call, rows)
    values = []
    errors = {}
    while True:
        try:
            values.extend(results)  # on a raise, the rows before it stay in `values`
            break
        except BaseException as e:
            if capture.size or capture.over:
                break
            errors[str(len(values))] = _row_failed(fn, e, capture)
            values.append(failed)
    if len(values) != n or capture.size or capture.over or _generators() or _changed(fn.body):
        capture.discard()
        _reset_row(fn.body)
        return None
    return values, errors


def _f64_fast(fn, cols, n):
    """Every row through map(): the same calls in the same order as the row
    loop, without its per-row bookkeeping. Gives up (None) when a row
    printed or loaded a generator, which need that bookkeeping; the caller then
    re-runs the rows with it, so results never depend on which path ran."""
    capture = _capture
    mapped = _map_rows(fn, cols, n, 0.0)
    if mapped is None:
        return None
    out, errors = mapped
    if {float} == set(map(type, out)):  # a scan at C speed: most chunks are floats only
        return out, errors
    for i, r in enumerate(out):
        if type(r) is not float and str(i) not in errors:
            try:
                if r is _UNSET:
                    raise _not_set()
                out[i] = _f64_out(r)
            except BaseException as e:
                errors[str(i)] = _row_failed(fn, e, capture)
                out[i] = 0.0
    return out, errors


def _callf64(fn, n, payload):
    arity = len(fn.arg_in)
    if fn.vectorized:
        return _callf64_vectorized(fn, n, arity, payload)
    # Read as the payload's own doubles, each row's floats made as its row runs: a list
    # of every cell was ~2.5 MB of heap per 32 768-row chunk, which a fresh worker's
    # first chunk paid for in page faults (~600) and every chunk in memory traffic.
    flat = memoryview(payload).cast('d') if _LITTLE else _ints(memoryview(payload), 'd')
    cols = [flat[j * n:(j + 1) * n] for j in range(arity)]
    if not _generators() and not _capture.size:
        fast = _f64_fast(fn, cols, n)
        if fast is not None:
            return _f64_bytes(fast[0]), fast[1]
    rows = map(list, zip(*cols)) if arity else ([] for _ in range(n))
    values, errors = _rows(fn, rows, None, _f64_out, 0.0, True, lambda i: [c[i] for c in cols])
    return _f64_bytes(values), errors


def _f64_bytes(values):
    """The wire's little-endian doubles."""
    return _packed('d', values)


# Up to this many values struct packs as fast as array, or faster; beyond, array
# is 2-4x faster and worth its import (~5 ms: it imports collections).
_PACK_MAX = 8192


def _packed(code, values):
    """Numbers as the wire's little-endian C array of `code` ('d', 'I' or 'q'), a bytes-like object."""
    n = len(values)
    if n <= _PACK_MAX:
        from _struct import pack  # a builtin module (`struct` is its wrapper), imported on first use
        return pack('<%d%s' % (n, code), *values)
    from array import array
    result = array(code, values)
    if not _LITTLE:
        result.byteswap()
    return memoryview(result).cast('B')  # the array's own bytes, not a copy


# ---- vectorized bodies ----------------------------------------------------------------

class _ChunkError(_ResultTypeError):
    """A vectorized result that is not one column of the chunk's length: every row of the chunk fails."""


_COLUMN_DTYPES = {'number': 'float64', 'boolean': 'bool', 'enum': 'int64'}


def _column(fn, j, cells):
    """Argument j's cells as the body sees them: a numpy array where numpy is
    allowed (number, boolean, enum), else a list."""
    np = fn.numpy
    dtype = _COLUMN_DTYPES.get(fn.arg_types[j])
    if np is not None and dtype is not None:
        return np.array(cells, dtype=dtype)
    return list(cells)


def _missing(fn):
    return _ResultTypeError('result expected %s, got None (a missing value in the vectorized result)'
                            % (fn.return_type,), 'None')


def _vector_once(fn, make_args, n, out, failed, floats_as_is, raw_ok):
    """One run of the body over columns of n rows. Raises what the body raised,
    or _ChunkError when the result is not one column of n cells; else returns
    (values, errors) per cell, or (bytes, {}) when `raw_ok` and the result is
    a float64 array (f64 frames take it as it is)."""
    capture = _capture
    run = fn.body.call
    generators = _generators()
    _reset_row(fn.body)  # a row re-run alone after the chunk raised: what the run before replaced
    _site(fn.body)
    if generators:
        _reseed()
    r = run(make_args())
    if _generators() != generators:
        capture.discard()
        _reset_row(fn.body)
        _reseed()
        r = run(make_args())  # fresh columns: the first run may have changed them in place
    if capture.size:
        if capture.over:
            raise _OutputTooLarge()
        capture.take()
    if r is _UNSET:
        raise _not_set()
    np = fn.numpy
    if isinstance(r, (str, bytes, bytearray, dict, set)) or not hasattr(r, '__len__') or getattr(r, 'ndim', 1) != 1:
        raise _ChunkError('a vectorized body returns one column (a list or a 1-D array) of %d values, got %s'
                          % (n, _describe(r)), _describe(r))
    if len(r) != n:
        raise _ChunkError('a vectorized body returns one value per row: %d rows, got %d values'
                          % (n, len(r)), 'a column of %d values' % (len(r),))
    if raw_ok and np is not None and isinstance(r, np.ndarray) and r.dtype.kind == 'f':
        return memoryview(np.ascontiguousarray(r, dtype='<f8')).cast('B'), {}
    cells = r.tolist() if hasattr(r, 'tolist') else list(r)
    values = []
    append = values.append
    errors = {}
    inf = _INF
    floats_out = fn.floats_out
    for i, c in enumerate(cells):
        if type(c) is float and floats_out and (floats_as_is or -inf < c < inf and c != 0.0):
            append(c)
            continue
        try:
            if c is None:
                raise _missing(fn)
            append(out(c))
        except BaseException as e:
            append(failed)
            errors[str(i)] = _error(e, fn.body.filename)
    return values, errors


def _vector(fn, cols, n, out, failed, floats_as_is, raw_ok=False):
    """A vectorized body over a chunk's columns. If it raises (or prints past
    the cap), the chunk is re-run row by row on columns of length one, so each
    failing row gets its own error and every other row its value, exactly as
    per-row calls would."""
    if n == 0:
        return [], {}
    try:
        return _vector_once(fn, lambda: [_column(fn, j, c) for j, c in enumerate(cols)],
                            n, out, failed, floats_as_is, raw_ok)
    except _ChunkError as e:
        error = _row_failed(fn, e, _capture)
        return [failed] * n, dict((str(i), error) for i in range(n))
    except BaseException as e:
        if n == 1:
            return [failed], {'0': _row_failed(fn, e, _capture)}
        _capture.discard()  # each row prints again on its own
    values = []
    errors = {}
    for i in range(n):
        one = [c[i:i + 1] for c in cols]
        try:
            v, e = _vector_once(fn, lambda: [_column(fn, j, c) for j, c in enumerate(one)],
                                1, out, failed, floats_as_is, False)
            values.append(v[0])
            if e:
                errors[str(i)] = e['0']
        except BaseException as e:
            values.append(failed)
            errors[str(i)] = _row_failed(fn, e, _capture)
    return values, errors


def _call_vectorized(fn, rows):
    """JSON rows of a vectorized function: arguments are converted per row (a
    bad one is that row's error), the other rows go to the body as columns."""
    good = []
    converted = []
    errors = {}
    for i, row in enumerate(rows):
        try:
            converted.append(fn.convert(row))
            good.append(i)
        except BaseException as e:
            errors[str(i)] = _row_failed(fn, e, _capture)
    cols = [[row[j] for row in converted] for j in range(len(fn.arg_in))]
    chunk_values, chunk_errors = _vector(fn, cols, len(good), fn.out, None, False)
    values = [None] * len(rows)
    for k, i in enumerate(good):
        values[i] = chunk_values[k]
        error = chunk_errors.get(str(k))
        if error is not None:
            errors[str(i)] = error
    return values, errors


def _callf64_vectorized(fn, n, arity, payload):
    np = fn.numpy
    if np is not None:
        # Views of the request's own (writable) buffer: a body may change its columns in place.
        cols = list(np.frombuffer(payload, dtype='<f8').reshape(arity, n)) if arity else []
    else:
        flat = _ints(memoryview(payload), 'd')
        cols = [flat[j * n:(j + 1) * n] for j in range(arity)]
    values, errors = _vector(fn, cols, n, _f64_out, 0.0, True, raw_ok=True)
    return (values if isinstance(values, memoryview) else _f64_bytes(values)), errors


# ---- callcols: binary columns of every type ---------------------------------------

_NS_MIN = -(1 << 63)
_NS_MAX = (1 << 63) - 1
_COLS_FAILED = {'number': 0.0, 'boolean': False, 'enum': 0, 'datetime': 0, 'text': ''}
_CELL_TYPES = {'boolean': bool, 'enum': int, 'datetime': int, 'text': str}


_NUMPY_CELLS = {'number': ('<f8', 8), 'boolean': ('u1', 1), 'enum': ('<u4', 4)}


def _pad8(n):
    return (n + 7) & ~7


def _ints(view, code):
    """Little-endian cells of a column (a bytes memoryview) as a list of Python numbers."""
    if _LITTLE:
        return view.cast(code).tolist()
    from array import array
    cells = array(code)
    cells.frombytes(view)  # array(code, view) would read the bytes as items
    cells.byteswap()
    return cells.tolist()


def _datetime_ns_in(ns):
    """Nanoseconds since 1970 as the aware datetime the JSON path gives for the same instant."""
    us, sub = divmod(ns, 1000)
    value = _EPOCH + timedelta(microseconds=us)
    if not sub:
        return value
    exact = _Instant(value.year, value.month, value.day, value.hour, value.minute,
                     value.second, value.microsecond, tzinfo=_UTC)
    exact._wire = '%04d-%02d-%02dT%02d:%02d:%02d.%06d%03dZ' % (
        value.year, value.month, value.day, value.hour, value.minute, value.second,
        value.microsecond, sub)
    return exact


def _texts_in(view, offset, n):
    """A text column at `offset`: n u32 byte lengths, then UTF-8. Returns the strings and the next offset."""
    from itertools import accumulate
    lengths = _ints(view[offset:offset + 4 * n], 'I')
    start = offset + 4 * n
    ends = list(accumulate(lengths))
    total = ends[-1] if ends else 0
    raw = bytes(view[start:start + total])
    starts = [0]
    starts += ends
    if raw.isascii():
        # A byte is a character: slices of the one decoded str.
        whole = raw.decode('ascii')
        return [whole[s:e] for s, e in zip(starts, ends)], _pad8(start + total)
    if b'\0' not in raw:
        # One decode and one split at NULs put between the strings, not a
        # decode call per string. NUL is a character of its own in UTF-8, so
        # this decodes only if each string does alone, and to the same strs;
        # if not, the per-string path below raises the error it always has.
        try:
            texts = b'\0'.join([raw[s:e] for s, e in zip(starts, ends)]).decode('utf-8').split('\0')
            return texts, _pad8(start + total)
        except UnicodeDecodeError:
            pass
    raw.decode('utf-8')  # one check of the whole column: a bad byte fails the request
    # Each string on its own: one that starts inside a character fails the request.
    return [raw[s:e].decode('utf-8') for s, e in zip(starts, ends)], _pad8(start + total)


def _cols_in(fn, n, payload, cells):
    """The request's argument columns as lists of the values the JSON path
    gives (numpy columns come later, from _column, for vectorized bodies).
    A cell that did not fit its column arrives as JSON in `cells` and is
    read as on the JSON path; one that cannot be read is its row's error."""
    view = memoryview(payload)
    np = fn.numpy if fn.vectorized else None
    cols = []
    offset = 0
    for t in fn.arg_types:
        if t == 'text':
            col, offset = _texts_in(view, offset, n)
        elif t in _NUMPY_CELLS and np is not None:
            # Vectorized with numpy: an array over the request's buffer (_column copies it to its dtype).
            dtype, width = _NUMPY_CELLS[t]
            col = np.frombuffer(payload, dtype=dtype, count=n, offset=offset)
            offset = _pad8(offset + width * n)
        elif t == 'number':
            col = _ints(view[offset:offset + 8 * n], 'd')
            offset += 8 * n
        elif t == 'boolean':
            col = [b == 1 for b in view[offset:offset + n]]
            offset = _pad8(offset + n)
        elif t == 'enum':
            col = _ints(view[offset:offset + 4 * n], 'I')
            offset = _pad8(offset + 4 * n)
        else:
            col = list(map(_datetime_ns_in, _ints(view[offset:offset + 8 * n], 'q')))
            offset += 8 * n
        cols.append(col)
    bad = {}
    for k, rows in (cells or {}).items():
        j = int(k)
        read = _IN[fn.arg_types[j]]
        for r, wire in rows.items():
            i = int(r)
            try:
                cols[j][i] = read(wire)
            except BaseException as e:
                bad[i] = e
    return cols, bad


def _ns_out(x):
    """A datetime result as nanoseconds since 1970, or its ISO text (a cell) when i64 cannot hold it."""
    if type(x) is datetime and x.tzinfo is _UTC:  # the usual case
        d = x - _EPOCH
        sub = 0
    else:
        if not isinstance(x, datetime) or x.utcoffset() is None:
            return _datetime_out(x)  # raises its ResultTypeError
        d = x - _EPOCH
        wire = getattr(x, '_wire', None) if type(x) is _Instant else None
        sub = int(((_ISO.match(wire).group(7) or '') + '000000000')[6:9]) if wire else 0
    ns = ((d.days * 86400 + d.seconds) * 1000000 + d.microseconds) * 1000 + sub
    if ns < _NS_MIN or ns > _NS_MAX:
        return _datetime_out(x)
    return ns


# Each result as its column's cell (or raises its ResultTypeError); a datetime i64 cannot hold comes back as ISO text.
_COLS_OUT = {'number': _f64_out, 'boolean': _boolean_out, 'enum': _enum_out, 'text': _text_out,
             'datetime': _ns_out}


def _texts_out(values, cells):
    """A text result column's bytes: u32 byte lengths, then the UTF-8. A
    string with lone surrogates (no UTF-8 form) goes to `cells`, where the
    header's JSON escapes it, and is empty in the column."""
    joined = ''.join(values)
    if joined.isascii():  # the usual case: byte lengths are str lengths
        lengths = list(map(len, values))
        text = joined.encode('ascii')
    else:
        try:
            # One encode of the column (the UTF-8 of a concatenation is the
            # UTF-8s concatenated); each length from an encoding freed at
            # once, not from a list of n bytes objects.
            text = joined.encode('utf-8')
            lengths = list(map(len, map(str.encode, values)))
        except UnicodeEncodeError:
            encoded = []
            for i, v in enumerate(values):
                try:
                    encoded.append(v.encode('utf-8'))
                except UnicodeEncodeError:
                    cells[str(i)] = v
                    encoded.append(b'')
            lengths = list(map(len, encoded))
            text = b''.join(encoded)
    size = 4 * len(values) + len(text)
    return b''.join((_packed('I', lengths), text, bytes(_pad8(size) - size)))


def _cols_out(return_type, values):
    """A result column in the wire layout, and the cells it cannot hold: a
    datetime outside i64 nanoseconds, a text with lone surrogates, or a
    value of another type (a float the row loop passed through: the host
    checks it and names the mismatch exactly as for `call`)."""
    cells = {}
    if return_type == 'number':
        return _f64_bytes(values), cells
    want = _CELL_TYPES[return_type]
    failed = _COLS_FAILED[return_type]
    if set(map(type, values)) - {want}:
        for i, v in enumerate(values):
            if type(v) is not want:
                cells[str(i)] = v
                values[i] = failed
    if return_type == 'boolean':
        data = bytes(values)
        return data + bytes(_pad8(len(data)) - len(data)), cells
    if return_type == 'text':
        return _texts_out(values, cells), cells
    data = _packed('I' if return_type == 'enum' else 'q', values)
    return b''.join((data, bytes(_pad8(len(data)) - len(data)))), cells


def _cols_fast(fn, cols, n, out, failed, floats_as_is):
    """The rows of a callcols request through map(), as _f64_fast does for
    callf64: the same calls in the same order as the row loop, each result
    then checked as the row loop checks it (a plain str or float at C speed).
    None when a row printed or loaded a generator: the caller re-runs the
    rows through _rows, so results never depend on which path ran."""
    capture = _capture
    mapped = _map_rows(fn, cols, n, failed)
    if mapped is None:
        return None
    values, errors = mapped
    # What passes the row loop's checks unchanged: a float (any, or finite and
    # non-zero), and for text a plain str too short to pass the output cap.
    plain = str if out is _text_out and max(map(len, filter(str.__instancecheck__, values)),
                                            default=0) * 6 <= _max_output else None
    kinds = set(map(type, values))  # a scan at C speed: most chunks are plain strs, or floats only
    if kinds == {plain} or floats_as_is and kinds == {float}:
        return values, errors
    inf = _INF
    floats_out = fn.floats_out
    for i, r in enumerate(values):
        t = type(r)
        if t is plain or (t is float and floats_out and (floats_as_is or -inf < r < inf and r != 0.0)):
            continue
        key = str(i)
        if key in errors:
            continue
        try:
            if r is _UNSET:
                raise _not_set()
            values[i] = out(r)
        except BaseException as e:
            errors[key] = _row_failed(fn, e, capture)
            values[i] = failed
    if capture.size or capture.over:  # a result's own __str__/__repr__ printed
        capture.discard()
        return None
    return values, errors


# A sample of the last callcols request's small objects, kept until the next
# request replaces it. CPython's allocator unmaps a 1 MiB arena once every
# object in it is freed (keeping one empty arena at most), and a chunk of
# 8 000 text rows fills several: freed with the request, they were mapped
# fresh by the next one, 256 first-touch page faults per arena (~3 ms on this
# VM) every request. One live object in an arena keeps it mapped, its free
# pools ready for objects of any size; what stays is what the last request used.
_KEEP_EVERY = 1024
_KEEP_TYPES = frozenset((str, float, int, datetime, _Instant))
_kept = []


def _keep_arenas(lists):
    global _kept
    _kept = [x for c in lists if type(c) is list for x in c[::_KEEP_EVERY]
             if type(x) in _KEEP_TYPES and sys.getsizeof(x) <= 512]  # larger ones are not in arenas


def _callcols(fn, n, payload, cells_in):
    """A callcols request: argument columns in, one result column out, through
    the same row loop (or vectorized runner) as `call` and `callf64`."""
    cols, bad = _cols_in(fn, n, payload, cells_in)
    rt = fn.return_type
    out = _COLS_OUT[rt]
    failed = _COLS_FAILED[rt]
    floats_as_is = rt == 'number'
    if fn.vectorized:
        keep = [i for i in range(n) if i not in bad] if bad else None
        if keep is not None:
            cols = [[c[i] for i in keep] for c in cols]
        values, errors = _vector(fn, cols, len(cols[0]), out, failed, floats_as_is,
                                 raw_ok=floats_as_is)
        if isinstance(values, memoryview):
            if keep is None:
                return values, errors, {}  # float64 results as the array's own bytes
            values = values.cast('d').tolist()
        if keep is not None:
            full = [failed] * n
            moved = {}
            for k, i in enumerate(keep):
                full[i] = values[k]
                if str(k) in errors:
                    moved[str(i)] = errors[str(k)]
            values, errors = full, moved
    else:
        fast = None
        if not bad and not _generators() and not _capture.size:
            fast = _cols_fast(fn, cols, n, out, failed, floats_as_is)
        if fast is not None:
            data, cells = _cols_out(rt, fast[0])
            _keep_arenas(cols + [fast[0]])
            return data, fast[1], cells
        rows = map(list, zip(*cols)) if cols else ([] for _ in range(n))
        to_args = None
        if bad:
            def to_args(row, _i=iter(range(n))):
                i = next(_i)
                if i in bad:
                    raise bad[i]
                return row
        values, errors = _rows(fn, rows, to_args, out, failed, floats_as_is,
                               lambda i: [c[i] for c in cols])
    for i, e in bad.items():
        errors[str(i)] = _error(e, fn.body.filename)
    data, cells = _cols_out(rt, values)
    _keep_arenas(cols + [values])
    return data, errors, cells


# ---- the shared file (docs/protocol.md, "Shared file") --------------------------------
# The host may pass a file it shares with this worker (IMPROV_EXTFN_SHARED_FD):
# a callf64 request then says where its payload is in it and where the result
# goes, instead of both crossing the pipes. Mapped once (again when the host
# grows it), so its pages stay touched across requests and a numpy column is
# a view of it, no copy.
def _setup_shared(fd=None):
    """The shared file's descriptor: `fd`, or the variable's (taken out of
    the environment). A zygote's worker calls it again with its own."""
    global _shared_fd
    try:
        _shared_fd = int(fd if fd is not None else _env('IMPROV_EXTFN_SHARED_FD', pop=True))
        os.fstat(_shared_fd)
    except (TypeError, ValueError, OSError):  # unset (None), not a number, not open
        _shared_fd = None


_setup_shared()
_shared_map = None


def _shared_view(end):
    """The shared file as a writable memoryview of at least `end` bytes."""
    global _shared_map
    if _shared_map is None or len(_shared_map) < end:
        size = os.fstat(_shared_fd).st_size
        if size < end:
            raise ValueError('the shared file holds %d bytes, the request needs %d' % (size, end))
        # A view of the old map may still be alive: it is dropped, never closed.
        import mmap  # on the first shared request: functions without one never pay its import
        _shared_map = mmap.mmap(_shared_fd, size)
    return memoryview(_shared_map)


def _shared_payload(shm):
    """A shared request's payload (a view of the file) and the room its result may go to."""
    out, room, at, n = int(shm['out']), int(shm['room']), int(shm['at']), int(shm['bytes'])
    view = _shared_view(max(out + room, at + n))
    return view[at:at + n], view[out:out + room]


_in_buffer = bytearray()


def _read_exact(n):
    # Into one writable buffer kept across requests (numpy columns are views
    # of it, no copy): a large chunk's payload lands in pages already touched
    # instead of a fresh, zero-filled allocation (first touch of a page costs
    # ~10 us on a VM). Grown by a new allocation, never resized: a view of the
    # old one may still be alive. Every view of a request is gone once its
    # response is written, before the next read.
    global _in_buffer
    if len(_in_buffer) < n:
        _in_buffer = bytearray(n)
    view = memoryview(_in_buffer)[:n]
    got = 0
    while got < n:
        k = _proto_in.readinto(view[got:])
        if not k:
            sys.exit(3)
        got += k
    return view


def _work_ms(began):
    # docs/protocol.md, "workMs": this worker's own time on the request, so the
    # host sizes chunks by the work and not by how soon it got to the answer.
    return round((_perf_counter() - began) * 1000, 3)


def _serve():
    global _max_output
    ready = {'ready': 1, 'protocol': 1, 'version': '%d.%d.%d' % tuple(sys.version_info[:3])}
    if _shared_fd is not None:
        ready['shared'] = ['callf64']
    _write(ready)
    fn = None
    while True:
        line = _proto_in.readline()
        if not line:
            return
        began = _perf_counter()
        request = _loads_frame(line)
        shm = request.get('shm')
        room = None
        if shm is not None:
            payload, room = _shared_payload(shm)
        else:
            payload = _read_exact(request['bytes']) if 'bytes' in request else None
        op = request.get('op')
        rid = request.get('id')
        # A body may have replaced them; each request starts with the driver's own
        # (and each row: _reset_row), and with the globals as loaded.
        sys.stdout = _capture
        sys.stdin = _stdin
        if fn is not None:
            _reset_row(fn.body)
        if fn is None and op in ('call', 'callf64', 'callcols'):
            # No function: its load failed (an answer the host remembers) or never came.
            # Answered as R's driver answers it; the payload is read, so the stream stays in step.
            _write({'id': rid, 'error': {'type': 'ProtocolError', 'message': '%s before load' % (op,)}})
        elif op == 'call':
            values, errors = _call(fn, request['rows'], request.get('plain') is True)
            response = {'id': rid, 'values': values, 'workMs': _work_ms(began)}
            if errors:
                response['errors'] = errors
            _write(response)
        elif op == 'callf64':
            n = request['rows']
            data, errors = _callf64(fn, n, payload)
            response = {'id': rid, 'rows': n, 'workMs': _work_ms(began)}
            if errors:
                response['errors'] = errors
            if room is not None and len(data) <= len(room):
                _only_the_worker()  # the shared file is the worker's answer too
                room[:len(data)] = data  # the result goes where the host reads it
                response['shm'] = len(data)
                _write(response)
            else:
                response['bytes'] = len(data)
                _write(response, data)
        elif op == 'callcols':
            n = request['rows']
            data, errors, cells = _callcols(fn, n, payload, request.get('cells'))
            response = {'id': rid, 'rows': n, 'bytes': len(data), 'workMs': _work_ms(began)}
            if errors:
                response['errors'] = errors
            if cells:
                response['cells'] = cells
            _write(response, data)
        elif op == 'load':
            if fn is not None:
                _write({'id': rid, 'error': {'type': 'ProtocolError', 'message': 'a worker serves one function'}})
                continue
            _max_output = int(request.get('maxOutputBytes', _max_output))
            try:
                fn = _Loaded(request['fn'])
            except BaseException as e:
                error = _error(e, '<%s>' % (request['fn'].get('name'),), '')
                if isinstance(e, SyntaxError):
                    error['traceback'] = ''.join(__import__('traceback').format_exception_only(type(e), e))
                    error['message'] = '%s (line %s)' % (e.msg, e.lineno)
                _write({'id': rid, 'error': error})
                continue
            _write({'id': rid, 'ok': True})
        elif op == 'exit':
            return
        else:
            _write({'id': rid, 'error': {'type': 'ProtocolError', 'message': 'unknown op %r' % (op,)}})


if _zygote_dir is None:  # a zygote's workers serve from drivers/zygote.py
    _serve()
