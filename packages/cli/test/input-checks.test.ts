/**
 * Input that would otherwise be read as something it does not say: bytes
 * that are not UTF-8 (Node would turn them into U+FFFD unseen), a JSON key
 * written twice in one object (JSON.parse keeps the last without a word), a
 * flag that takes one value given twice (the last used to win). Each is an
 * error naming where it is and how to fix it.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { ExitCode } from '../src/exit-codes.js';
import type { CliIo } from '../src/io.js';
import { duplicateKey } from '../src/json-keys.js';
import { main } from '../src/main.js';
import { EscapingDecoder, firstBadCharacter } from '../src/utf8.js';
import { BIN, fakeIo, fakeRunner, scratch, TEST_ENV } from './helpers.js';

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeEach(async () => {
  tmp = await scratch();
});
afterEach(async () => {
  await tmp.cleanup();
});

const withRunner = (runner = fakeRunner()) => ({ '@improv/extfn-wasm': { wasm: () => runner } });

const add = {
  name: 'add',
  language: 'wasm',
  body: 'args[0] + args[1]',
  argTypes: ['number', 'number'],
  returnType: 'number',
};
const greet = {
  name: 'greet',
  language: 'wasm',
  body: '"hello " + args[0]',
  argTypes: ['text'],
  returnType: 'text',
};

const bytes = (...parts: (string | number[] | Uint8Array)[]): Buffer =>
  Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Uint8Array.from(p))));

async function bytesFile(name: string, content: Buffer): Promise<string> {
  const path = join(tmp.dir, name);
  await writeFile(path, content);
  return path;
}

/** In-process io whose stdin yields these byte pieces. */
function stdinIo(pieces: Buffer[], io = fakeIo(withRunner())): typeof io {
  return {
    ...io,
    stdin: async function* () {
      yield* pieces;
    },
  } as typeof io & CliIo;
}

