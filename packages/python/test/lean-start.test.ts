/**
 * What a worker no longer imports at its start, and what it must still do.
 * The driver defers `array`, `itertools` and `mmap` to the paths that use them,
 * uses `posix` for `os` (and pops the shared-file variable from its environ),
 * takes the datetime classes from `_datetime` (not the `datetime` module), and
 * packs result columns with struct up to _PACK_MAX (8192) values, with array
 * beyond. Spoken to directly (no sandbox: frames only), with the source and
 * the precompiled stub: a datetime function as the very first call of a fresh
 * worker, a body importing the modules the driver no longer does, and result
 * columns of every binary type on both sides of the struct/array switch.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { precompiledDriver } from '../src/bootstrap.js';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { hasPython, PYTHON } from './helpers.js';

type Frame = [Record<string, unknown>, Buffer?];
type Answer = { header: Record<string, unknown>; body: Buffer };

/** The `ready` frame of the last run. */
let lastReady: Record<string, unknown> | undefined;

/** The driver (`program`: the source or the stub) over `frames` after a load of `fn`; its answers after load's. */
function run(
  program: string,
  fn: Record<string, unknown>,
  frames: Frame[],
  env: Record<string, string> = {},
): Answer[] {
  const bytes = Buffer.from(program, 'utf8');
  const input: Buffer[] = [Buffer.from(`${bytes.length}\n`), bytes];
  const all: Frame[] = [[{ op: 'load', id: 1, fn }], ...frames, [{ op: 'exit' }]];
  for (const [header, payload] of all) {
    input.push(Buffer.from(`${JSON.stringify(header)}\n`));
    if (payload) input.push(payload);
  }
  const out = spawnSync(PYTHON, PYTHON_ARGS, {
    input: Buffer.concat(input),
    env: { PYTHONHASHSEED: '0', ...env },
    maxBuffer: 64 << 20,
  });
  expect(out.stderr.toString('utf8')).toBe('');
  expect(out.status).toBe(0);
  const answers: Answer[] = [];
  let at = 0;
  while (at < out.stdout.length) {
    const end = out.stdout.indexOf(0x0a, at);
    // its timing (`workMs`, work-ms.test.ts) aside, every answer is checked whole
    const { workMs, ...header } = JSON.parse(out.stdout.subarray(at, end).toString('utf8'));
    expect(workMs === undefined || typeof workMs === 'number').toBe(true);
    const size = typeof header.bytes === 'number' ? header.bytes : 0;
    answers.push({ header, body: out.stdout.subarray(end + 1, end + 1 + size) });
    at = end + 1 + size;
  }
  expect(answers[0]!.header).toMatchObject({ ready: 1 });
  lastReady = answers[0]!.header;
  expect(answers[1]!.header).toEqual({ id: 1, ok: true });
  return answers.slice(2);
}

const padded = (b: Buffer) => Buffer.concat([b, Buffer.alloc(-b.length & 7)]);

