/**
 * The host survives whatever a hostile body writes to the protocol channel.
 * A body can reach the driver's own descriptor for frames
 * (`__main__._proto_out_fd`) and the request it runs in (the driver's
 * `_serve` frame: its `request` and `rid`), so it can write frames that get
 * past the first checks — a valid length prefix and header line with the
 * request's own id — as well as plain garbage. Seeded cases (the same ones
 * every run) write random bytes, truncated frames, wrong, huge, negative or
 * fractional length prefixes, headers with wrong ids, wrong types, missing
 * fields, deep nesting or huge strings, extra frames after an answer, frames
 * from a thread after the body returned, and binary payloads whose lengths
 * lie, through `eval`, `evalBatch` and `evalColumns` (JSON `call`, `callf64`
 * on the pipe or the shared file, and `callcols` frames).
 *
 * Every call must settle (each has a deadline far past its timeoutMs) with a
 * value of the declared type or a typed ExtFnError whose fields have their
 * declared types; the host must not crash (vitest fails the file on an
 * unhandled rejection or exception; three cases also run in a child host
 * process that must exit 0 on its own); and a normal call right after each
 * case gets the right answer. Each case's function first serves plain rows
 * (a warm worker that knows its time per row), so a hostile batch goes out
 * as one chunk of several rows and is then re-run row by row.
 *
 * What this found (fixed in packages/interpreter/src/from-driver.ts and
 * warm-worker.ts; see packages/interpreter/test/hostile-answers.test.ts and
 * late-answer.test.ts here): a text column whose lengths add up past 2^32
 * held the host's event loop for minutes; a row error whose message is
 * nested thousands deep failed the call (a whole batch) with "runner
 * failed: RangeError"; row-error fields of other types reached the
 * ExtFnError as they were.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { ExtFnError, type Value, type ValueType } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { noRestricted, PYTHON, registryWith, restrictedOk } from './helpers.js';

// ---- the cases -------------------------------------------------------------------------

/** mulberry32: a small seeded generator, so the cases are the same every run. */
function seeded(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const hex = (length: number) => {
    let out = '';
    for (let i = 0; i < length; i++) out += int(256).toString(16).padStart(2, '0');
    return out;
  };
  return { next, int, pick, hex };
}
type Rng = ReturnType<typeof seeded>;

/**
 * What a body writes, in order (interpreted by PRELUDE, in the body):
 * `line`: a header line's text, in which `"@RID@"` becomes the request's id,
 * `"@N@"` its rows, `"@LEN@"` the length of the next binary piece,
 * `"@DEEP:d@"` arrays nested d deep, `"@DEEPO:d@"` objects nested d deep and
 * `"@HUGE:m@"` a string of m characters; cut to `cut` bytes, and ended with
 * a newline unless `nl` is false. `raw`: bytes (hex). `pay`: a binary
 * payload for the request's rows — a fixed-width column (`width` bytes a
 * row, padded to 8, `delta` more or fewer bytes) or a text column whose
 * first length is `first` (the others 0), its UTF-8 `text` (hex), padded to
 * the size the host computes with 32-bit arithmetic (`pad: 'wrap'`) or by
 * `pad` bytes.
 */
type Action =
  | { line: string; cut?: number; nl?: boolean }
  | { raw: string }
  | { pay: 'col'; width: number; delta: number; fill: string }
  | { pay: 'text'; first: number; text: string; pad: 'wrap' | number };

type Api = 'eval' | 'evalBatch' | 'evalColumns';
type Op = 'call' | 'callf64' | 'callcols';

interface Case {
  name: string;
  api: Api;
  argType: 'number' | 'text';
  returnType: ValueType;
  /** When the body writes: on every row, on row k, from a thread after returning, or before ending its interpreter. */
  when: 'always' | `row:${number}` | 'thread' | 'exit';
  actions: Action[];
  label: string;
  /** For directed cases: what every row's outcome (`Kind: message`, or `value: …`) must match. */
  expect?: RegExp;
}

/** The op the host sends for this case (the Python runner has `f64` and `columns`). */
function opOf(api: Api, argType: Case['argType'], returnType: ValueType): Op {
  if (api === 'eval') return 'call';
  return argType === 'number' && returnType === 'number' ? 'callf64' : 'callcols';
}

const WIDTH: Record<ValueType, number> = { number: 8, boolean: 1, enum: 4, datetime: 8, text: 0 };

