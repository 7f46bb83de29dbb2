/** The runner conformance kit (core/testing) against the Python runner, Restricted sandbox. */
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { test } from 'vitest';
import { noRestricted, PYTHON, restrictedOk, runner } from './helpers.js';

const bodies = {
  identity: 'result = args[0]',
  add: 'result = args[0] + args[1]',
  raise: 'raise ValueError("nope")',
  noLoad: 'result = (',
  wrongReturn: 'result = "not a number"',
  loop: 'while True:\n    pass',
  largeResult: 'result = "x" * 200000',
  flood: 'for i in range(60000):\n    print("z" * 99)\nresult = 0',
  mixedBatch:
    'x = args[0]\nif x < 0:\n    raise ValueError("nope")\nwhile x == 13:\n    pass\nresult = 2 * x',
  remember: 'result = globals().get("leaked", -1.0)\nglobals()["leaked"] = args[0]',
  random: 'import random\nresult = random.random()',
  vectorizedMixed: [
    'xs = list(args[0])',
    'while 13 in xs:',
    '    pass',
    'if any(x < 0 for x in xs):',
    '    raise ValueError("nope")',
    'result = [None if x == 7 else 2 * x for x in xs]',
  ].join('\n'),
};

const verbatim = [
  {
    name: 'backslashes',
    body: String.raw`result = "C:\\dir\\file" + "\x41"`,
    returnType: 'text' as const,
    expected: Value.text('C:\\dir\\fileA'),
  },
  {
    name: 'triple quotes',
    body: `result = """a "b" 'c' ''' """`,
    returnType: 'text' as const,
    expected: Value.text(`a "b" 'c' ''' `),
  },
  {
    name: 'CRLF and tabs',
    body: 'if True:\r\n\tx = "\t"\r\nresult = x',
    returnType: 'text' as const,
    expected: Value.text('\t'),
  },
];

// Without the interpreter every kit test is still listed, skipped with the reason in its name.
runnerConformanceSuite(test.skipIf(!restrictedOk), () => runner({ policy: 'restricted' }), {
  bodies,
  datetimeDigits: 9,
  verbatim,
  prefix: restrictedOk
    ? `python (${PYTHON}, Restricted) conformance:`
    : `python conformance (${noRestricted}):`,
});
