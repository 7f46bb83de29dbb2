/**
 * The driver at its edges: bodies that forge frames on the protocol channel,
 * a fork bomb bounded by the process limit, binary f64 batches through the
 * fast and the per-row paths, frames the host never sends (a datetime
 * outside the range) answered with a clear row error, and a callcols frame
 * written by hand: columns and cells in, a result column and cells out.
 */
import { execFileSync } from 'node:child_process';
import { Value } from '@improv/extfn-core';
import { afterAll, describe, expect, test } from 'vitest';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { failure, hasPython, noRestricted, PYTHON, registryWith, restrictedOk } from './helpers.js';

// A body that finds the protocol channel and writes a frame of its own: it can
// spoil only its own call, and it does so the same way in both modes.
const FORGE = [
  'import os',
  'for fd in range(3, 64):',
  '    try:',
  '        os.write(fd, b\'{"id":99,"forged":1}\\n\')',
  '    except OSError:',
  '        pass',
  'result = 1.0',
].join('\n');

describe.skipIf(!restrictedOk)(
  `a body writing to the protocol channel${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    const { registry } = registryWith('restricted', {
      forge: [FORGE, [], 'number'],
      ok: ['result = 2.0', [], 'number'],
    });
    afterAll(() => registry.close());

    test.each(['warm', 'oneShot'] as const)(
      'fails its own call in %s mode, and the next call is unaffected',
      async (mode) => {
        const error = await failure(registry.eval('forge', [], { mode }));
        expect(error.kind).toBe('Runtime');
        expect(error.message).toMatch(
          /^function forge: unexpected frame from the driver: \{"id":99,"forged":1\}/,
        );
        expect(await registry.eval('ok', [], { mode })).toEqual({ type: 'number', value: 2 });
      },
    );
  },
);

describe.skipIf(!restrictedOk)(`a fork bomb${restrictedOk ? '' : ` (${noRestricted})`}`, () => {
  test('is bounded by the process limit and reported as such', async () => {
    const body = [
      'import os, time',
      'while True:',
      '    if os.fork() == 0:',
      '        time.sleep(30)',
      '        os._exit(0)',
    ].join('\n');
    const { registry } = registryWith('restricted', { bomb: [body, [], 'number'] });
    try {
      const error = await failure(
        registry.eval('bomb', [], { mode: 'oneShot', timeoutMs: 10_000 }),
      );
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(/BlockingIOError/);
      expect(error.limit).toBe('processes');
    } finally {
      await registry.close();
    }
  });
});

// A body that forks and lets its child run on: the child's copy of the body
// returns into its copy of the driver, which would answer the same request
// as the worker does (whichever came first was taken, and the second failed
// the worker as a frame nobody asked for). Only the worker answers.
const FORK_RETURNS = [
  'import os',
  'pid = os.fork()',
  'result = args[0] * 10 + (1 if pid == 0 else 0)  # the child would answer x*10 + 1',
].join('\n');

describe.skipIf(!restrictedOk)(
  `a body whose forked child returns into the driver${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    test.each(['warm', 'oneShot'] as const)(
      "gets the worker's own answer every time in %s mode",
      async (mode) => {
        // (a warm worker is then replaced: its child, exited, is a process left after the call)
        const { registry } = registryWith('restricted', {
          fork: [FORK_RETURNS, ['number'], 'number'],
        });
        try {
          for (let x = 1; x <= 5; x++) {
            expect(await registry.eval('fork', [Value.number(x)], { mode })).toEqual(
              Value.number(x * 10),
            );
          }
        } finally {
          await registry.close();
        }
      },
    );

    test("in batches, on a tree worker and on a zygote's fork alike", async () => {
      const { registry, runner } = registryWith('restricted', {
        fork: [FORK_RETURNS, ['number'], 'number'],
        fork2: [FORK_RETURNS, ['number'], 'number'],
      });
      try {
        const rows = Array.from({ length: 8 }, (_, i) => [Value.number(i)]);
        const want = rows.map(([x]) => Value.number((x as { value: number }).value * 10));
        // two functions at once: the second start, at least, forks from the zygote
        const [a, b] = await Promise.all([
          registry.evalBatch('fork', rows),
          registry.evalBatch('fork2', rows),
        ]);
        expect(a).toEqual(want);
        expect(b).toEqual(want);
        expect(runner.stats().zygoteStarts).toBeGreaterThanOrEqual(1);
        expect(await registry.evalBatch('fork', rows)).toEqual(want);
      } finally {
        await registry.close();
      }
    });

    test('a fork bomb whose children return is reported as the process limit', async () => {
      const body = ['import os', 'while True:', '    os.fork()'].join('\n');
      const { registry } = registryWith('restricted', { bomb: [body, [], 'number'] });
      try {
        for (const mode of ['warm', 'oneShot'] as const) {
          const error = await failure(registry.eval('bomb', [], { mode, timeoutMs: 20_000 }));
          expect(error.kind, mode).toBe('Runtime');
          expect(error.message, mode).toMatch(/^function bomb: BlockingIOError/);
          expect(error.limit, mode).toBe('processes');
        }
      } finally {
        await registry.close();
      }
    });
  },
);