describe('bytes that are not UTF-8 are found, never replaced unseen', () => {
  test('the decoder keeps every character whole wherever the pieces are cut', () => {
    const text = 'aé€😀b\u{10FFFF}\uFFFD';
    const all = Buffer.from(text);
    for (let cut = 0; cut <= all.length; cut++) {
      for (let cut2 = cut; cut2 <= all.length; cut2++) {
        const decoder = new EscapingDecoder();
        const out =
          decoder.decode(all.subarray(0, cut)) +
          decoder.decode(all.subarray(cut, cut2)) +
          decoder.decode(all.subarray(cut2)) +
          decoder.end();
        expect(out, `cut at ${cut}, ${cut2}`).toBe(text);
        expect(firstBadCharacter(out)).toBe(-1);
      }
    }
  });

  test('each ill-formed sequence is found, also when cut between pieces or at the end', () => {
    const cases: [number[], number][] = [
      [[0xe9], 1], // Latin-1 é
      [[0xc0, 0x80], 2], // overlong NUL
      [[0xed, 0xa0, 0x80], 3], // an encoded surrogate
      [[0xf5, 0x80, 0x80, 0x80], 4], // beyond U+10FFFF
      [[0xe2, 0x82], 2], // a character cut short at the end
      [[0xf0, 0x9f, 0x98], 3],
      [[0x80], 1], // a stray continuation byte
    ];
    for (const [sequence, escapes] of cases) {
      const all = bytes('ab', sequence);
      for (let cut = 0; cut <= all.length; cut++) {
        const decoder = new EscapingDecoder();
        const out =
          decoder.decode(all.subarray(0, cut)) + decoder.decode(all.subarray(cut)) + decoder.end();
        expect(out.startsWith('ab'), `${sequence}`).toBe(true);
        expect(firstBadCharacter(out), `${sequence} cut at ${cut}`).toBe(2);
        expect(out.length - 2, `${sequence}`).toBe(escapes);
      }
    }
  });

  test('CSV: the row with the byte is MalformedRow naming line, column and byte; the others run; the fix names the file', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await bytesFile(
      'rows.csv',
      bytes('label,x,y\nnorth,1,2\ncaf', [0xe9], ',3,4\nsouth,5,6\n'),
    );
    const io = fakeIo(withRunner());
    const code = await main(['run', fn, rows, '--header', '--columns', 'x,y'], io);
    expect(code).toBe(ExitCode.FunctionError);
    expect(io.out()).toBe(
      [
        'label,x,y,result,error',
        'north,1,2,3,',
        // in-process the cell keeps the byte as an escape; a file or pipe gets U+FFFD for it
        'caf\udce9,3,4,,"MalformedRow: line 3, column 1 (label): the byte 0xE9 is not UTF-8; the file must be UTF-8"',
        'south,5,6,11,',
        '',
      ].join('\n'),
    );
    expect(io.err()).toContain(`fix: re-encode ${rows} as UTF-8, e.g. iconv -f WINDOWS-1252`);
  });

  test('a file read in pieces: a character across a piece boundary is whole, a bad byte there is found', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    // The reader takes 64 KiB at a time: an é across the first boundary (line 2, valid), and a
    // Latin-1 é as the last byte of the second piece (line 3).
    const PIECE = 65_536;
    const line2 = bytes('x,y,label\n1,1,');
    const toFirst = bytes(line2, 'a'.repeat(PIECE - 1 - line2.length), [0xc3, 0xa9], '\n2,2,');
    const content = bytes(toFirst, 'b'.repeat(2 * PIECE - 1 - toFirst.length), [0xe9], '\n3,3,z\n');
    expect(content[PIECE - 1]).toBe(0xc3);
    expect(content[2 * PIECE - 1]).toBe(0xe9);
    const rows = await bytesFile('rows.csv', content);
    const io = fakeIo(withRunner());
    const out = join(tmp.dir, 'out.csv');
    const code = await main(['run', fn, rows, '--header', '--columns', 'x,y', '-o', out], io);
    expect(code).toBe(ExitCode.FunctionError);
    expect(io.err()).toMatch(/3 row\(s\): 2 ok, 1 failed \(MalformedRow 1\)/);
    expect(io.err()).toMatch(/line 3, column 3 \(label\): the byte 0xE9 is not UTF-8/);
  });

  test('a CSV header with such a byte stops the run: BadInput, exit 2, also as --json', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await bytesFile('rows.csv', bytes('l', [0xe9], 'bel,x,y\nnorth,1,2\n'));
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--header', '--columns', 'x,y'], io)).toBe(
      ExitCode.BadInput,
    );
    expect(io.err()).toContain(
      `${rows}: line 1 (the header), column 1: the byte 0xE9 is not UTF-8`,
    );
    expect(io.err()).toContain(`fix: re-encode ${rows} as UTF-8`);
    const json = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--header', '--columns', 'x,y', '--json'], json)).toBe(
      ExitCode.BadInput,
    );
    const error = JSON.parse(json.out()).error;
    expect(error.kind).toBe('BadInput');
    expect(error.message).toMatch(/line 1 \(the header\), column 1: the byte 0xE9/);
    expect(error.fix).toMatch(/re-encode .* as UTF-8/);
  });

  test('JSON lines: the row is MalformedRow naming line, column and key; the others run', async () => {
    const fn = await tmp.file('greet.json', JSON.stringify(greet));
    const rows = await bytesFile(
      'rows.jsonl',
      bytes('{"who":"ann"}\n{"who":"Jos', [0xe9], '"}\n["bob"]\n'),
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'who'], io)).toBe(ExitCode.FunctionError);
    const lines = io.out().trim().split('\n');
    expect(JSON.parse(lines[0]!).result).toBe('hello ann');
    const bad = JSON.parse(lines[1]!);
    expect(bad.error).toEqual({
      kind: 'MalformedRow',
      message: 'line 2, column 12 (key "who"): the byte 0xE9 is not UTF-8; the file must be UTF-8',
    });
    // echoed with the byte as an escape a reader can see, never as the text it is not
    expect(bad.input).toBe('{"who":"Jos\udce9"}');
    expect(lines).toHaveLength(3);
    expect(io.err()).toContain(`fix: re-encode ${rows} as UTF-8`);
  });

  test('standard input in pieces: a character cut between pieces is whole, a bad byte is found', async () => {
    const fn = await tmp.file('greet.json', JSON.stringify(greet));
    const all = bytes('["Zoë"]\n["b', [0xff], 'd"]\n');
    const io = stdinIo([all.subarray(0, 5), all.subarray(5, 12), all.subarray(12)]);
    expect(await main(['run', fn, '-', '--format', 'jsonl'], io)).toBe(ExitCode.FunctionError);
    const lines = io.out().trim().split('\n');
    expect(JSON.parse(lines[0]!).result).toBe('hello Zoë');
    expect(JSON.parse(lines[1]!).error.message).toBe(
      'line 2, column 4 (value 1): the byte 0xFF is not UTF-8; the file must be UTF-8',
    );
    expect(io.err()).toMatch(/fix: convert the input to UTF-8 .*iconv/);
  });

  test('a descriptor file with such a byte is BadInput naming the file, line and column', async () => {
    const fn = await bytesFile(
      'greet.json',
      bytes(
        '{"name":"greet","language":"wasm",\n"body":"\\"h',
        [0xe9],
        'llo \\" + args[0]","argTypes":["text"],"returnType":"text"}',
      ),
    );
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn, 'x'], io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain(`${fn}: line 2, column 12: the byte 0xE9 is not UTF-8`);
    expect(io.err()).toContain(`fix: re-encode ${fn} as UTF-8`);
    const stdin = stdinIo([await import('node:fs/promises').then((fs) => fs.readFile(fn))]);
    expect(await main(['eval', '-', 'x', '--json'], stdin)).toBe(ExitCode.BadInput);
    expect(JSON.parse(stdin.out()).error).toMatchObject({
      kind: 'BadInput',
      message: 'standard input: line 2, column 12: the byte 0xE9 is not UTF-8',
    });
  });

  test('an argument that is not UTF-8 names the function and the argument; a real U+FFFD is text', async () => {
    const fn = await tmp.file('greet.json', JSON.stringify(greet));
    const argv = ['eval', fn, 'Jos\uFFFD'];
    const raw = [Buffer.from('eval'), Buffer.from(fn), bytes('Jos', [0xe9])];
    const io = { ...fakeIo(withRunner()), argvBytes: raw };
    expect(await main(argv, io)).toBe(ExitCode.BadInput);
    expect(io.err()).toContain(
      'improv-extfn: function greet, argument 1 (text): "Jos\\xE9" is not UTF-8 (the byte 0xE9)',
    );
    expect(io.err()).toMatch(/fix: pass arguments as UTF-8.*LANG=C\.UTF-8/);
    // The same string from bytes that are UTF-8 (the replacement character typed on purpose) runs.
    const typed = { ...fakeIo(withRunner()), argvBytes: argv.map((a) => Buffer.from(a)) };
    expect(await main(argv, typed)).toBe(ExitCode.Ok);
    expect(typed.out()).toBe('hello Jos\uFFFD\n');
  });

  test('a flag value or a file name that is not UTF-8 is named, also as --json', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const argv = ['eval', fn, '--name', 'ad\uFFFD', '1', '2', '--json'];
    const raw: Uint8Array[] = argv.map((a) => Buffer.from(a));
    raw[3] = bytes('ad', [0xe9]);
    const io = { ...fakeIo(withRunner()), argvBytes: raw };
    expect(await main(argv, io)).toBe(ExitCode.BadInput);
    expect(JSON.parse(io.out()).error).toMatchObject({
      kind: 'BadInput',
      message: 'eval: the value of --name: "ad\\xE9" is not UTF-8 (the byte 0xE9)',
    });
    const rows = {
      ...fakeIo(withRunner()),
      argvBytes: [Buffer.from('run'), Buffer.from(fn), bytes('r', [0xe9], '.csv')],
    };
    expect(await main(['run', fn, 'r\uFFFD.csv'], rows)).toBe(ExitCode.BadInput);
    expect(rows.err()).toContain(
      'run: the rows file name: "r\\xE9.csv" is not UTF-8 (the byte 0xE9)',
    );
  });

  test('the real command reads its arguments’ bytes (Linux /proc/self/cmdline)', async () => {
    const fn = await tmp.file('greet.json', JSON.stringify(greet));
    const result = await execa(
      '/bin/sh',
      ['-c', `exec "${process.execPath}" "${BIN}" eval "${fn}" "$(printf 'Jos\\351')"`],
      { reject: false, env: { ...TEST_ENV }, stdin: 'ignore' },
    );
    expect(result.exitCode).toBe(ExitCode.BadInput);
    expect(result.stderr).toContain('function greet, argument 1 (text): "Jos\\xE9" is not UTF-8');
  });
});

