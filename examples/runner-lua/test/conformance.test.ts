/**
 * The Lua example through the whole conformance kit, in the Restricted
 * sandbox. Without Lua or a usable sandbox every kit test is still listed,
 * skipped with the reason in its name.
 */
import { existsSync } from 'node:fs';
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { probeSandbox } from '@improv/extfn-sandbox';
import { test } from 'vitest';
import { lua } from '../src/index.js';

const LUA = process.env.IMPROV_EXTFN_LUA ?? '/usr/bin/lua5.4';
const sandbox = await probeSandbox({ policy: 'restricted' });
const why = !existsSync(LUA)
  ? `skipped: no Lua 5.4 at ${LUA}`
  : !sandbox.ok
    ? `skipped: Restricted sandbox unavailable here (${sandbox.problem ?? sandbox.summary})`
    : undefined;

runnerConformanceSuite(
  test.skipIf(why !== undefined),
  () => lua({ interpreter: LUA, policy: 'restricted' }),
  {
    prefix: why ? `lua conformance (${why}):` : 'lua (Restricted) conformance:',
    datetimeDigits: 9,
    loopTimeoutMs: 1_000,
    bodies: {
      identity: 'result = args[1]',
      add: 'result = args[1] + args[2]',
      raise: 'error("nope")',
      noLoad: 'result = (',
      wrongReturn: 'result = "five"',
      loop: 'while true do end',
      largeResult: 'result = string.rep("x", 200000)',
      flood: 'for i = 1, 60000 do print(string.rep("z", 99)) end\nresult = 0',
      mixedBatch:
        'local x = args[1]\nif x < 0 then error("nope") end\nwhile x == 13 do end\nresult = 2 * x',
      remember: 'if leaked == nil then result = -1 else result = leaked end\nleaked = args[1]',
      random: 'result = math.random()',
    },
    verbatim: [
      {
        name: 'long brackets, backslashes and quotes',
        body: 'result = [[a\\b"c\'d]] .. "\\65"',
        returnType: 'text',
        expected: Value.text('a\\b"c\'dA'),
      },
      {
        name: 'CRLF line ends, tabs and non-ASCII',
        body: 'local a = "é𝄞"\r\n\tresult = a .. "\\u{41}"\r\n',
        returnType: 'text',
        expected: Value.text('é𝄞A'),
      },
    ],
  },
);
