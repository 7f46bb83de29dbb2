/**
 * The hostile-body corpus of hostile-paths.test.ts: Python bodies that keep
 * state, change the process around them, print, raise, sleep or return odd
 * values, each with the invariant it checks, and the code that runs one
 * through every path of the public API (eval row by row, evalBatch cold and
 * warm, evalColumns, and the vectorized form where the body has one) and
 * lists where a row's outcome differs between paths or from what the case
 * says it must be.
 *
 * Rows are x = 0, 1, …, 299 (one number argument unless a case says
 * otherwise); a case's hostile rows are mostly x % 8 == 0: row 0, a cold
 * batch's first chunk alone, rows at the ends of its next chunks (they grow
 * at most eightfold: rows 1–8, then at most 9–72, interpreter/src/scheduler.ts)
 * and rows all through the others, so state a row leaves for the rows after
 * it, in its chunk or the next one, shows.
 */
import { Value as V } from '@improv/extfn-core';
import type { PathCase } from '@improv/extfn-core/testing';

/** A case of the corpus; `numpy`: it needs numpy (`packages: 'system'`). */
export interface Case extends PathCase {
  numpy?: boolean;
}

const n = V.number;
const hostile = (x: number) => x % 8 === 0;
const same = () => 'same' as const;

/** The corpus. Each body's hostile rows are mostly x % 8 == 0 (see the header). */
export const CORPUS: Case[] = [
  {
    name: 'a `global` counter starts over on every row: every row reads 1',
    body: [
      'global calls',
      'try:',
      '    calls += 1',
      'except NameError:',
      '    calls = 1',
      'result = calls',
    ].join('\n'),
    vectorized: [
      'global calls',
      'try:',
      '    calls += 1',
      'except NameError:',
      '    calls = 1',
      'result = args[0] * 0 + calls',
    ].join('\n'),
    numpy: true,
    expect: () => n(1),
  },
  {
    name: 'a row that changes its args list (append, insert, item assignment) changes no other row’s args',
    body: [
      'x = args[0]',
      'if int(x) % 8 == 0:',
      '    args.append(99.0)',
      '    args.insert(0, -1.0)',
      'args[-1] = args[-1] * 2',
      'result = len(args) * 1000 + args[-1]',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 3198 : 1000 + 2 * x),
  },
  {
    name: 'random is back at its seed before every row: rows that do not seed it draw the same numbers, whatever earlier rows seeded or drew',
    body: [
      'import random',
      'x = int(args[0])',
      'if x % 8 == 0:',
      '    random.seed(x)',
      '    random.random()',
      'a = random.random()',
      'random.shuffle([1, 2, 3])',
      'result = a + random.randint(0, 9)',
    ].join('\n'),
    expect: (x) => (hostile(x) ? undefined : 'same'),
  },
  {
    name: 'numpy.random is back at its seed before every row: rows that do not seed it draw the same numbers',
    body: [
      'import numpy as np',
      'x = int(args[0])',
      'if x % 8 == 0:',
      '    np.random.seed(x)',
      '    np.random.rand(3)',
      'result = float(np.random.rand() + np.random.normal())',
    ].join('\n'),
    numpy: true,
    expect: (x) => (hostile(x) ? undefined : 'same'),
  },
  {
    name: 'a generator loaded by another module (tempfile imports random) is seeded before the row draws, on a fresh worker too',
    body: ['import tempfile', 'import sys', "result = sys.modules['ran' + 'dom'].random()"].join(
      '\n',
    ),
    expect: same,
  },
  {
    name: 'process settings a row changes and no row reads (recursion limit, decimal precision, gc thresholds, warnings as errors, switch interval, working directory, environment) change no row’s result',
    body: [
      'import sys, os, gc, decimal, warnings',
      'x = args[0]',
      'if int(x) % 8 == 0:',
      '    sys.setrecursionlimit(80)',
      '    decimal.getcontext().prec = 2',
      '    gc.set_threshold(1, 1, 1)',
      "    warnings.simplefilter('error')",
      '    sys.setswitchinterval(0.0001)',
      "    os.chdir('/')",
      "    os.environ['EXTFN_HOSTILE'] = str(x)",
      'result = x * 3 + 0.25',
    ].join('\n'),
    expect: (x) => n(x * 3 + 0.25),
  },
  {
    name: 'builtins a row rebinds (print to a no-op, abs, sorted) break no row’s result that does not read them',
    body: [
      'import builtins',
      'x = args[0]',
      'if int(x) % 8 == 0:',
      '    builtins.print = lambda *a, **k: None',
      '    builtins.abs = lambda v: -1',
      '    builtins.sorted = None',
      "print('row', x, end='')",
      'result = x + 0.5',
    ].join('\n'),
    expect: (x) => n(x + 0.5),
  },
  {
    name: 'a function one row defines is gone in the next: only the rows that define it can call it',
    body: [
      'x = args[0]',
      'if int(x) % 8 == 0:',
      '    def helper(v):',
      '        return v * 2',
      'try:',
      '    result = helper(x)',
      'except NameError:',
      '    result = -1.0',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 2 * x : -1),
  },
  {
    name: 'rows that print (partial lines, 100 KB, to sys.stdout and sys.stderr) keep their values; a row printing past the 1 MiB cap fails with "output too large" on every path',
    body: [
      'import sys',
      'x = int(args[0])',
      "print('p' * (x % 7), end='')",
      "sys.stderr.write('e' * (x % 5))",
      'if x % 8 == 0:',
      "    print('y' * 100000, end='')",
      'if x % 61 == 17:',
      "    print('z' * (1 << 20))",
      'result = args[0]',
    ].join('\n'),
    vectorized: [
      'import sys',
      'x = args[0]',
      "print('p' * len(x), end='')",
      'if (x % 8 == 0).any():',
      "    print('y' * 100000, end='')",
      'if (x % 61 == 17).any():',
      "    print('z' * (1 << 20))",
      'result = x',
    ].join('\n'),
    numpy: true,
    expect: (x) => (x % 61 === 17 ? /^output too large$/ : n(x)),
  },
  {
    name: 'rows that raise (ValueError, ZeroDivisionError, KeyError, sys.exit, KeyboardInterrupt) fail with their own error and the rows after them keep their values',
    body: [
      'import sys',
      'x = int(args[0])',
      'k = x % 13',
      'if k == 1:',
      "    raise ValueError('bad row %d' % x)",
      'if k == 2:',
      '    result = 1 / (x - x)',
      'elif k == 3:',
      "    result = {}['missing']",
      'elif k == 4:',
      '    sys.exit(x)',
      'elif k == 5:',
      '    raise KeyboardInterrupt',
      'else:',
      '    result = args[0]',
    ].join('\n'),
    vectorized: [
      'import sys',
      'x = args[0]',
      'k = x % 13',
      'if (k == 1).any():',
      "    raise ValueError('bad row %d' % int(x[(k == 1).argmax()]))",
      'if (k == 2).any():',
      '    y = int(x[0])',
      '    result = 1 / (y - y)',
      'elif (k == 3).any():',
      "    result = {}['missing']",
      'elif (k == 4).any():',
      '    sys.exit(int(x[0]))',
      'elif (k == 5).any():',
      '    raise KeyboardInterrupt',
      'else:',
      '    result = x',
    ].join('\n'),
    numpy: true,
    expect: (x) =>
      [
        n(x),
        /^ValueError: bad row \d+$/,
        /^ZeroDivisionError: division by zero$/,
        /^KeyError: 'missing'$/,
        /^SystemExit: the body raised SystemExit\(\d+\)/,
        /^KeyboardInterrupt: /,
      ][x % 13] ?? n(x),
  },
  {
    name: 'exceptions of the body’s own classes (one whose __str__ raises) fail their rows only, on the exec path',
    body: [
      'class Odd(Exception):',
      '    def __str__(self):',
      "        raise RuntimeError('no str')",
      'class Named(Exception):',
      '    pass',
      'x = int(args[0])',
      'if x % 8 == 0:',
      '    raise Odd()',
      'if x % 11 == 4:',
      "    raise Named('named %d' % x)",
      'result = args[0]',
    ].join('\n'),
    expect: (x) =>
      hostile(x) ? /^Odd: <unprintable Odd>$/ : x % 11 === 4 ? /^Named: named \d+$/ : n(x),
  },
  {
    name: 'special results come back as themselves (NaN, ±inf, -0.0, 2**53 + 1, a Fraction) and refused ones (an int too large for a float, None, True, a str, a Decimal) are each row’s own error',
    body: [
      'import fractions, decimal',
      'k = int(args[0]) % 12',
      "result = [float('nan'), float('inf'), -float('inf'), -0.0, 2 ** 53 + 1, fractions.Fraction(1, 4),",
      "          10 ** 400, None, True, 'five', decimal.Decimal('1.5'), 5e-324][k]",
    ].join('\n'),
    expect: (x) =>
      [
        n(Number.NaN),
        n(Infinity),
        n(-Infinity),
        n(-0),
        n(2 ** 53),
        n(0.25),
        /^result expected number, got int of 1329 bits/,
        /^result expected number, got None/,
        /^result expected number, got bool True/,
        /^result expected number, got str 'five'/,
        /^result expected number, got decimal\.Decimal/,
        n(5e-324),
      ][x % 12],
  },
  {
    name: 'recursion well below the limit (200 frames) succeeds and far past it (100 000) is RecursionError, on every path',
    body: [
      'def down(m):',
      '    return 0 if m == 0 else 1 + down(m - 1)',
      'x = int(args[0])',
      'result = down(100000 if x % 8 == 0 else 200)',
    ].join('\n'),
    expect: (x) => (hostile(x) ? /^RecursionError: maximum recursion depth exceeded/ : n(200)),
  },
  {
    name: 'rows that sleep (2 ms) keep their values and their places',
    body: [
      'import time',
      'x = args[0]',
      'if int(x) % 8 == 0:',
      '    time.sleep(0.002)',
      'result = x',
    ].join('\n'),
    expect: (x) => n(x),
  },
  {
    name: 'a signal handler a row installs and triggers fails that row only, and SIGINT to its own process is that row’s KeyboardInterrupt',
    body: [
      'import os, signal',
      'x = int(args[0])',
      'def boom(signum, frame):',
      "    raise ValueError('signal %d on row %d' % (signum, x))",
      'if x % 8 == 0:',
      '    signal.signal(signal.SIGUSR1, boom)',
      '    os.kill(os.getpid(), signal.SIGUSR1)',
      'if x % 61 == 17:',
      '    os.kill(os.getpid(), signal.SIGINT)',
      'result = args[0]',
    ].join('\n'),
    expect: (x) =>
      hostile(x)
        ? /^ValueError: signal 10 on row \d+$/
        : x % 61 === 17
          ? /^KeyboardInterrupt: /
          : n(x),
  },
  {
    name: 'garbage collection inside a row: a cycle’s weakref callback and finalizer run in the row that made them',
    body: [
      'import gc, weakref',
      'class Node:',
      '    pass',
      'a = Node()',
      'b = Node()',
      'a.other = b',
      'b.other = a',
      'fired = []',
      'watch = weakref.ref(a, lambda ref: fired.append(1))',
      'done = weakref.finalize(b, fired.append, 2)',
      'del a, b',
      'gc.collect()',
      'result = args[0] + sum(fired)',
    ].join('\n'),
    expect: (x) => n(x + 3),
  },
  {
    name: 'time and pids differ from run to run, yet every path gives every row a number (shape only)',
    body: 'import os, time\nresult = time.time() + os.getpid() + args[0]',
    shapeOnly: true,
  },
  {
    name: 'a text function (callcols and JSON frames) whose rows raise, print and return a float keeps each row’s own result',
    argTypes: ['text'],
    returnType: 'text',
    args: (i) => [
      V.text(
        `row-${String(i).padStart(3, '0')}${i % 9 === 0 ? 'é' : ''}${i % 29 === 0 ? '\u0000' : ''}`,
      ),
    ],
    body: [
      'import sys',
      's = args[0]',
      'x = int(s[4:7])',
      'if x % 13 == 1:',
      "    raise ValueError('bad ' + s)",
      'if x % 8 == 0:',
      '    print(s * 100)',
      "    sys.stdout.write('partial')",
      'if x % 29 == 5:',
      '    result = 5.0',
      'else:',
      "    result = s.upper() + '·' + str(len(args))",
    ].join('\n'),
    vectorized: [
      'import sys',
      'out = []',
      'for s in args[0]:',
      '    x = int(s[4:7])',
      '    if x % 13 == 1:',
      "        raise ValueError('bad ' + s)",
      '    if x % 8 == 0:',
      '        print(s * 100)',
      "        sys.stdout.write('partial')",
      "    out.append(5.0 if x % 29 == 5 else s.upper() + '·' + str(len(args)))",
      'result = out',
    ].join('\n'),
    expect: (x) =>
      x % 13 === 1
        ? /^ValueError: bad row-\d+/
        : x % 29 === 5
          ? /^result expected text, got float 5\.0$/
          : undefined,
  },
  {
    name: 'a datetime function of a datetime, an enum and a boolean (callcols) whose rows raise and print keeps each row’s own result',
    argTypes: ['datetime', 'enum', 'boolean'],
    returnType: 'datetime',
    args: (i) => [
      V.datetime(new Date(Date.UTC(2024, 0, 1) + i * 3_600_123), i % 7 === 0 ? 123 : 0),
      V.enum(i),
      V.boolean(i % 3 === 0),
    ],
    body: [
      'from datetime import timedelta',
      'when, k, flag = args',
      'if k % 13 == 1:',
      "    raise ValueError('enum %d' % k)",
      'if flag and k % 8 == 0:',
      "    print('shift', when)",
      'result = when + timedelta(days=k, microseconds=1 if flag else 0)',
    ].join('\n'),
    expect: (x) => (x % 13 === 1 ? /^ValueError: enum \d+$/ : undefined),
  },
  {
    name: 'a vectorized body that changes its columns in place and then raises is re-run row by row on fresh columns: each row gets what per-row eval gives',
    body: [
      'x = args[0] * 2',
      'if x % 122 == 34:',
      "    raise ValueError('row %d' % int(x / 2))",
      'result = x',
    ].join('\n'),
    vectorized: [
      'x = args[0]',
      'x *= 2',
      'bad = (x % 122) == 34',
      'if bad.any():',
      "    raise ValueError('row %d' % int(x[bad.argmax()] / 2))",
      'result = x',
    ].join('\n'),
    numpy: true,
    expect: (x) => (x % 61 === 17 ? /^ValueError: row \d+$/ : n(2 * x)),
  },
];
