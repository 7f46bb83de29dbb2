/** The JavaScript example through the whole conformance kit, in one line of setup: what a third-party runner author writes. */
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { test } from 'vitest';
import { javascript } from '../src/index.js';

runnerConformanceSuite(test, () => javascript(), {
  prefix: 'javascript:',
  bodies: {
    identity: 'result = args[0];',
    add: 'result = args[0] + args[1];',
    raise: 'throw new Error("nope");',
    noLoad: 'result = (;',
    wrongReturn: 'result = "five";',
    loop: 'for (;;) {}',
    largeResult: 'result = "x".repeat(200000);',
    flood: 'for (let i = 0; i < 100000; i++) print("y".repeat(50));',
    mixedBatch:
      'const x = args[0]; if (x < 0) throw new Error("nope"); while (x === 13) {} result = 2 * x;',
    remember: 'result = typeof leaked === "undefined" ? -1 : leaked; globalThis.leaked = args[0];',
    random: 'result = Math.random();',
  },
  verbatim: [
    {
      name: 'backslashes and quotes',
      body: 'result = "a\\\\b\\"c\'d";',
      returnType: 'text',
      expected: Value.text('a\\b"c\'d'),
    },
    {
      name: 'CRLF line ends and tabs',
      body: 'let a = 1;\r\n\tresult = a + 1;\r\n',
      returnType: 'number',
      expected: Value.number(2),
    },
    {
      name: 'non-ASCII and escapes',
      body: 'result = "\\x41é𝄞";',
      returnType: 'text',
      expected: Value.text('Aé𝄞'),
    },
  ],
});