/** A value of the return type as JSON text (a wire value). */
function wireValue(rng: Rng, type: ValueType): string {
  switch (type) {
    case 'number':
      return rng.pick(['1.5', '"NaN"', '-0', '1e308', '"Infinity"']);
    case 'text':
      return rng.pick(['"x"', '""', '"\\ud800"', '"é"']);
    case 'boolean':
      return rng.pick(['true', 'false']);
    case 'enum':
      return rng.pick(['0', '4294967295', '7']);
    case 'datetime':
      return rng.pick(['"2020-01-01T00:00:00Z"', '"1969-12-31T23:59:59.999999999Z"']);
  }
}

/** A value of some other type, or no value at all. */
function badValue(rng: Rng): string {
  return rng.pick([
    '"@DEEP:30000@"',
    '{"a":1}',
    '[1]',
    'null',
    '-1',
    '4294967296',
    '1.5',
    '"not a date"',
    '"@HUGE:300000@"',
    '"@DEEPO:20000@"',
    'true',
  ]);
}

/** A well-shaped answer to the request (header line and payload), for `op`. */
function answer(rng: Rng, op: Op, type: ValueType, id = '"@RID@"'): Action[] {
  if (op === 'call') return [{ line: `{"id":${id},"values":[${wireValue(rng, type)}]}` }];
  const pay: Action =
    type === 'text'
      ? { pay: 'text', first: 1, text: '61', pad: 'wrap' }
      : { pay: 'col', width: op === 'callf64' ? 8 : WIDTH[type], delta: 0, fill: '00' };
  return [{ line: `{"id":${id},"rows":"@N@","bytes":"@LEN@"}` }, pay];
}

/** Row-error objects, most of them not of the shape a driver writes. */
function rowError(rng: Rng): string {
  return rng.pick([
    '{"type":"ValueError","message":"m","traceback":"t"}',
    '{"type":5}',
    '5',
    '"x"',
    'null',
    '{"type":"X","message":"@DEEP:100000@"}',
    '{"type":"X","message":{"a":1},"traceback":[1,2],"limit":{"x":1}}',
    '{"type":"X","message":"m","traceback":"@DEEPO:20000@","limit":"cpu"}',
    '{"type":"ResultTypeError","message":"m","got":"@DEEP:50000@"}',
    '{"type":"ResultTypeError","message":"m","got":{"a":[1]}}',
    '{"type":"X","limit":"output","traceback":7}',
    '{"type":"X","limit":"memory"}',
    '{"type":"@HUGE:200000@","message":"@HUGE:200000@"}',
  ]);
}