describe.skipIf(!hasPython)('a lean worker start (no sandbox: frames only)', async () => {
  const stub = hasPython ? await precompiledDriver(PYTHON, DRIVER_SOURCE) : undefined;
  const programs: [string, string][] = [
    ['source', DRIVER_SOURCE],
    ['stub', stub ?? DRIVER_SOURCE],
  ];

  test('the stub is in use (the host compiled the driver)', () => {
    expect(stub).toBeDefined();
  });

  test.each(programs)(
    '%s: a datetime function as the first call of a fresh worker, over JSON and callcols',
    (_, program) => {
      // the body checks the argument is the datetime module's own class
      const fn = {
        name: 'later',
        body: [
          'import datetime',
          'assert isinstance(args[0], datetime.datetime) and args[0].tzinfo is datetime.timezone.utc',
          'result = args[0] + datetime.timedelta(days=1, microseconds=1)',
        ].join('\n'),
        argTypes: ['datetime'],
        returnType: 'datetime',
      };
      const json = run(program, fn, [
        [
          {
            op: 'call',
            id: 2,
            rows: [['2024-02-28T23:59:59.123Z'], ['1999-12-31T23:00:00+02:00']],
          },
        ],
      ]);
      expect(json[0]!.header).toEqual({
        id: 2,
        values: ['2024-02-29T23:59:59.123001Z', '2000-01-01T21:00:00.000001Z'],
      });
      // nanoseconds since 1970 in, out: the first request of its worker too
      const ns = [0n, 1_700_000_000_123_456_789n];
      const column = Buffer.from(BigInt64Array.from(ns).buffer);
      const cols = run(program, fn, [
        [{ op: 'callcols', id: 2, rows: ns.length, bytes: column.length }, column],
      ]);
      expect(cols[0]!.header).toEqual({ id: 2, rows: 2, bytes: 16 });
      const day = 86_400_000_000_000n;
      // a timedelta drops what is below a microsecond
      expect(Array.from(new BigInt64Array(new Uint8Array(cols[0]!.body).buffer))).toEqual([
        day + 1000n,
        1_700_000_000_123_456_000n + day + 1000n,
      ]);
    },
  );

  test.each(programs)(
    '%s: the body runs before os, array, collections, itertools, datetime or mmap are imported, and gets each whole',
    (_, program) => {
      const fn = {
        name: 'modules',
        body: [
          'import sys',
          "before = sorted(m for m in ('os', 'array', 'collections', 'itertools', 'datetime', 'mmap') if m in sys.modules)",
          'import array, collections.abc, datetime, itertools, mmap, os, subprocess',
          'checks = [',
          "    os.path.join('a', 'b'), os.environ.get('PYTHONHASHSEED'),",
          '    # the shared file descriptor the driver took: gone from os.environ and from what children inherit',
          "    'IMPROV_EXTFN_SHARED_FD' in os.environ,",
          "    b'IMPROV_EXTFN_SHARED_FD' in subprocess.run(['/usr/bin/env'], capture_output=True).stdout,",
          "    isinstance(array.array('d'), collections.abc.MutableSequence),",
          '    datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc).isoformat(),',
          '    list(itertools.accumulate([1, 2, 3])),',
          "    collections.Counter('abca').most_common(1),",
          '    mmap.PAGESIZE > 0,',
          ']',
          "result = '%s %s' % (before, checks)",
        ].join('\n'),
        argTypes: [],
        returnType: 'text',
      };
      const [answer] = run(program, fn, [[{ op: 'call', id: 2, rows: [[]] }]], {
        IMPROV_EXTFN_SHARED_FD: '2', // any open descriptor: the driver takes it, maps it on first use
      });
      expect(lastReady).toMatchObject({ shared: ['callf64'] });
      expect(answer!.header).toEqual({
        id: 2,
        values: [
          "[] ['a/b', '0', False, False, True, '2000-01-01T00:00:00+00:00', [1, 3, 6], [('a', 2)], True]",
        ],
      });
    },
  );

  // Chunks of 8192 values (struct) and 8193 (array), each type's result column.
  const SIZES = [8192, 8193];
  const f64 = (n: number) => Float64Array.from({ length: n }, (_, i) => i * 1.25 - 3000);
  const u32 = (n: number) => Uint32Array.from({ length: n }, (_, i) => (i * 2_654_435_761) >>> 0);
  const i64 = (n: number) =>
    BigInt64Array.from({ length: n }, (_, i) => BigInt(i - 4000) * 1_000_000_007_001n);
  const texts = (n: number) => Array.from({ length: n }, (_, i) => (i % 3 ? `row${i}` : `é${i}`));
  const textColumn = (values: string[]) => {
    const parts = values.map((v) => Buffer.from(v, 'utf8'));
    const lengths = Buffer.from(Uint32Array.from(parts.map((p) => p.length)).buffer);
    return padded(Buffer.concat([lengths, ...parts]));
  };
  const bytesOf = (a: ArrayBufferView) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

  test.each(programs)(
    '%s: result columns of every binary type, packed by struct and by array alike',
    (_, program) => {
      const same = (type: string, op: string, column: (n: number) => Buffer) => {
        const fn = { name: type, body: 'result = args[0]', argTypes: [type], returnType: type };
        const frames: Frame[] = SIZES.map((n, k) => {
          const payload = column(n);
          return [{ op, id: 2 + k, rows: n, bytes: payload.length }, payload];
        });
        const answers = run(program, fn, frames);
        SIZES.forEach((n, k) => {
          expect(answers[k]!.header, `${type} ${n}`).toMatchObject({ id: 2 + k, rows: n });
          expect(answers[k]!.header.errors, `${type} ${n}`).toBeUndefined();
          expect(answers[k]!.body.equals(column(n)), `${type} ${n}`).toBe(true);
        });
      };
      same('number', 'callf64', (n) => bytesOf(f64(n)));
      same('number', 'callcols', (n) => bytesOf(f64(n)));
      same('enum', 'callcols', (n) => padded(bytesOf(u32(n))));
      same('datetime', 'callcols', (n) => bytesOf(i64(n)));
      same('text', 'callcols', (n) => textColumn(texts(n)));
    },
  );
});