describe('a JSON key written twice in one object is an error naming the line and the key', () => {
  const check = (text: string) => duplicateKey(text, JSON.parse(text));

  test('found wherever it is, as JSON reads keys; never in strings that look like keys', () => {
    expect(check('{"x":1,"y":2,"x":3}')).toEqual({ key: 'x', index: 13 });
    expect(check('{"x":1,"\\u0078":2}')).toEqual({ key: 'x', index: 7 });
    expect(check('{"a":{"b":1,"b" : 2}}')?.key).toBe('b');
    expect(check('[{"a":1},{"a":2},{"t":1,"t":2}]')?.key).toBe('t');
    expect(check('{"a":[{"k":1}],"k":2}')).toBeUndefined();
    expect(check('{"a":"\\"a\\":1","b":"x\\\\","c":":"}')).toBeUndefined();
    expect(check('{"a":"\\"b\\": 1, \\"b\\": 2"}')).toBeUndefined();
    expect(check('[1,2,3]')).toBeUndefined();
    expect(check('["a","a"]')).toBeUndefined();
    expect(check('{"__proto__":1,"__proto__":2}')?.key).toBe('__proto__');
  });

  test('JSON lines: that row is MalformedRow naming line and key, echoed as written; the others run', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file(
      'rows.jsonl',
      '{"x":1,"y":2}\n{"x":1,"y":2,"x":30}\n{"x":1,"y":{"type":"number","value":2,"value":5}}\n{"x":5,"y":6}\n',
    );
    const io = fakeIo(withRunner());
    expect(await main(['run', fn, rows, '--columns', 'x,y'], io)).toBe(ExitCode.FunctionError);
    const lines = io.out().trim().split('\n');
    expect(lines[0]).toBe('{"x":1,"y":2,"result":3}');
    expect(lines[1]).toBe(
      '{"x":1,"y":2,"x":30,"error":{"kind":"MalformedRow","message":"line 2, column 14: the key \\"x\\" is written twice in one object (JSON would keep only the last value); write each key once"},"line":2}',
    );
    const third = '{"x":1,"y":{"type":"number","value":2,"value":5}}';
    expect(JSON.parse(lines[2]!).error.message).toMatch(
      `line 3, column ${third.lastIndexOf('"value"') + 1}: the key "value" is written twice`,
    );
    expect(lines[3]).toBe('{"x":5,"y":6,"result":11}');
    expect(io.err()).toMatch(/4 row\(s\): 2 ok, 2 failed/);
  });

  test('a descriptor file: BadInput naming the file, line, column and key', async () => {
    const fn = await tmp.file(
      'add.json',
      '{"name":"add","language":"wasm",\n  "body":"args[0] + args[1]",\n  "body":"args[0] * args[1]","argTypes":["number","number"],"returnType":"number"}',
    );
    const io = fakeIo(withRunner());
    expect(await main(['eval', fn, '2', '3', '--json'], io)).toBe(ExitCode.BadInput);
    expect(JSON.parse(io.out()).error).toEqual({
      kind: 'BadInput',
      message: `${fn}: line 3, column 3: the key "body" is written twice in one object`,
      fix: 'write each key once: JSON would keep only the last value, and the other would be ignored without a word',
    });
  });
});