/** Garbage of one kind, for a request of `op` returning `type`. */
function garbage(rng: Rng, op: Op, type: ValueType): { label: string; actions: Action[] } {
  const kind = rng.pick([
    'bytes',
    'truncated',
    'length prefix',
    'wrong id',
    'wrong types',
    'missing fields',
    'deep',
    'huge',
    'extra frames',
    'payload',
  ] as const);
  switch (kind) {
    case 'bytes': {
      const n = 1 + rng.int(300);
      let bytes = rng.hex(n);
      if (rng.next() < 0.5) bytes += '0a'; // a whole line of garbage
      if (rng.next() < 0.3) bytes = `7b${bytes}`; // starting as JSON does
      return { label: `${n} random bytes`, actions: [{ raw: bytes }] };
    }
    case 'truncated': {
      const whole = answer(rng, op, type);
      const first = whole[0] as { line: string };
      const cut = rng.int(first.line.length);
      const nl = rng.next() < 0.5;
      return {
        label: `an answer cut at ${cut}${nl ? ', newline' : ''}`,
        actions: [{ line: first.line, cut, nl }],
      };
    }
    case 'length prefix': {
      const size = rng.pick([
        '-1',
        '-8',
        '1.5',
        '"8"',
        'null',
        '1e300',
        '9007199254740993',
        '4294967296',
        '100000000',
        '16',
        '3',
        '0',
        '[8]',
      ]);
      const tail = rng.int(64);
      return {
        label: `bytes ${size}, then ${tail} bytes`,
        actions: [{ line: `{"id":"@RID@","rows":"@N@","bytes":${size}}` }, { raw: rng.hex(tail) }],
      };
    }
    case 'wrong id': {
      const id = rng.pick([
        '0',
        '-1',
        '"@RID@"', // the right number, as the request's id: kept only when it is a number
        '"7"',
        'null',
        '1e20',
        '[1]',
        '{"id":1}',
        'true',
        '1.5',
      ]);
      const actions = answer(rng, op, type, id === '"@RID@"' ? '"RID as text"' : id);
      return { label: `an answer with id ${id}`, actions };
    }
    case 'wrong types': {
      const field = rng.pick(['values', 'errors', 'rows', 'workMs', 'cells', 'shm', 'bytes']);
      const value =
        field === 'errors' || field === 'cells'
          ? rng.pick([`{"0":${rowError(rng)}}`, '"zz"', '[1,2]', '{"-1":{}}', '{"99999":{}}', '5'])
          : field === 'workMs'
            ? rng.pick(['-1', '"5"', '1e308', 'null', '[]'])
            : field === 'shm'
              ? rng.pick(['0', '8', '-1', '1e9', '"x"', 'null', '{}'])
              : rng.pick(['"x"', '5', 'null', '{}', '[1,2,3,4,5,6,7,8,9]', badValue(rng)]);
      const base: Record<string, string> = { id: '"@RID@"' };
      if (op === 'call') base.values = `[${wireValue(rng, type)}]`;
      else base.rows = '"@N@"';
      base[field] = value;
      const text = `{${Object.entries(base)
        .map(([k, v]) => `"${k}":${v}`)
        .join(',')}}`;
      const actions: Action[] = [{ line: text }];
      if (op !== 'call' && field !== 'bytes') {
        (actions[0] as { line: string }).line = text.replace(/}$/, ',"bytes":"@LEN@"}');
        actions.push(answer(rng, op, type)[1] ?? { raw: '' });
      }
      return { label: `${field}: ${value}`, actions };
    }
    case 'missing fields': {
      const line = rng.pick([
        '{}',
        '{"id":"@RID@"}',
        `{"values":[${wireValue(rng, type)}]}`,
        '{"id":"@RID@","rows":"@N@"}',
        '{"id":"@RID@","errors":{}}',
        '{"ready":1,"protocol":1,"version":"x"}',
      ]);
      return { label: `header ${line}`, actions: [{ line }] };
    }
    case 'deep': {
      const depth = rng.pick([5000, 20000, 200000]);
      const deep = rng.next() < 0.7 ? `"@DEEP:${depth}@"` : `"@DEEPO:${depth}@"`;
      const where = rng.pick(['a value', 'a row error', 'an error message', 'the id', 'a key']);
      const line =
        where === 'a value'
          ? `{"id":"@RID@","values":[${deep}],"rows":"@N@"}`
          : where === 'a row error'
            ? `{"id":"@RID@","values":[null],"rows":"@N@","errors":{"0":${deep}}}`
            : where === 'an error message'
              ? `{"id":"@RID@","values":[null],"rows":"@N@","errors":{"0":{"type":"E","message":${deep},"traceback":${deep}}}}`
              : where === 'the id'
                ? `{"id":${deep},"values":[1]}`
                : `{"id":"@RID@","x":${deep}}`;
      return { label: `nesting ${depth} deep in ${where}`, actions: [{ line }] };
    }
    case 'huge': {
      const size = rng.pick([200_000, 1_500_000, 3_000_000]);
      const where = rng.pick(['a value', 'an error message', 'a traceback', 'a key']);
      const huge = `"@HUGE:${size}@"`;
      const line =
        where === 'a value'
          ? `{"id":"@RID@","values":[${huge}]}`
          : where === 'a key'
            ? `{"id":"@RID@",${huge}:1}`
            : `{"id":"@RID@","values":[null],"errors":{"0":{"type":"E","message":${where === 'a traceback' ? '"m"' : huge},"traceback":${huge}}}}`;
      return { label: `a ${size}-character string in ${where}`, actions: [{ line }] };
    }
    case 'extra frames': {
      const extra = rng.pick([
        () => answer(rng, op, type),
        () => [{ raw: rng.hex(1 + rng.int(40)) }],
        () => [{ line: '{"ready":1,"protocol":1,"version":"x"}' }],
        () => [{ line: '{"id":"@RID@","values":[1]}' }, { line: '{"id":"@RID@","values":[1]}' }],
      ])();
      return {
        label: `an answer and ${extra.length} more piece(s)`,
        actions: [...answer(rng, op, type), ...extra],
      };
    }
    case 'payload': {
      if (op === 'call') {
        // a payload after a JSON answer: bytes the host never asked for
        return {
          label: 'a call answer with a payload',
          actions: [
            { line: `{"id":"@RID@","values":[${wireValue(rng, type)}],"bytes":"@LEN@"}` },
            { raw: rng.hex(rng.int(32)) },
          ],
        };
      }
      const head: Action = { line: '{"id":"@RID@","rows":"@N@","bytes":"@LEN@"}' };
      if (type === 'text' && op === 'callcols') {
        const first = rng.pick([0xffffffff, 0xfffffff8, 0x80000000, 2, 1000]);
        const text = rng.pick(['61626364', 'ff', 'c3', '80', 'e282ac', '00']);
        const pad = rng.pick(['wrap', 0, 1, -1, 7] as const);
        return {
          label: `text lengths [${first}, 0…], text ${text}, pad ${pad}`,
          actions: [head, { pay: 'text', first, text, pad }],
        };
      }
      const width = op === 'callf64' ? 8 : WIDTH[type];
      const delta = rng.pick([-8, -1, 1, 7, 8, 0]);
      const fill = type === 'boolean' ? rng.pick(['02', 'ff', '01']) : rng.hex(8);
      return {
        label: `a column of ${width}-byte cells, ${delta} bytes off, filled ${fill}`,
        actions: [head, { pay: 'col', width, delta, fill }],
      };
    }
  }
}

