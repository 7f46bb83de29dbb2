/**
 * The driver's bulk text paths against its per-string ones. A non-ASCII
 * text column without NUL is decoded in one piece and split at NULs put
 * between the strings; one with a NUL is decoded string by string; a
 * non-ASCII result column is encoded in one piece, its lengths taken string
 * by string; one with a lone surrogate string by string. Whatever path a
 * chunk takes, each row must come out as the JSON `call` path and `eval`
 * give it: chunks of ASCII, non-ASCII, astral, empty and NUL-bearing text
 * sent straight to the driver and through evalColumns and evalBatch; and a
 * column that is not UTF-8, or a string split inside a character, still
 * failing the request with the error it always did. Restricted sandbox (registry tests),
 * /usr/bin/python3.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { ExtFnError, type RowResult, Value } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { hasPython, noRestricted, PYTHON, registryWith, restrictedOk } from './helpers.js';

// b + "|" + a + NUL + len(a): a string split or decoded wrongly shows in the
// result, len counts code points (astral ones too); "lone" gives a result
// with a lone surrogate (no UTF-8 form: it goes back as a cell).
const BODY = [
  'a, b = args',
  'if b == "lone":',
  '    result = a + "\\ud800"',
  'else:',
  '    result = b + "|" + a + "\\0" + str(len(a))',
].join('\n');

const expected = (a: string, b: string) =>
  b === 'lone' ? `${a}\uD800` : `${b}|${a}\0${[...a].length}`;

type Pairs = [string, string][];

/** Row i of a chunk of one kind: the kinds are the paths a column can take. */
const KINDS: Record<string, (i: number) => [string, string]> = {
  ascii: (i) => [`row${i}`, i % 4 ? `-${i % 100}` : ''],
  latin: (i) => [`row${i}`, `-é${i % 100}`],
  mixed: (i) => [
    ['', 'é', '日本語', '😀', 'x'][i % 5]! + i,
    ['-ß', '', '-😀😀', '-ascii', '-Ω'][i % 5]!,
  ],
  astral: (i) => ['😀'.repeat(i % 3), `𝄞${i}`],
  nul: (i) => (i % 7 === 3 ? [`é\0${i}`, '\0'] : [`é${i}`, `-日${i % 10}`]),
  lone: (i) => [`é${i}`, i % 9 === 4 ? 'lone' : '-ü'],
};

const chunk = (kind: string, n: number, from = 0): Pairs =>
  Array.from({ length: n }, (_, i) => KINDS[kind]!(from + i));

// ---- straight to the driver ----------------------------------------------------------

const utf8 = (s: string) => Buffer.from(s, 'utf8');

/** A callcols text column: u32 byte lengths, the bytes, zero padding to a multiple of 8. */
function textColumn(parts: Buffer[]): Buffer {
  const column = Buffer.concat([
    Buffer.from(Uint32Array.from(parts.map((p) => p.length)).buffer),
    ...parts,
  ]);
  return Buffer.concat([column, Buffer.alloc(-column.length & 7)]);
}

const LOAD = {
  op: 'load',
  id: 1,
  fn: { name: 'paths', body: BODY, argTypes: ['text', 'text'], returnType: 'text' },
};

/** The driver run once over `frames` (header objects, each with its payload if any); its output and exit. */
function driver(frames: [object, Buffer?][]) {
  const source = Buffer.from(DRIVER_SOURCE, 'utf8');
  const input: Buffer[] = [Buffer.from(`${source.length}\n`), source];
  for (const [header, payload] of [[LOAD] as [object], ...frames, [{ op: 'exit' }] as [object]]) {
    input.push(Buffer.from(`${JSON.stringify(header)}\n`));
    if (payload) input.push(payload);
  }
  const run = spawnSync(PYTHON, PYTHON_ARGS, {
    input: Buffer.concat(input),
    env: { PYTHONHASHSEED: '0' },
    maxBuffer: 64 << 20,
  });
  // Answers after `ready` and load's: each a JSON line, a callcols one followed by its payload.
  const answers: { header: Record<string, unknown>; body: Buffer }[] = [];
  const out = run.stdout;
  let at = 0;
  while (at < out.length) {
    const end = out.indexOf(0x0a, at);
    const header = JSON.parse(out.subarray(at, end).toString('utf8'));
    const bytes = typeof header.bytes === 'number' ? header.bytes : 0;
    answers.push({ header, body: out.subarray(end + 1, end + 1 + bytes) });
    at = end + 1 + bytes;
  }
  return { answers: answers.slice(2), status: run.status, stderr: run.stderr.toString('utf8') };
}

/** A callcols result column read back; a row with a cell gets the cell's value. */
function readTexts(body: Buffer, n: number, cells: Record<string, string> = {}): string[] {
  const texts: string[] = [];
  let p = 4 * n;
  for (let i = 0; i < n; i++) {
    const length = body.readUInt32LE(4 * i);
    texts.push(cells[String(i)] ?? body.subarray(p, p + length).toString('utf8'));
    p += length;
  }
  expect(p + (-p & 7)).toBe(body.length); // lengths add up to the payload, padded to 8
  return texts;
}

const callcols = (id: number, pairs: Pairs): [object, Buffer] => {
  const payload = Buffer.concat([
    textColumn(pairs.map(([a]) => utf8(a))),
    textColumn(pairs.map(([, b]) => utf8(b))),
  ]);
  return [{ op: 'callcols', id, rows: pairs.length, bytes: payload.length }, payload];
};

