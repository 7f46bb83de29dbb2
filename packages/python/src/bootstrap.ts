/**
 * The constant program on python's command line. It reads `N\n` and then N
 * bytes of driver program from fd 0 with unbuffered `os.read`, so not one
 * byte of the request stream behind the driver is swallowed, and runs the
 * program. (`python3 -` would wait for EOF before running anything: no
 * stream of calls.) Only the text before the first NUL is compiled; what
 * follows is left to it as `_extfn_data` (NUL cannot occur in Python source,
 * so the driver's own source runs whole). The driver itself is sent
 * precompiled once the host has compiled it (below).
 */
import { execFile } from 'node:child_process';

export const BOOTSTRAP = [
  'try:',
  '    import posix as os  # loaded with the interpreter; `os` would import stat, posixpath…',
  'except ImportError:',
  '    import os',
  'def _extfn_read(n):',
  '    parts = []',
  '    while n:',
  '        c = os.read(0, n)',
  '        if not c:',
  '            raise SystemExit(3)',
  '        parts.append(c)',
  '        n -= len(c)',
  "    return b''.join(parts)",
  "_extfn_n = b''",
  "while not _extfn_n.endswith(b'\\n'):",
  '    _extfn_n += _extfn_read(1)',
  "_extfn_program, _, _extfn_data = _extfn_read(int(_extfn_n)).partition(b'\\0')",
  "exec(compile(_extfn_program, '<extfn-driver>', 'exec'))",
].join('\n');

/**
 * `-s -S -B -c`, not `-I`: `-I` implies `-E`, which ignores PYTHONHASHSEED
 * and so breaks determinism. The sandbox passes a cleared environment (only
 * HOME, PATH, LANG and our PYTHON* variables), `-s` skips the user site, `-S`
 * the site module, `-B` bytecode writes, and the driver drops the working
 * directory from sys.path (what `-P` does on 3.11+).
 */
export const PYTHON_ARGS: readonly string[] = ['-s', '-S', '-B', '-c', BOOTSTRAP];

/**
 * Run once on the host by the interpreter itself, outside the sandbox (as the
 * interpreter lookup already does): compiles the driver source read on stdin
 * and prints the interpreter's `sys.hexversion`, a newline and the code
 * object, marshalled, in base64. Nothing of a body is involved.
 */
const PRECOMPILE = [
  'import sys, marshal, binascii',
  'code = compile(sys.stdin.buffer.read(), "<extfn-driver>", "exec", dont_inherit=True, optimize=0)',
  'sys.stdout.write("%d\\n" % sys.hexversion)',
  'sys.stdout.write(binascii.b2a_base64(marshal.dumps(code), newline=False).decode("ascii"))',
].join('\n');

/**
 * The driver as a short program that runs its precompiled code object:
 * compiling the 1 100-line driver is ~20 ms of CPU in every worker start, the
 * code object loads in ~1 ms. Code objects are only valid for the version
 * that made them: on any other (the interpreter was upgraded since), the stub
 * compiles the source as before.
 *
 * Both travel after a NUL, as the bootstrap's `_extfn_data`, not as literals
 * of the stub: the bootstrap compiles only the few lines before it, where a
 * 180 KB literal cost ~2 ms of CPU (tokenizing it, and the memory it
 * touches) in every start. The code object is base64 (the program is UTF-8
 * text), the source is its UTF-8, read only on another version.
 */
export function driverStub(hexversion: number, code: string, source: string): string {
  return [
    'import sys',
    `if sys.hexversion == ${hexversion}:`,
    '    import binascii, marshal',
    `    _extfn_code = marshal.loads(binascii.a2b_base64(memoryview(_extfn_data)[:${code.length}]))`,
    'else:',
    `    _extfn_code = compile(_extfn_data[${code.length}:], '<extfn-driver>', 'exec')`,
    'del _extfn_data',
    'exec(_extfn_code)',
    `\0${code}${source}`,
  ].join('\n');
}

/** Stubs by interpreter path and program (driver, zygote), for this process (the stub checks the version it runs on). */
const stubs = new Map<string, Map<string, Promise<string | undefined>>>();

/**
 * `driverStub` for this interpreter, or undefined when it cannot compile
 * here (the source is used then). Once per interpreter, program and host process.
 */
export function precompiledDriver(python: string, source: string): Promise<string | undefined> {
  let programs = stubs.get(python);
  if (!programs) {
    programs = new Map();
    stubs.set(python, programs);
  }
  let stub = programs.get(source);
  if (!stub) {
    stub = compileWith(python, source);
    programs.set(source, stub);
  }
  return stub;
}

function compileWith(python: string, source: string): Promise<string | undefined> {
  return new Promise((done) => {
    const child = execFile(
      python,
      ['-s', '-S', '-B', '-c', PRECOMPILE],
      // a clean environment, the workers' hash seed: nothing of the host's PYTHON* variables
      { env: { PYTHONHASHSEED: '0', LANG: 'C.UTF-8' }, timeout: 10_000, maxBuffer: 16 << 20 },
      (error, stdout) => {
        const match = error ? null : /^(\d+)\n([A-Za-z0-9+/=]+)$/.exec(stdout);
        done(match ? driverStub(Number(match[1]), match[2]!, source) : undefined);
      },
    );
    child.stdin?.on('error', () => done(undefined));
    child.stdin?.end(source);
  });
}