/** The body's interpreter of `actions` (see Action), and the row's ordinary result. */
const PRELUDE = String.raw`
import __main__, json, os, re, struct, sys, threading, time


def _fz_where():
    f = sys._getframe()
    while f is not None and f.f_code.co_name != '_serve':
        f = f.f_back
    request = f.f_locals.get('request') if f is not None else None
    if not isinstance(request, dict):
        return 0, 1
    rows = request.get('rows')
    return request.get('id'), len(rows) if isinstance(rows, list) else int(rows)


def _fz_pay(a, n):
    if a['pay'] == 'text':
        first = a['first']
        data = struct.pack('<%dI' % n, first, *([0] * (n - 1))) + bytes.fromhex(a['text'])
        if a['pad'] == 'wrap':  # as the host pads, in 32-bit arithmetic: (4n + total + 7) & ~7
            v = (4 * n + first + 7) & 0xFFFFFFFF
            size = (v - (1 << 32) if v >= 1 << 31 else v) & ~7
        else:
            size = len(data) + a['pad']
        fill = b'\0'
    else:
        size = ((a['width'] * n + 7) & ~7) + a['delta']
        data, fill = b'', bytes.fromhex(a['fill'])
    size = max(0, size)
    return (data + fill * (size // len(fill) + 1))[:size]


def _fz_line(a, rid, n, length):
    t = a['line'].replace('"@RID@"', json.dumps(rid)).replace('"@N@"', str(n))
    t = t.replace('"@LEN@"', str(length)).replace('"RID as text"', json.dumps(str(rid)))
    t = re.sub(r'"@DEEP:(\d+)@"', lambda m: '[' * int(m.group(1)) + ']' * int(m.group(1)), t)
    t = re.sub(r'"@DEEPO:(\d+)@"', lambda m: '{"a":' * int(m.group(1)) + '1' + '}' * int(m.group(1)), t)
    t = re.sub(r'"@HUGE:(\d+)@"', lambda m: '"' + 'x' * int(m.group(1)) + '"', t)
    b = t.encode('utf-8')
    if 'cut' in a:
        b = b[:a['cut']]
    return b + b'\n' if a.get('nl', True) else b


def _fz_emit(actions, rid, n):
    pieces = [_fz_pay(a, n) if 'pay' in a else bytes.fromhex(a['raw']) if 'raw' in a else a for a in actions]
    for i, p in enumerate(pieces):
        if isinstance(p, dict):
            after = [q for q in pieces[i + 1:] if isinstance(q, bytes)]
            pieces[i] = _fz_line(p, rid, n, len(after[0]) if after else 0)
    for p in pieces:
        while p:
            p = p[os.write(__main__._proto_out_fd, p):]


def _fz_later(actions, rid, n):
    time.sleep(0.02)
    _fz_emit(actions, rid, n)
`;

const RESULT: Record<ValueType, string> = {
  number: 'float(row) * 2',
  text: "'t%d' % row",
  boolean: 'row % 2 == 0',
  enum: 'row + 1',
  datetime:
    "__import__('datetime').datetime(2020, 1, 1, tzinfo=__import__('datetime').timezone.utc) + __import__('datetime').timedelta(days=row)",
};

function body(c: Case): string {
  const actions = Buffer.from(JSON.stringify(c.actions)).toString('hex');
  return [
    PRELUDE,
    `actions = json.loads(bytes.fromhex('${actions}'))`,
    'rid, n = _fz_where()',
    'row = int(float(args[0]))',
    `when = ${JSON.stringify(c.when) /* rows from 100 on are plain: the warm-up */}`,
    'if row >= 100:',
    '    pass',
    "elif when == 'thread':",
    '    if row == 0:',
    '        threading.Thread(target=_fz_later, args=(actions, rid, n), daemon=True).start()',
    "elif when == 'exit':",
    '    _fz_emit(actions, rid, n)',
    '    os._exit(3)',
    "elif when == 'always' or when == 'row:%d' % row:",
    '    _fz_emit(actions, rid, n)',
    `result = ${RESULT[c.returnType]}`,
  ].join('\n');
}

const TYPES: ValueType[] = ['number', 'text', 'boolean', 'enum', 'datetime'];
/** Rows of a hostile batch: after the warm-up, one chunk (re-run row by row when it fails). */
const ROWS = 4;
/** Plain rows first (100…), so the function has a worker that served a request, and its time per row. */
const WARM_ROWS = 32;