describe.skipIf(!hasPython)('text paths straight to the driver (no host)', () => {
  const SETS: [string, Pairs][] = [
    ['ASCII', chunk('ascii', 300)],
    ['Latin-1 (the peers workload)', chunk('latin', 3000)],
    ['mixed scripts, empty strings', chunk('mixed', 3000)],
    ['astral characters', chunk('astral', 500)],
    ['non-ASCII with NUL', chunk('nul', 500)],
    ['non-ASCII with lone-surrogate results', chunk('lone', 500)],
    ['one NUL row in a non-ASCII chunk', chunk('latin', 999).concat([['\0é', '\0']])],
    ['all kinds in one chunk', Object.keys(KINDS).flatMap((k) => chunk(k, 200))],
  ];

  test.each(SETS)('%s: callcols == JSON call == the expected strings', (_, pairs) => {
    const { answers, status } = driver([
      callcols(2, pairs),
      [{ op: 'call', id: 3, rows: pairs }],
      callcols(4, pairs), // again: the objects the first request kept change nothing
    ]);
    expect(status).toBe(0);
    const want = pairs.map(([a, b]) => expected(a, b));
    const [first, json, again] = answers;
    expect(json!.header).toMatchObject({ id: 3, values: want });
    for (const answer of [first!, again!]) {
      expect(answer.header.errors).toBeUndefined();
      const cells = (answer.header.cells ?? {}) as Record<string, string>;
      expect(readTexts(answer.body, pairs.length, cells)).toEqual(want);
      // only results with no UTF-8 form go as cells
      const lone = pairs.flatMap(([, b], i) => (b === 'lone' ? [String(i)] : []));
      expect(Object.keys(cells).sort()).toEqual(lone.sort());
    }
  });

  // What the protocol says fails the request: bytes that are not UTF-8 (the
  // column decoded whole), else a string that starts inside a character (each
  // decoded alone); Python's own message for the first such error.
  const decodeError = (parts: Buffer[]) =>
    execFileSync(PYTHON, [
      '-c',
      [
        'import sys',
        'parts = [bytes.fromhex(h) for h in sys.argv[1:]]',
        'try:',
        '    b"".join(parts).decode("utf-8")',
        '    for p in parts:',
        '        p.decode("utf-8")',
        'except UnicodeDecodeError as e:',
        '    print(e)',
      ].join('\n'),
      ...parts.map((p) => p.toString('hex')),
    ])
      .toString('utf8')
      .trim();

  test.each([
    [
      'a string that starts inside another one’s character',
      [utf8('é'), Buffer.from([0xc3]), Buffer.from([0xa9])],
    ],
    ['bytes that are not UTF-8', [utf8('é'), Buffer.from([0xff, 0x41])]],
  ])('%s fails the request with the error it always did', (_, parts) => {
    const n = parts.length;
    const b = Array.from({ length: n }, () => utf8('-ü'));
    const payload = Buffer.concat([textColumn(parts), textColumn(b)]);
    const { answers, status, stderr } = driver([
      [{ op: 'callcols', id: 2, rows: n, bytes: payload.length }, payload],
    ]);
    expect(answers).toEqual([]); // no answer: the worker exits and the host re-runs the rows
    expect(status).not.toBe(0);
    const message = decodeError(parts);
    expect(message).toMatch(/^'utf-8' codec can't decode byte/);
    expect(stderr).toContain(`UnicodeDecodeError: ${message}`);
  });
});

// ---- through the host ----------------------------------------------------------------

/** Outcomes as comparable data: a Value, or the error's kind and message. */
const outcome = (r: unknown) =>
  ExtFnError.isInstance(r) ? { kind: r.kind, message: r.message } : r;

describe.skipIf(!restrictedOk)(
  `text paths through evalColumns and evalBatch${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const { registry } = registryWith('restricted', {
      paths: [BODY, ['text', 'text'], 'text'],
    });
    afterAll(() => registry.close());

    // Stretches of each kind, so a chunk of any size the scheduler picks is all
    // of one kind, or straddles two.
    const pairs: Pairs = [
      'latin',
      'ascii',
      'mixed',
      'nul',
      'astral',
      'latin',
      'lone',
      'mixed',
    ].flatMap((kind, k) => chunk(kind, 1500, 1500 * k));

    test('every row as eval gives it, and as the expected string', async () => {
      const want = pairs.map(([a, b]) => outcome(Value.text(expected(a, b))));
      const rows = pairs.map(([a, b]) => [Value.text(a), Value.text(b)]);
      const batch = await registry.evalBatch('paths', rows);
      expect(batch.map(outcome)).toEqual(want);

      const typed = await registry.evalColumns<string[]>('paths', [
        pairs.map(([a]) => a),
        pairs.map(([, b]) => b),
      ]);
      const asRows: RowResult[] = typed.values.map(
        (value, i) => typed.errors.get(i) ?? Value.text(value),
      );
      expect(asRows.map(outcome)).toEqual(want);

      // eval row by row: every 7th row and every row of a kind that falls back (NUL, lone)
      const sample = pairs.flatMap(([a, b], i) =>
        i % 7 === 0 || a.includes('\0') || b === 'lone' ? [i] : [],
      );
      for (const i of sample) {
        const one = await registry.eval('paths', rows[i]!).catch((e: unknown) => e);
        expect(outcome(one), `row ${i}`).toEqual(want[i]);
      }
    });
  },
);