describe('a flag that takes one value, given twice, is a usage error naming it', () => {
  test('eval and run: --timeout, -o/--output, --name=… with -n …', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const rows = await tmp.file('rows.csv', '1,2\n');
    const cases: [string[], RegExp][] = [
      [
        ['eval', fn, '1', '2', '--timeout', '5', '--timeout', '10'],
        /eval: --timeout is given twice \(--timeout "5", --timeout "10"\)/,
      ],
      [
        ['run', fn, rows, '-o', 'a.csv', '--output', 'b.csv'],
        /run: --output is given twice \(-o "a\.csv", --output "b\.csv"\)/,
      ],
      [
        ['eval', fn, '1', '2', '--name=add', '-n', 'add', '--name', 'add'],
        /eval: --name is given 3 times/,
      ],
      [['run', fn, rows, '--columns', '1,2', '--columns', '2,1'], /run: --columns is given twice/],
    ];
    for (const [argv, message] of cases) {
      const io = fakeIo(withRunner(), { cwd: tmp.dir });
      expect(await main(argv, io), argv.join(' ')).toBe(ExitCode.BadInput);
      expect(io.err()).toMatch(message);
      expect(io.err()).toMatch(/fix: give --\w+ once \(--runner may be repeated\)/);
      expect(io.out()).toBe('');
    }
    const json = fakeIo(withRunner());
    await main(['eval', fn, '1', '2', '--memory', '1GiB', '--memory=2GiB', '--json'], json);
    expect(JSON.parse(json.out()).error).toMatchObject({
      kind: 'Usage',
      message:
        'eval: --memory is given twice (--memory "1GiB", --memory "2GiB"); it takes one value',
    });
  });

  test('worker: --queue twice is a usage error before anything connects', async () => {
    const io = fakeIo({});
    expect(
      await main(['worker', '--redis', 'redis://127.0.0.1:1', '--queue', 'a', '--queue', 'b'], io),
    ).toBe(ExitCode.BadInput);
    expect(io.err()).toMatch(/worker: --queue is given twice/);
  });

  test('--runner, which may repeat, still takes every one; a switch given twice is harmless', async () => {
    const fn = await tmp.file('add.json', JSON.stringify(add));
    const js = {
      specificationVersion: 'v1',
      language: 'js',
      async probe() {
        return { language: 'js', available: true, detail: 'toy' };
      },
      async call() {
        return { type: 'number', value: 1 };
      },
    };
    const io = fakeIo({
      ...withRunner(),
      'extfn-js': { default: () => js },
      'extfn-js2': { default: () => ({ ...js, language: 'js2' }) },
    });
    expect(
      await main(
        ['eval', fn, '1', '2', '--runner', 'extfn-js', '--runner', 'extfn-js2', '--json', '--json'],
        io,
      ),
    ).toBe(ExitCode.Ok);
    expect(JSON.parse(io.out()).result).toEqual({ type: 'number', value: 3 });
  });
});
