/**
 * The constant program on python's command line. It reads `N\n` and then N
 * bytes of driver source from fd 0 with unbuffered `os.read`, so not one byte
 * of the request stream behind the driver is swallowed, and runs the driver.
 * (`python3 -` would wait for EOF before running anything: no stream of calls.)
 */
export const BOOTSTRAP = [
  'import os',
  'def _extfn_read(n):',
  "    b = b''",
  '    while len(b) < n:',
  '        c = os.read(0, n - len(b))',
  '        if not c:',
  '            raise SystemExit(3)',
  '        b += c',
  '    return b',
  "_extfn_n = b''",
  "while not _extfn_n.endswith(b'\\n'):",
  '    _extfn_n += _extfn_read(1)',
  "exec(compile(_extfn_read(int(_extfn_n)), '<extfn-driver>', 'exec'))",
].join('\n');

/**
 * `-s -S -B -c`, not `-I`: `-I` implies `-E`, which ignores PYTHONHASHSEED
 * and so breaks determinism. The sandbox passes a cleared environment (only
 * HOME, PATH, LANG and our PYTHON* variables), `-s` skips the user site, `-S`
 * the site module, `-B` bytecode writes, and the driver drops the working
 * directory from sys.path (what `-P` does on 3.11+).
 */
export const PYTHON_ARGS: readonly string[] = ['-s', '-S', '-B', '-c', BOOTSTRAP];