function makeCases(seed: number, api: Api, count: number): Case[] {
  const rng = seeded(seed);
  const cases: Case[] = [];
  for (let i = 0; i < count; i++) {
    const argType = rng.next() < 0.5 ? 'number' : 'text';
    // number → number half the time in batches: the callf64 path (pipe or shared file)
    const returnType: ValueType =
      api !== 'eval' && argType === 'number' && rng.next() < 0.5 ? 'number' : rng.pick(TYPES);
    const op = opOf(api, argType, returnType);
    const { label, actions } = garbage(rng, op, returnType);
    const r = rng.next();
    const when: Case['when'] =
      r < 0.15
        ? 'thread'
        : r < 0.22
          ? 'exit'
          : r < 0.6 || api === 'eval'
            ? 'always'
            : `row:${rng.int(ROWS)}`;
    cases.push({
      name: `${api}_${i}`,
      api,
      argType,
      returnType,
      when,
      actions,
      label: `${api} #${i} (${op}, ${argType} → ${returnType}, ${when}): ${label}`,
    });
  }
  return cases;
}

/**
 * Cases run as they are (not drawn), each with the outcome every row must
 * have: a text column whose lengths add up past 2^32, which the host's
 * 32-bit padding arithmetic took for a payload of a few bytes (and then
 * decoded for billions of iterations); row errors whose fields are not of
 * their types; a payload announced longer than what comes (each row waits
 * for its deadline: Timeout).
 */
function directed(): Case[] {
  const wrap = (first: number): Action[] => [
    { line: '{"id":"@RID@","rows":"@N@","bytes":"@LEN@"}' },
    { pay: 'text', first, text: '61626364', pad: 'wrap' },
  ];
  const fieldsLine = `{"id":"@RID@","values":[null],"errors":{"0":{"type":"ResultTypeError","message":"@DEEP:200000@","traceback":{"a":1},"limit":"disk","got":[1,2]}}}`;
  return [
    ...(['evalBatch', 'evalColumns'] as const).flatMap((api) =>
      [0xffffffff, 0xfffffffc].map((first) => ({
        name: `${api}_wrap_${first}`,
        api,
        argType: 'text' as const,
        returnType: 'text' as const,
        when: 'always' as const,
        actions: wrap(first),
        label: `${api} (callcols, text → text): text lengths [${first}, 0…] padded as 32-bit arithmetic wraps`,
        expect:
          /^Runtime: function \S+: malformed callcols response for \d+ rows \((\d+ payload bytes for \d+ text bytes|shorter than its lengths)\)/,
      })),
    ),
    ...(['eval', 'evalBatch'] as const).map((api) => ({
      name: `${api}_fields`,
      api,
      argType: 'text' as const,
      returnType: 'number' as const,
      when: 'always' as const,
      actions: [{ line: fieldsLine }],
      label: `${api} (call): a row error with a message nested 200000 deep and fields of other types`,
      // (or, for a row re-run on the worker of the row before: that row's own answer, late)
      expect:
        /^Runtime: function \S+: (\(a value nested too deeply to show\)$|unexpected frame from the driver: )/,
    })),
    ...(['evalBatch', 'evalColumns'] as const).map((api) => ({
      name: `${api}_short_payload`,
      api,
      argType: 'number' as const,
      returnType: 'text' as const,
      when: 'always' as const,
      actions: [{ line: '{"id":"@RID@","rows":"@N@","bytes":100000}' }, { raw: '00'.repeat(10) }],
      label: `${api} (callcols, number → text): 100000 payload bytes announced, 10 sent`,
      expect: /^Timeout: /,
    })),
    {
      name: 'eval_fields_typed',
      api: 'eval',
      argType: 'number',
      returnType: 'text',
      when: 'always',
      actions: [
        {
          line: '{"id":"@RID@","values":[null],"errors":{"0":{"type":"ValueError","message":5,"traceback":{"a":[1]},"limit":"disk"}}}',
        },
      ],
      label: 'eval (call): a row error whose message, traceback and limit are of other types',
      expect: /^Runtime: function \S+: ValueError: 5$/,
    },
    {
      name: 'eval_got_typed',
      api: 'eval',
      argType: 'number',
      returnType: 'text',
      when: 'always',
      actions: [
        {
          line: '{"id":"@RID@","values":[null],"errors":{"0":{"type":"ResultTypeError","message":"m","got":{"a":1},"traceback":7,"limit":["output"]}}}',
        },
      ],
      label: 'eval (call): a ResultTypeError whose got, traceback and limit are of other types',
      expect: /^Runtime: function \S+: m$/,
    },
  ];
}

