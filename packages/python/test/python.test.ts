/**
 * The Python runner end to end: what the Restricted sandbox keeps a body
 * from (memory, host files and secrets, the network, runaway loops and
 * forks, output floods), every value type in and out, and how bodies are
 * compiled (exec mode, what a body defines, syntax errors, line numbers).
 * Real runs of /usr/bin/python3.
 */
import { rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { ExtFnError, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { python } from '../src/index.js';
import {
  failure,
  hasPython,
  noRestricted,
  processesWith,
  type registryWith,
  restrictedOk,
  runner,
  scopedRegistry,
  waitFor,
} from './helpers.js';

const noPython = 'skipped: /usr/bin/python3 is not installed';
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
/** A body that dials 127.0.0.1:args[0] and says how that went. */
const DIAL = [
  'import socket',
  'try:',
  '    s = socket.create_connection(("127.0.0.1", int(args[0])), timeout=3)',
  '    result = "connected: " + s.recv(16).decode()',
  '    s.close()',
  'except OSError as e:',
  '    result = "blocked: " + type(e).__name__',
].join('\n');

/** A TCP server on the host's 127.0.0.1 that greets and counts every connection. */
async function loopbackServer() {
  let accepted = 0;
  const server = createServer((socket) => {
    accepted++;
    socket.end('hello');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    accepted: () => accepted,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const restricted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('restricted', fns, options);
const trusted = (
  fns: Parameters<typeof registryWith>[1],
  options: Parameters<typeof registryWith>[2] = {},
) => scopedRegistry('trusted', fns, options);

describe.skipIf(!restrictedOk)(
  `python under Restricted (${restrictedOk ? 'bubblewrap' : noRestricted})`,
  () => {
    test('adds numbers: 2 + 3 = 5', async () => {
      const { registry } = restricted({
        add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
      });
      expect(await registry.eval('add', [Value.number(2), Value.number(3)])).toEqual(
        Value.number(5),
      );
      expect(
        await registry.eval('add', [Value.number(2), Value.number(3)], { mode: 'oneShot' }),
      ).toEqual(Value.number(5));
    });

    test('text upper: "hi" → "HI!"', async () => {
      const { registry } = restricted({
        shout: ['result = args[0].upper() + "!"', ['text'], 'text'],
      });
      expect(await registry.eval('shout', [Value.text('hi')])).toEqual(Value.text('HI!'));
    });

    test('a raising body is a Runtime error "ValueError: nope" with the traceback at the line the user wrote', async () => {
      const body = 'x = 1\n\nraise ValueError("nope")\n';
      const { registry } = restricted({ boom: [body, [], 'number'] });
      for (const mode of ['warm', 'oneShot'] as const) {
        const error = await failure(registry.eval('boom', [], { mode }));
        expect(error.kind).toBe('Runtime');
        expect(error.message).toBe('function boom: ValueError: nope');
        expect(error.stderr).toMatch(/File "<boom>", line 3/);
        expect(error.stderr).toMatch(/raise ValueError\("nope"\)/);
        expect(error.stderr).not.toMatch(/extfn-driver/);
      }
    });

    test('declared number but returns a string → Runtime naming expected and received types', async () => {
      const { registry } = restricted({ wrong: ['result = "five"', [], 'number'] });
      const error = await failure(registry.eval('wrong', []));
      expect(error.kind).toBe('Runtime');
      expect(error.message).toBe("function wrong: result expected number, got str 'five'");
    });

    test('an infinite loop with a 2 s timeout → Timeout in under 8 s, warm and one-shot', async () => {
      const { registry, runner: r } = restricted({
        loop: ['while True:\n    pass', [], 'number'],
        add: ['result = args[0] + args[1]', ['number', 'number'], 'number'],
      });
      for (const mode of ['warm', 'oneShot'] as const) {
        const started = performance.now();
        const error = await failure(registry.eval('loop', [], { timeoutMs: 2_000, mode }));
        expect(error.kind).toBe('Timeout');
        expect(error.ms).toBe(2_000);
        expect(performance.now() - started).toBeLessThan(8_000);
      }
      expect(r.stats().killed).toBe(1);
      expect(await registry.eval('add', [Value.number(1), Value.number(1)])).toEqual(
        Value.number(2),
      );
    });

    test('a 2 GB bytearray is a Runtime error under Restricted', async () => {
      const { registry } = restricted({
        hog: ['b = bytearray(2 * 1024**3)\nresult = len(b)', [], 'number'],
      });
      const error = await failure(registry.eval('hog', []));
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(/MemoryError/);
      expect(error.limit).toBe('memory');
    });

    test('a host /tmp file cannot be read under Restricted', async () => {
      const path = `/tmp/extfn-python-secret-${process.pid}.txt`;
      writeFileSync(path, 'host secret');
      cleanups.push(() => rmSync(path, { force: true }));
      const { registry } = restricted({
        peek: [`result = open(${JSON.stringify(path)}).read()`, [], 'text'],
      });
      const error = await failure(registry.eval('peek', []));
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(/FileNotFoundError/);
    });

    test('an environment secret of the host is not visible', async () => {
      process.env.EXTFN_TEST_SECRET = 'hunter2';
      cleanups.push(() => {
        delete process.env.EXTFN_TEST_SECRET;
      });
      const { registry } = restricted({
        env: ['import os\nresult = repr(sorted(os.environ.items()))', [], 'text'],
      });
      const seen = (await registry.eval('env', [])) as { value: string };
      expect(seen.value).not.toMatch(/hunter2|EXTFN_TEST_SECRET/);
      expect(seen.value).toMatch(/PYTHONHASHSEED/);
    });

    test('~ is /tmp and /home is empty (or absent)', async () => {
      const body =
        "import os\nhome = os.listdir('/home') if os.path.isdir('/home') else []\nresult = os.path.expanduser('~') + '|' + ','.join(home)";
      const { registry } = restricted({ home: [body, [], 'text'] });
      expect(await registry.eval('home', [])).toEqual(Value.text('/tmp|'));
    });

    test('a TCP server on the host loopback cannot be reached (Trusted control connects)', async () => {
      const server = await loopbackServer();
      cleanups.push(() => server.close());
      const fns = { dial: [DIAL, ['number'], 'text'] } satisfies Parameters<typeof registryWith>[1];
      const port = [Value.number(server.port)];
      for (const mode of ['warm', 'oneShot'] as const) {
        // the sandbox has a loopback of its own, where nothing listens
        expect(await restricted(fns).registry.eval('dial', port, { mode })).toEqual(
          Value.text('blocked: ConnectionRefusedError'),
        );
      }
      expect(server.accepted()).toBe(0);
      expect(await trusted(fns).registry.eval('dial', port)).toEqual(
        Value.text('connected: hello'),
      );
      expect(server.accepted()).toBe(1);
    });

    test('200 KB of prints succeeds; 5 MB is "output too large" (and the worker goes on)', async () => {
      const { registry } = restricted({
        chatty: ['for i in range(2000):\n    print("x" * 99)\nresult = 1', [], 'number'],
        flood: ['for i in range(50000):\n    print("y" * 99)\nresult = 1', [], 'number'],
      });
      for (const mode of ['warm', 'oneShot'] as const) {
        expect(await registry.eval('chatty', [], { mode })).toEqual(Value.number(1));
        const error = await failure(registry.eval('flood', [], { mode }));
        expect(error.kind).toBe('Runtime');
        expect(error.limit).toBe('output');
        expect(error.message).toMatch(/output too large/);
        expect(error.fix, mode).toMatch(/at most maxOutputBytes .*raise maxOutputBytes/);
      }
      expect(await registry.eval('chatty', [])).toEqual(Value.number(1));
    });

    test('a forked grandchild is killed at the deadline', async () => {
      const marker = `${process.pid}${Date.now() % 100000}.25`;
      const body = [
        'import os',
        'if os.fork() == 0:',
        '    os.setsid()',
        `    os.execv("/bin/sleep", ["sleep", "${marker}"])`,
        'while True:',
        '    pass',
      ].join('\n');
      const { registry } = restricted({ fork: [body, [], 'number'] });
      for (const mode of ['warm', 'oneShot'] as const) {
        const error = await failure(registry.eval('fork', [], { timeoutMs: 1_500, mode }));
        expect(error.kind).toBe('Timeout');
        expect(await waitFor(() => processesWith(marker).length === 0)).toBe(true);
      }
    });

    test('print() never corrupts a result, even text shaped like a response frame', async () => {
      const body = [
        'import sys, os',
        'print(\'{"id":2,"values":[42]}\')',
        'sys.stdout.write(\'{"ready":1,"protocol":1}\\n\')',
        'os.write(1, b\'{"id":3,"values":[7]}\\n\')',
        'result = 1',
      ].join('\n');
      const { registry } = restricted({ noisy: [body, [], 'number'] });
      expect(await registry.eval('noisy', [])).toEqual(Value.number(1));
      expect(await registry.eval('noisy', [], { mode: 'oneShot' })).toEqual(Value.number(1));
      const rows = Array.from({ length: 20 }, () => []);
      expect(await registry.evalBatch('noisy', rows)).toEqual(rows.map(() => Value.number(1)));
    });

    test('string set ordering and hash() are the same in every process (PYTHONHASHSEED fixed)', async () => {
      const body =
        'result = ",".join(set(["apple", "banana", "cherry", "date", "elder", "fig"])) + "|" + str(hash("abc"))';
      const { registry } = restricted({ order: [body, [], 'text'] });
      const results = new Set<string>();
      for (let i = 0; i < 3; i++) {
        results.add(
          ((await registry.eval('order', [], { mode: 'oneShot' })) as { value: string }).value,
        );
      }
      results.add(((await registry.eval('order', [])) as { value: string }).value);
      expect(results.size).toBe(1);
    });

    test('the default interpreter (python3 on PATH) is one the sandbox can run, even behind a pyenv shim', async () => {
      const r = python({ policy: 'restricted' });
      cleanups.push(() => r.close());
      const probe = await r.probe();
      expect(probe.available, probe.detail).toBe(true);
      expect(probe.interpreter?.path).not.toMatch(/^\/root\//);
    });

    test('Restricted without a working sandbox → Sandbox error, no process started', async () => {
      const { registry, runner: r } = restricted(
        { add: ['result = args[0] + args[1]', ['number', 'number'], 'number'] },
        { bwrapPath: '/nonexistent/bwrap' },
      );
      for (const mode of ['warm', 'oneShot'] as const) {
        const error = await failure(
          registry.eval('add', [Value.number(1), Value.number(2)], { mode }),
        );
        expect(error.kind).toBe('Sandbox');
        expect(error.fix).toBeTruthy();
      }
      expect(r.stats().started).toBe(0);
    });
  },
);

describe.skipIf(!hasPython)(
  `python under Trusted (${hasPython ? PYTHON_LABEL() : noPython})`,
  () => {
    test('a 10 MB bytearray succeeds under Trusted', async () => {
      const { registry } = trusted({
        alloc: ['b = bytearray(10 * 1024**2)\nresult = len(b)', [], 'number'],
      });
      expect(await registry.eval('alloc', [])).toEqual(Value.number(10 * 1024 ** 2));
    });

    test('a host /tmp file can be read under Trusted', async () => {
      const path = `/tmp/extfn-python-visible-${process.pid}.txt`;
      writeFileSync(path, 'host file');
      cleanups.push(() => rmSync(path, { force: true }));
      const { registry } = trusted({
        peek: [`result = open(${JSON.stringify(path)}).read()`, [], 'text'],
      });
      expect(await registry.eval('peek', [])).toEqual(Value.text('host file'));
    });

    test('a missing interpreter → LanguageUnavailable, no process started', async () => {
      const r = python({ interpreter: '/nonexistent/python3', policy: 'trusted' });
      const { Registry } = await import('@improv/extfn-core');
      const registry = new Registry({ runners: [r] });
      cleanups.push(() => registry.close());
      registry.register({
        name: 'f',
        language: 'python',
        body: 'result = 1',
        argTypes: [],
        returnType: 'number',
      });
      const error = await failure(registry.eval('f', []));
      expect(error.kind).toBe('LanguageUnavailable');
      expect(error.message).toMatch(/python/);
      expect(error.fix).toMatch(/IMPROV_EXTFN_PYTHON/);
      expect(r.stats().started).toBe(0);
      const probe = await r.probe();
      expect(probe.available).toBe(false);
    });

    test('IMPROV_EXTFN_PYTHON chooses the interpreter; the path is made real', async () => {
      process.env.IMPROV_EXTFN_PYTHON = '/usr/bin/python3';
      cleanups.push(() => {
        delete process.env.IMPROV_EXTFN_PYTHON;
      });
      const r = python({ policy: 'trusted' });
      cleanups.push(() => r.close());
      const probe = await r.probe();
      expect(probe.available).toBe(true);
      expect(probe.interpreter?.path).toMatch(/^\/usr\/bin\/python3\.\d+$/);
      expect(probe.interpreter?.version).toMatch(/^3\.\d+\.\d+$/);
    });

    test('backslashes, triple quotes, tabs, \\x41, non-ASCII and CRLF mean what they mean in a .py file', async () => {
      const cases: [string, string, string][] = [
        [
          'backslashes',
          String.raw`result = "a\\b" + r"c\d" + "\x41\u00e9\N{BULLET}"`,
          'a\\bc\\dAé•',
        ],
        [
          'triple quotes',
          `result = """one 'two' "three" ''' """ + '''"""'''`,
          `one 'two' "three" ''' """`,
        ],
        ['tabs', 'if True:\n\tresult = "\\t|\t"', '\t|\t'],
        ['CRLF line ends', 'x = "a"\r\ny = """b\r\nc"""\r\nresult = x + y', 'ab\nc'],
        ['non-ASCII source', 'π = "ünïcødé 😀"\nresult = π', 'ünïcødé 😀'],
      ];
      const { registry } = trusted(
        Object.fromEntries(
          cases.map(([name, body]) => [name.replace(/\W/g, '_'), [body, [], 'text']]),
        ),
      );
      for (const [name, , expected] of cases) {
        expect(await registry.eval(name.replace(/\W/g, '_'), []), name).toEqual(
          Value.text(expected),
        );
      }
    });

    test('number results: int and float accepted, bool and too-large ints refused, NaN/±inf/-0 kept', async () => {
      const { registry } = trusted({
        id: ['result = args[0]', ['number'], 'number'],
        int: ['result = 7', [], 'number'],
        bool: ['result = True', [], 'number'],
        big: ['result = 10 ** 400', [], 'number'],
        inf: ['result = float("inf") * args[0]', ['number'], 'number'],
      });
      for (const n of [
        Number.NaN,
        Infinity,
        -Infinity,
        -0,
        0,
        5e-324,
        1.7976931348623157e308,
        0.1,
      ]) {
        const out = (await registry.eval('id', [Value.number(n)])) as { value: number };
        expect(Object.is(out.value, n), `identity of ${n}`).toBe(true);
      }
      expect(await registry.eval('int', [])).toEqual(Value.number(7));
      expect((await failure(registry.eval('bool', []))).message).toBe(
        'function bool: result expected number, got bool True',
      );
      const big = await failure(registry.eval('big', []));
      expect(big.message).toMatch(
        /result expected number, got int of 1329 bits \(too large for a float\)/,
      );
      expect(await registry.eval('inf', [Value.number(-1)])).toEqual(Value.number(-Infinity));
    });

    test('datetime: aware UTC in, aware out (any zone), naive refused, nanoseconds kept when unchanged', async () => {
      const { registry } = trusted({
        id: ['result = args[0]', ['datetime'], 'datetime'],
        tz: ['assert args[0].tzinfo is not None\nresult = args[0].year', ['datetime'], 'number'],
        shifted: [
          'from datetime import timezone, timedelta\nresult = args[0].astimezone(timezone(timedelta(hours=5)))',
          ['datetime'],
          'datetime',
        ],
        naive: ['from datetime import datetime\nresult = datetime(2020, 1, 1)', [], 'datetime'],
      });
      const exact = Value.datetime('2025-03-31T23:59:59.123456789Z');
      expect(await registry.eval('id', [exact])).toEqual(exact);
      expect(await registry.eval('tz', [exact])).toEqual(Value.number(2025));
      const micro = Value.datetime('2025-03-31T23:59:59.123456Z');
      expect(await registry.eval('shifted', [micro])).toEqual(micro);
      const naive = await failure(registry.eval('naive', []));
      expect(naive.message).toMatch(
        /result expected datetime, got naive datetime 2020-01-01T00:00:00/,
      );
    });

    test('enum: int in [0, 2^32-1]; negative, too large and bool refused', async () => {
      const { registry } = trusted({
        next: ['result = args[0] + 1', ['enum'], 'enum'],
        neg: ['result = -1', [], 'enum'],
        big: ['result = 2 ** 32', [], 'enum'],
        bool: ['result = False', [], 'enum'],
        text: ['result = "3"', [], 'enum'],
      });
      expect(await registry.eval('next', [Value.enum(6)])).toEqual(Value.enum(7));
      expect((await failure(registry.eval('neg', []))).message).toMatch(
        /result expected enum, got int -1 \(enum is an integer in \[0, 4294967295\]\)/,
      );
      expect((await failure(registry.eval('big', []))).message).toMatch(
        /result expected enum, got int 4294967296/,
      );
      expect((await failure(registry.eval('bool', []))).message).toMatch(
        /result expected enum, got bool False/,
      );
      expect((await failure(registry.eval('text', []))).message).toMatch(
        /result expected enum, got str '3'/,
      );
    });

    test('a float result is refused for every type but number, on every path and for every value (0.0 and 3.0 alike)', async () => {
      const fns: Parameters<typeof trusted>[0] = {};
      for (const type of ['enum', 'boolean', 'text', 'datetime'] as const) {
        fns[type] = ['result = args[0] * 1.0', ['number'], type];
        fns[`${type}_vec`] = ['result = [x * 1.0 for x in args[0]]', ['number'], type];
      }
      const { registry } = trusted(fns);
      for (const type of ['enum', 'boolean', 'text', 'datetime'] as const) {
        registry.register({ ...registry.get(`${type}_vec`)!, vectorized: true });
        for (const name of [type, `${type}_vec`]) {
          const refused = (x: number) =>
            `Runtime: function ${name}: result expected ${type}, got float ${x.toFixed(1)}`;
          const rows = [0, 3, 2.5].map((x) => [Value.number(x)]);
          const shown = (cells: readonly unknown[]) =>
            cells.map((c) =>
              ExtFnError.isInstance(c) ? `${c.kind}: ${c.message.split('\n')[0]}` : c,
            );
          expect([name, shown(await registry.evalBatch(name, rows))]).toEqual([
            name,
            [refused(0), refused(3), refused(2.5)],
          ]);
          const single = await failure(registry.eval(name, [Value.number(3)], { cache: false }));
          expect([name, shown([single])]).toEqual([name, [refused(3)]]);
          const { errors } = await registry.evalColumns(name, [new Float64Array([0, 3, 2.5])]);
          expect([name, shown([...errors.values()])]).toEqual([
            name,
            [refused(0), refused(3), refused(2.5)],
          ]);
        }
      }
    });

    test('arguments arrive as Python values of the declared types', async () => {
      const body = 'result = " ".join(type(a).__name__ for a in args)';
      const { registry } = trusted({
        types: [body, ['number', 'boolean', 'text', 'datetime', 'enum'], 'text'],
      });
      const out = await registry.eval('types', [
        Value.number(2),
        Value.boolean(true),
        Value.text('t'),
        Value.datetime('2020-01-01T00:00:00Z'),
        Value.enum(3),
      ]);
      expect(out).toEqual(Value.text('float bool str datetime int'));
    });

    test('tracebacks keep the line numbers as written: CRLF bodies, exec-mode bodies, nested calls', async () => {
      const { registry } = trusted({
        crlf: ['x = 1\r\n\r\ny = 0\r\nresult = x / y\r\n', [], 'number'],
        execMode: [
          'total = 0\ndef f():\n    global total\n    raise KeyError("k")\nf()',
          [],
          'number',
        ],
        nested: ['def g(v):\n    return int(v)\n\nresult = g("x")', [], 'number'],
      });
      const crlf = await failure(registry.eval('crlf', []));
      expect(crlf.message).toBe('function crlf: ZeroDivisionError: division by zero');
      expect(crlf.stderr).toMatch(/line 4, in <module>/);
      const execMode = await failure(registry.eval('execMode', []));
      expect(execMode.message).toBe("function execMode: KeyError: 'k'");
      expect(execMode.stderr).toMatch(/line 5, in <module>[\s\S]*line 4, in f/);
      const nested = await failure(registry.eval('nested', []));
      expect(nested.stderr).toMatch(/line 4, in <module>[\s\S]*line 2, in g/);
    });

    test("what a body defines keeps its own names: classes, functions and lambdas are not the wrapper's locals", async () => {
      const { registry } = trusted({
        cls: ['class A: pass\nresult = A.__qualname__ + " " + repr(A)', [], 'text'],
        fn: [
          'def f(x):\n    return x\nresult = f.__qualname__ + " " + (lambda: 0).__qualname__',
          [],
          'text',
        ],
        err: ['class Error(Exception): pass\nraise Error("boom")', [], 'text'],
        twice: [
          'class Counter:\n    n = 0\nCounter.n += args[0]\nresult = Counter.n',
          ['number'],
          'number',
        ],
      });
      expect(await registry.eval('cls', [])).toEqual(Value.text("A <class '__extfn__.A'>"));
      expect(await registry.eval('fn', [])).toEqual(Value.text('f <lambda>'));
      const error = await failure(registry.eval('err', []));
      expect(error.message).toBe('function err: Error: boom');
      expect(error.stderr).toMatch(/^__extfn__\.Error: boom$|^Error: boom$/m);
      expect(error.stderr).not.toContain('<locals>');
      // Still fresh per row: a class attribute changed by one row is not seen by the next.
      expect(await registry.eval('twice', [Value.number(2)])).toEqual(Value.number(2));
      expect(await registry.eval('twice', [Value.number(2)])).toEqual(Value.number(2));
    });

    test('datetimes at both ends of the range go through exactly; past them is a clear row error', async () => {
      const { registry } = trusted({
        id: ['result = args[0]', ['datetime'], 'datetime'],
        parts: [
          't = args[0]\nresult = "%04d %d %d" % (t.year, t.microsecond, t.second)',
          ['datetime'],
          'text',
        ],
        past: [
          'from datetime import timedelta\nresult = args[0] + timedelta(days=1)',
          ['datetime'],
          'datetime',
        ],
      });
      for (const edge of [
        '0001-01-01T00:00:00Z',
        '9999-12-31T23:59:59.999999999Z',
        '9999-12-31T23:59:59.999999Z',
      ]) {
        const value = Value.datetime(edge);
        expect(await registry.eval('id', [value])).toEqual(value);
      }
      expect(await registry.eval('parts', [Value.datetime('0001-01-01T00:00:00Z')])).toEqual(
        Value.text('0001 0 0'),
      );
      expect(
        await registry.eval('parts', [Value.datetime('9999-12-31T23:59:59.999999999Z')]),
      ).toEqual(Value.text('9999 999999 59'));
      const past = await failure(registry.eval('past', [Value.datetime('9999-12-31T00:00:00Z')]));
      expect(past.message).toBe('function past: OverflowError: date value out of range');
    });

    test('syntax errors, unset results and exec-mode bodies (global, locals(), shadowed builtins)', async () => {
      const { registry } = trusted({
        syntax: ['result = (1 +\n', [], 'number'],
        unset: ['x = 1', [], 'number'],
        maybe: ['if args[0] > 0:\n    result = 1', ['number'], 'number'],
        glob: [
          'total = 1\ndef bump():\n    global total\n    total += args[0]\nbump()\nresult = total',
          ['number'],
          'number',
        ],
        locs: ['a = 2\nresult = locals()["a"] * args[0]', ['number'], 'number'],
        shadow: ['if args[0] > 100:\n    len = 5\nresult = len([1, 2])', ['number'], 'number'],
        ret: ['return 5', [], 'number'],
      });
      const syntax = await failure(registry.eval('syntax', []));
      expect(syntax.message).toMatch(/^function syntax: SyntaxError: .*line 1/);
      expect((await failure(registry.eval('unset', []))).message).toMatch(/result was not set/);
      expect(await registry.eval('maybe', [Value.number(1)])).toEqual(Value.number(1));
      expect((await failure(registry.eval('maybe', [Value.number(-1)]))).message).toMatch(
        /result was not set/,
      );
      expect(await registry.eval('glob', [Value.number(2)])).toEqual(Value.number(3));
      expect(await registry.eval('glob', [Value.number(2)])).toEqual(Value.number(3));
      expect(await registry.eval('locs', [Value.number(3)])).toEqual(Value.number(6));
      expect(await registry.eval('shadow', [Value.number(1)])).toEqual(Value.number(2));
      expect((await failure(registry.eval('ret', []))).message).toMatch(
        /SyntaxError: 'return' outside function/,
      );
    });
  },
);

function PYTHON_LABEL() {
  return runner().language === 'python' ? '/usr/bin/python3' : '';
}
