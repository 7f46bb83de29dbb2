/**
 * What the Lua driver decides beyond the kit: a body's output never reaches
 * the protocol channel (Lua cannot move fd 1), the body's environment has no
 * way to processes, and datetimes are tables of seconds and nanoseconds.
 */
import { existsSync } from 'node:fs';
import { Registry, Value } from '@improv/extfn-core';
import { probeSandbox } from '@improv/extfn-sandbox';
import { afterAll, describe, expect, test } from 'vitest';
import { lua } from '../src/index.js';

const LUA = process.env.IMPROV_EXTFN_LUA ?? '/usr/bin/lua5.4';
const sandbox = await probeSandbox({ policy: 'restricted' });
const ok = existsSync(LUA) && sandbox.ok;

describe.skipIf(!ok)(
  `the Lua driver${ok ? '' : ` (skipped: no ${LUA} or no Restricted sandbox here)`}`,
  () => {
    const registry = new Registry({ runners: [lua({ interpreter: LUA, maxWorkers: 1 })] });
    const define = (
      name: string,
      body: string,
      argTypes: Value['type'][],
      returnType: Value['type'],
    ) =>
      registry.register({
        name,
        language: 'lua',
        body,
        argTypes,
        returnType,
        pure: false,
      } as never);
    afterAll(() => registry.close());

    test('print and io.write go to stderr; the warm worker keeps serving', async () => {
      define(
        'chatty',
        'print("{\\"id\\":1,\\"values\\":[666]}")\nio.write("x\\n")\nresult = args[1] + 1',
        ['number'],
        'number',
      );
      const rows = [1, 2, 3].map((x) => [Value.number(x)]);
      expect(await registry.evalBatch('chatty', rows)).toEqual([2, 3, 4].map(Value.number));
      expect(await registry.eval('chatty', [Value.number(9)])).toEqual(Value.number(10));
    });

    test('the body has no way to fd 1 or to processes: no io.stdout, os.execute, io.popen, require, package, debug', async () => {
      define(
        'reach',
        'result = tostring(io.stdout) .. tostring(os.execute) .. tostring(io.popen) .. tostring(require) .. tostring(package) .. tostring(debug)',
        [],
        'text',
      );
      expect(await registry.eval('reach', [])).toEqual(Value.text('nil'.repeat(6)));
    });

    test('a datetime is { seconds, nanos } since 1970 in UTC; a result may be such a table or an ISO-8601 string', async () => {
      define(
        'next_day',
        'local t = args[1]\nresult = { seconds = t.seconds + 86400, nanos = t.nanos }',
        ['datetime'],
        'datetime',
      );
      define('parts', 'result = args[1].seconds * 1e9 + args[1].nanos', ['datetime'], 'number');
      expect(
        await registry.eval('next_day', [Value.datetime('1969-12-31T23:59:59.000000001Z')]),
      ).toEqual(Value.datetime('1970-01-01T23:59:59.000000001Z'));
      expect(await registry.eval('parts', [Value.datetime('1970-01-01T00:00:01.5Z')])).toEqual(
        Value.number(1.5e9),
      );
      define('iso', 'result = "2024-02-29T12:00:00.25Z"', [], 'datetime');
      expect(await registry.eval('iso', [])).toEqual(Value.datetime('2024-02-29T12:00:00.25Z'));
    });
  },
);