describe.skipIf(!restrictedOk)(
  `binary f64 batches${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    // The driver runs f64 chunks through a fast path and falls back to the
    // per-row loop when a row prints or imports random; results must not show which ran.
    const { registry } = registryWith('restricted', {
      prints: ['if args[0] == 2:\n    print("two")\nresult = args[0] * 2', ['number'], 'number'],
      floods: [
        'print("row")\nif args[0] == 2:\n    print("x" * 2_000_000)\nresult = args[0]',
        ['number'],
        'number',
      ],
      // random is first imported mid-chunk (chunks start at one row, then grow)
      rnd: [
        [
          // No "random" in the text (the driver pre-imports it for bodies that name it):
          // tempfile imports it, from row 20 on.
          'if args[0] >= 20:',
          '    import sys, tempfile',
          "    rng = sys.modules['ran' + 'dom']",
          "    result = getattr(rng, 'ran' + 'dom')()",
          'else:',
          '    result = args[0]',
        ].join('\n'),
        ['number'],
        'number',
      ],
      odd: [
        'x = args[0]\nif x == 1:\n    result = True\nelif x == 2:\n    pass\nelif x == 3:\n    result = 10**400\nelif x == 4:\n    raise KeyError("k")\nelse:\n    result = x',
        ['number'],
        'number',
      ],
    });
    afterAll(() => registry.close());
    const column = Float64Array.from({ length: 50 }, (_, i) => i);

    test('a row that prints does not change any value', async () => {
      const { values, errors } = await registry.evalColumns('prints', [column]);
      expect(errors.size).toBe(0);
      expect([...values]).toEqual([...column].map((x) => x * 2));
    });

    test('only the row that prints too much fails; the rows after it print and succeed', async () => {
      const { values, errors } = await registry.evalColumns('floods', [column]);
      expect([...errors.keys()]).toEqual([2]);
      expect(errors.get(2)).toMatchObject({ kind: 'Runtime', limit: 'output' });
      expect(values[3]).toBe(3);
      expect(values[49]).toBe(49);
    });

    test('random is reseeded for every row, as in eval, also when first imported mid-chunk', async () => {
      const single = await registry.eval('rnd', [{ type: 'number', value: 20 }], {
        mode: 'oneShot',
      });
      const rows = Float64Array.from({ length: 400 }, (_, i) => i);
      const { values, errors } = await registry.evalColumns('rnd', [rows]);
      expect(errors.size).toBe(0);
      expect([...values.subarray(0, 20)]).toEqual([...rows.subarray(0, 20)]);
      expect(new Set(values.subarray(20))).toEqual(new Set([(single as { value: number }).value]));
    });

    test('bool, unset, too-large and raising rows fail alone, as in evalBatch', async () => {
      const input = Float64Array.from([0, 1, 2, 3, 4, 5]);
      const { values, errors } = await registry.evalColumns('odd', [input]);
      const batch = await registry.evalBatch(
        'odd',
        [...input].map((x) => [{ type: 'number', value: x }]),
      );
      expect([...errors.keys()].sort()).toEqual([1, 2, 3, 4]);
      for (const i of [1, 2, 3, 4])
        expect(errors.get(i)!.message).toBe((batch[i] as { message: string }).message);
      expect([values[0], values[5]]).toEqual([0, 5]);
    });
  },
);

describe.skipIf(!hasPython)('the driver spoken to directly (no sandbox: frames only)', () => {
  test('a datetime outside 0001..9999 is a clear row error, not a driver traceback', () => {
    const source = Buffer.from(DRIVER_SOURCE);
    const frames = [
      {
        op: 'load',
        id: 1,
        fn: {
          name: 'id',
          body: 'result = args[0]',
          argTypes: ['datetime'],
          returnType: 'datetime',
        },
      },
      {
        op: 'call',
        id: 2,
        rows: [['0000-01-01T00:00:00Z'], ['+010000-01-01T00:00:00Z'], ['0001-01-01T00:00:00Z']],
      },
      { op: 'exit' },
    ];
    const out = execFileSync(PYTHON, PYTHON_ARGS, {
      input: Buffer.concat([
        Buffer.from(`${source.length}\n`),
        source,
        Buffer.from(frames.map((f) => `${JSON.stringify(f)}\n`).join('')),
      ]),
      env: { PYTHONHASHSEED: '0' },
    });
    const answer = JSON.parse(out.toString().trim().split('\n')[2]!);
    expect(answer.values).toEqual([null, null, '0001-01-01T00:00:00Z']);
    expect(answer.errors['0']).toEqual({
      type: 'ValueError',
      message:
        'datetime 0000-01-01T00:00:00Z is not an instant in 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999999Z (year 0 is out of range)',
    });
    expect(answer.errors['1'].message).toMatch(/not an ISO-8601 instant with a four-digit year/);
    expect(answer.errors['1'].traceback).toBeUndefined();
  });
});

describe.skipIf(!hasPython)('callcols frames straight to the driver (no host)', () => {
  test('columns and cells in, a text column and cells out, a cell the driver cannot read is its row error', () => {
    const source = Buffer.from(DRIVER_SOURCE, 'utf8');
    const n = 4;
    const texts = ['a', '', '😀', 'é'].map((t) => Buffer.from(t, 'utf8'));
    const textColumn = Buffer.concat([
      Buffer.from(Uint32Array.from(texts.map((t) => t.length)).buffer),
      ...texts,
    ]);
    const padded = Buffer.concat([textColumn, Buffer.alloc(-textColumn.length & 7)]);
    const instants = Buffer.from(BigInt64Array.from([0n, 1n, 0n, 0n]).buffer);
    const payload = Buffer.concat([padded, instants]);
    const call = {
      op: 'callcols',
      id: 2,
      rows: n,
      bytes: payload.length,
      // row 1's text has a lone surrogate; row 2's datetime is before 1677; row 3's is not a datetime
      cells: { 0: { 1: 'x\uD800' }, 1: { 2: '0001-01-01T00:00:00Z', 3: '0000-01-01T00:00:00Z' } },
    };
    const load = {
      op: 'load',
      id: 1,
      fn: {
        name: 'join',
        body: 'result = args[0] + "|" + args[1].isoformat()',
        argTypes: ['text', 'datetime'],
        returnType: 'text',
      },
    };
    const out = execFileSync(PYTHON, PYTHON_ARGS, {
      input: Buffer.concat([
        Buffer.from(`${source.length}\n`),
        source,
        Buffer.from(`${JSON.stringify(load)}\n${JSON.stringify(call)}\n`),
        payload,
        Buffer.from(`${JSON.stringify({ op: 'exit' })}\n`),
      ]),
      env: { PYTHONHASHSEED: '0' },
    });
    // ready, load's answer, then the callcols answer and its payload
    const lines: Buffer[] = [];
    let at = 0;
    for (let k = 0; k < 3; k++) {
      const end = out.indexOf(0x0a, at);
      lines.push(out.subarray(at, end));
      at = end + 1;
    }
    const header = JSON.parse(lines[2]!.toString('utf8'));
    const body = out.subarray(at);
    expect(header).toMatchObject({ id: 2, rows: n, bytes: body.length });
    expect(body.length % 8).toBe(0);
    expect(header.cells).toEqual({ 1: 'x\uD800|1970-01-01T00:00:00+00:00' });
    expect(header.errors['3']).toMatchObject({ type: 'ValueError' });
    expect(header.errors['3'].message).toMatch(/year 0 is out of range/);
    const lengths = [0, 1, 2, 3].map((i) => body.readUInt32LE(4 * i));
    const results: string[] = [];
    let p = 16;
    for (const length of lengths) {
      results.push(body.subarray(p, p + length).toString('utf8'));
      p += length;
    }
    expect(results.slice(0, 3)).toEqual([
      'a|1970-01-01T00:00:00+00:00',
      '', // a cell
      '😀|0001-01-01T00:00:00+00:00',
    ]);
    expect(results[3]).toBe(''); // a failed row: its value is ignored
  });
});