// ---- checking outcomes -------------------------------------------------------------------

/** Where a call that has not settled by then counts as hung (timeoutMs is 1.5 s). */
const HANG_MS = 45_000;
const TIMEOUT_MS = 1_500;
const LIMITS = new Set(['memory', 'cpu-time', 'processes', 'file-size', 'output', 'wall-clock']);

function settle<T>(p: Promise<T>): Promise<{ value: T } | { error: unknown } | { hung: true }> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
    new Promise<{ hung: true }>((resolve) => {
      timer = setTimeout(() => resolve({ hung: true }), HANG_MS);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** What is wrong with an error from a call, or undefined when it is a well-typed ExtFnError. */
function badError(error: unknown): string | undefined {
  if (!ExtFnError.isInstance(error)) return `not an ExtFnError: ${String(error).slice(0, 200)}`;
  const e = error as ExtFnError;
  if (e.kind !== 'Runtime' && e.kind !== 'Timeout') return `kind ${e.kind}: ${e.message}`;
  // the runner's catch-all: something threw inside the host while it read the answer
  if (/: runner failed: /.test(e.message)) return `an internal error: ${e.message.slice(0, 200)}`;
  if (typeof e.message !== 'string') return 'a message that is not a string';
  if (e.stderr !== undefined && typeof e.stderr !== 'string') return `stderr ${typeof e.stderr}`;
  if (e.limit !== undefined && !LIMITS.has(e.limit)) return `limit ${String(e.limit).slice(0, 80)}`;
  if (e.got !== undefined && typeof e.got !== 'string' && typeof e.got !== 'number')
    return `got ${typeof e.got}`;
  return undefined;
}

/** What is wrong with one row's result, or undefined when it is a value of `type` or a well-typed error. */
function badResult(result: unknown, type: ValueType): string | undefined {
  if (ExtFnError.isInstance(result)) return badError(result);
  const v = result as Value | undefined;
  return v?.type === type
    ? undefined
    : `not a ${type} value: ${String(JSON.stringify(v)).slice(0, 200)}`;
}

const arg = (c: Case, i: number): Value =>
  c.argType === 'number' ? { type: 'number', value: i } : { type: 'text', value: String(i) };

/** Plain calls of the case's function (rows from 100 on); what is wrong with their results, if anything. */
async function warmUp(
  registry: ReturnType<typeof registryWith>['registry'],
  c: Case,
): Promise<string | undefined> {
  const args = Array.from({ length: WARM_ROWS }, (_, i) => arg(c, 100 + i));
  if (c.api === 'eval') {
    const value = await registry.eval(c.name, [args[0]!]);
    return value.type === c.returnType ? undefined : JSON.stringify(value);
  }
  if (c.api === 'evalBatch') {
    const results = await registry.evalBatch(
      c.name,
      args.map((a) => [a]),
    );
    const bad = results.find((r) => ExtFnError.isInstance(r) || r.type !== c.returnType);
    return bad === undefined ? undefined : String(bad);
  }
  const column =
    c.argType === 'number'
      ? Float64Array.from({ length: WARM_ROWS }, (_, i) => 100 + i)
      : Array.from({ length: WARM_ROWS }, (_, i) => String(100 + i));
  const { errors } = await registry.evalColumns(c.name, [column]);
  return errors.size === 0 ? undefined : String([...errors.values()][0]);
}

/** Runs one case; what went wrong, if anything. */
async function run(
  registry: ReturnType<typeof registryWith>['registry'],
  c: Case,
): Promise<string[]> {
  const options = { timeoutMs: TIMEOUT_MS };
  const problems: string[] = [];
  const warm = await settle(warmUp(registry, c));
  if (!('value' in warm) || warm.value !== undefined) {
    const why =
      'value' in warm ? warm.value : 'error' in warm ? String(warm.error) : 'did not settle';
    return [`${c.label}: the plain warm-up call: ${why}`];
  }
  /** Each row's outcome: a Value (or a column cell) or the error it got. */
  let rows: unknown[] = [];
  if (c.api === 'eval') {
    const out = await settle(registry.eval(c.name, [arg(c, 0)], options));
    if ('hung' in out) problems.push('eval did not settle');
    else rows = ['error' in out ? out.error : out.value];
  } else if (c.api === 'evalBatch') {
    const input = Array.from({ length: ROWS }, (_, i) => [arg(c, i)]);
    const out = await settle(registry.evalBatch(c.name, input, options));
    if ('hung' in out) problems.push('evalBatch did not settle');
    else if ('error' in out) problems.push(`rejected: ${badError(out.error) ?? String(out.error)}`);
    else if (out.value.length !== ROWS) problems.push(`${out.value.length} results`);
    else rows = out.value;
  } else {
    const column =
      c.argType === 'number'
        ? Float64Array.from({ length: ROWS }, (_, i) => i)
        : Array.from({ length: ROWS }, (_, i) => String(i));
    const out = await settle(registry.evalColumns(c.name, [column], options));
    if ('hung' in out) problems.push('evalColumns did not settle');
    else if ('error' in out) problems.push(`rejected: ${badError(out.error) ?? String(out.error)}`);
    else {
      const { values, errors } = out.value as {
        values: ArrayLike<unknown>;
        errors: Map<number, unknown>;
      };
      if (values.length !== ROWS) problems.push(`${values.length} values`);
      else rows = Array.from(values, (value, i) => errors.get(i) ?? { type: c.returnType, value });
    }
  }
  rows.forEach((result, i) => {
    const bad = badResult(result, c.returnType);
    if (bad) problems.push(`row ${i}: ${bad}`);
    else if (c.expect) {
      const seen = ExtFnError.isInstance(result)
        ? `${result.kind}: ${result.message}`
        : `value: ${String(JSON.stringify(result)).slice(0, 100)}`;
      if (!c.expect.test(seen)) problems.push(`row ${i}: ${seen.slice(0, 200)}, not ${c.expect}`);
    }
  });
  // a normal call right after, on the same runner
  const ok = await settle(registry.eval('ok', [{ type: 'number', value: 21 }], options));
  if (!('value' in ok) || (ok.value as { value: unknown }).value !== 42) {
    problems.push(`the normal call after it: ${JSON.stringify('value' in ok ? ok.value : ok)}`);
  }
  return problems.map((p) => `${c.label}: ${p}`);
}

// ---- the tests ---------------------------------------------------------------------------

const CASES: Record<Api, Case[]> = {
  eval: makeCases(0x5eed01, 'eval', 40),
  evalBatch: makeCases(0x5eed02, 'evalBatch', 35),
  evalColumns: makeCases(0x5eed03, 'evalColumns', 35),
};
const DIRECTED = directed();
const ALL = [...CASES.eval, ...CASES.evalBatch, ...CASES.evalColumns, ...DIRECTED];

describe.skipIf(!restrictedOk)(
  `hostile frames on the protocol channel${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const fns: Record<string, [string, ValueType[], ValueType]> = {
      ok: ['result = args[0] * 2', ['number'], 'number'],
    };
    for (const c of ALL) fns[c.name] = [body(c), [c.argType], c.returnType];
    // Cases run two at a time: most of a case is waiting (a timeout, a worker start).
    const { registry } = registryWith('restricted', fns, { maxWorkers: 2 });
    afterAll(() => registry.close());

    /** Runs cases `width` at a time; every problem found. */
    async function runAll(cases: Case[], width = 2): Promise<string[]> {
      const problems: string[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: width }, async () => {
          while (next < cases.length) {
            const c = cases[next++]!;
            try {
              problems.push(...(await run(registry, c)));
            } catch (error) {
              problems.push(`${c.label}: the test threw ${String(error)}`);
            }
          }
        }),
      );
      return problems;
    }

    test('the body reaches the protocol channel and its request (the cases test something)', async () => {
      const probe: Case = {
        name: 'ok',
        api: 'eval',
        argType: 'number',
        returnType: 'number',
        when: 'always',
        actions: [],
        label: '',
      };
      const { registry: r } = registryWith('restricted', {
        forged: [
          body({ ...probe, actions: [{ line: '{"id":"@RID@","values":[7.5]}' }] }),
          ['number'],
          'number',
        ],
        wrong: [
          body({ ...probe, actions: [{ line: '{"id":-5,"values":[1]}' }] }),
          ['number'],
          'number',
        ],
      });
      try {
        // its own answer, with the request's id, is taken for the driver's
        expect(await r.eval('forged', [{ type: 'number', value: 0 }])).toEqual({
          type: 'number',
          value: 7.5,
        });
        const wrong = await settle(r.eval('wrong', [{ type: 'number', value: 0 }]));
        const error = 'error' in wrong ? (wrong.error as ExtFnError) : undefined;
        expect(ExtFnError.isInstance(error)).toBe(true);
        expect(error!.kind).toBe('Runtime');
        expect(error!.message).toMatch(/unexpected frame from the driver: \{"id":-5/);
      } finally {
        await r.close();
      }
    });

    test.each(['eval', 'evalBatch', 'evalColumns'] as const)(
      'seeded cases through %s settle with a value or a typed error, and the host goes on',
      async (api) => {
        expect(await runAll(CASES[api])).toEqual([]);
      },
      240_000,
    );

    test('directed: text lengths that add up past 2^32', async () => {
      expect(await runAll(DIRECTED.filter((c) => c.name.includes('_wrap_')))).toEqual([]);
    }, 240_000);

    test('directed: row errors with fields of other types', async () => {
      expect(
        await runAll(DIRECTED.filter((c) => c.name.includes('_fields') || c.name.includes('_got'))),
      ).toEqual([]);
    }, 240_000);

    test('directed: a payload announced longer than what comes (the deadline ends it)', async () => {
      expect(await runAll(DIRECTED.filter((c) => c.name.includes('_short_')))).toEqual([]);
    }, 240_000);

    test('the pool still serves every function after all that', async () => {
      const rows = Array.from({ length: 50 }, (_, i) => [{ type: 'number' as const, value: i }]);
      const results = await registry.evalBatch('ok', rows);
      expect(results).toEqual(rows.map(([x]) => ({ type: 'number', value: x!.value * 2 })));
    });
  },
);

// ---- a host process of its own -----------------------------------------------------------

const DIST = fileURLToPath(new URL('../dist/index.js', import.meta.url));

/** Runs a host script in a fresh Node process; resolves with its exit code and output. */
function host(script: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      ['--input-type=module', '-e', script.join('\n')],
      { cwd: fileURLToPath(new URL('..', import.meta.url)), timeout: 60_000 },
      (error, stdout, stderr) => {
        if (error?.killed)
          reject(new Error(`the host did not exit on its own\n${stdout}\n${stderr}`));
        else
          resolve({
            code: typeof error?.code === 'number' ? error.code : 0,
            out: stdout,
            err: stderr,
          });
      },
    ),
  );
}

describe.skipIf(!restrictedOk)(
  `a host process fed hostile frames${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    test('survives them, settles every call, and exits on its own after close()', async () => {
      const pick = (name: string) => ALL.find((c) => c.name === name)!;
      const cases = [pick('eval_fields'), pick('evalBatch_wrap_4294967295'), CASES.evalColumns[0]!];
      const { code, out, err } = await host([
        "import { Registry, Value, ExtFnError } from '@improv/extfn-core';",
        `import { python } from ${JSON.stringify(DIST)};`,
        `const registry = new Registry({ runners: [python({ interpreter: ${JSON.stringify(PYTHON)}, policy: 'restricted' })], timeoutMs: ${TIMEOUT_MS} });`,
        "registry.register({ name: 'ok', language: 'python', body: 'result = args[0] * 2', argTypes: ['number'], returnType: 'number' });",
        ...cases.map(
          (c) =>
            `registry.register({ name: ${JSON.stringify(c.name)}, language: 'python', body: ${JSON.stringify(body(c))}, argTypes: [${JSON.stringify(c.argType)}], returnType: ${JSON.stringify(c.returnType)} });`,
        ),
        'const kind = (r) => (ExtFnError.isInstance(r) ? r.kind : r?.type);',
        'const seen = [];',
        `const arg = (t, i) => (t === 'number' ? Value.number(i) : Value.text(String(i)));`,
        ...cases.map((c) => {
          const call =
            c.api === 'eval'
              ? `registry.eval(${JSON.stringify(c.name)}, [arg(${JSON.stringify(c.argType)}, 0)]).then(kind, kind)`
              : c.api === 'evalBatch'
                ? `registry.evalBatch(${JSON.stringify(c.name)}, [0, 1, 2].map((i) => [arg(${JSON.stringify(c.argType)}, i)])).then((rows) => rows.map(kind), kind)`
                : `registry.evalColumns(${JSON.stringify(c.name)}, [${c.argType === 'number' ? 'Float64Array.of(0, 1, 2)' : "['0', '1', '2']"}]).then((r) => r.values.length, kind)`;
          return `seen.push(await ${call});`;
        }),
        "seen.push((await registry.eval('ok', [Value.number(21)])).value);",
        'console.log(JSON.stringify(seen));',
        'await registry.close();',
      ]);
      expect(err).not.toMatch(/Unhandled|RangeError|TypeError/);
      expect(code).toBe(0);
      const seen = JSON.parse(out) as unknown[];
      expect(seen).toHaveLength(4);
      expect(seen[3]).toBe(42);
      // each hostile call settled: a kind or a type per row (the columns' length)
      expect(seen[0]).toMatch(/^(Runtime|Timeout|number)$/);
      expect(seen[1]).toHaveLength(3);
      for (const row of seen[1] as unknown[]) expect(row).toMatch(/^(Runtime|Timeout|text)$/);
      expect(String(seen[2])).toMatch(/^(3|Runtime|Timeout)$/);
    }, 90_000);
  },
);

test.skipIf(restrictedOk)(`hostile frames: ${noRestricted}`, () => {});
