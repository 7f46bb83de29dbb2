/**
 * The driver after a `load` that failed (a syntax error): a `call`, `callf64`
 * or `callcols` that comes anyway is answered with its own id and a
 * ProtocolError, as R's driver answers it, and the driver goes on serving —
 * a later valid `load` and calls work. It used to end with an AttributeError
 * (exit code 1) on the first such request, answering nothing. Spoken to
 * directly, frames only (no sandbox, no host).
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE, PYTHON_ARGS } from '../src/index.js';
import { hasPython, PYTHON } from './helpers.js';

/** One request: its header line, then its payload if any (`bytes` added for it). */
function request(header: Record<string, unknown>, payload?: Buffer): Buffer {
  const head = payload ? { ...header, bytes: payload.length } : header;
  return Buffer.concat([Buffer.from(`${JSON.stringify(head)}\n`), payload ?? Buffer.alloc(0)]);
}

/** Runs the driver on these requests (then `exit`); its exit status and the frames it wrote. */
function drive(requests: Buffer[]) {
  const source = Buffer.from(DRIVER_SOURCE, 'utf8');
  const run = spawnSync(PYTHON, PYTHON_ARGS, {
    input: Buffer.concat([
      Buffer.from(`${source.length}\n`),
      source,
      ...requests,
      request({ op: 'exit' }),
    ]),
    env: { PYTHONHASHSEED: '0' },
    timeout: 20_000,
  });
  const out = run.stdout;
  const frames: { header: Record<string, unknown>; payload?: Buffer }[] = [];
  let at = 0;
  while (at < out.length) {
    const end = out.indexOf(0x0a, at);
    if (end < 0) throw new Error(`an unterminated line from the driver: ${out.subarray(at)}`);
    const header = JSON.parse(out.subarray(at, end).toString('utf8'));
    at = end + 1;
    const bytes = typeof header.bytes === 'number' ? header.bytes : 0;
    frames.push(bytes > 0 ? { header, payload: out.subarray(at, at + bytes) } : { header });
    at += bytes;
  }
  return { status: run.status, stderr: run.stderr.toString('utf8'), frames };
}

const f64 = (...xs: number[]) => Buffer.from(Float64Array.from(xs).buffer);

const broken = {
  name: 'broken',
  body: 'result = (args[0] +',
  argTypes: ['number'],
  returnType: 'number',
};
const double = {
  name: 'double',
  body: 'result = args[0] * 2',
  argTypes: ['number'],
  returnType: 'number',
};

describe.skipIf(!hasPython)('the Python driver after a failed load', () => {
  test('answers call, callf64 and callcols with their ids and a ProtocolError, then loads and serves', () => {
    const { status, stderr, frames } = drive([
      request({ op: 'load', id: 1, fn: broken }),
      request({ op: 'call', id: 2, rows: [[1.0]] }),
      request({ op: 'callf64', id: 3, rows: 2 }, f64(1, 2)),
      request({ op: 'callcols', id: 4, rows: 2 }, f64(1, 2)),
      // the protocol lets a worker load once it has a function: its load failed, so not yet
      request({ op: 'load', id: 5, fn: double }),
      request({ op: 'call', id: 6, rows: [[1.5], [4.0]] }),
      request({ op: 'callf64', id: 7, rows: 2 }, f64(3, -1)),
      request({ op: 'callcols', id: 8, rows: 1 }, f64(10)),
    ]);
    expect(stderr).not.toMatch(/Traceback/);
    expect(status).toBe(0);
    const headers = frames.map((f) => f.header);
    expect(headers.map((h) => h.id)).toEqual([undefined, 1, 2, 3, 4, 5, 6, 7, 8]);
    expect(headers[0]).toMatchObject({ ready: 1, protocol: 1 });
    expect(headers[1]).toMatchObject({ id: 1, error: { type: 'SyntaxError' } });
    expect(headers[2]).toEqual({
      id: 2,
      error: { type: 'ProtocolError', message: 'call before load' },
    });
    expect(headers[3]).toEqual({
      id: 3,
      error: { type: 'ProtocolError', message: 'callf64 before load' },
    });
    expect(headers[4]).toEqual({
      id: 4,
      error: { type: 'ProtocolError', message: 'callcols before load' },
    });
    expect(headers[5]).toEqual({ id: 5, ok: true });
    expect(headers[6]).toMatchObject({ id: 6, values: [3, 8] });
    expect(headers[7]).toMatchObject({ id: 7, rows: 2, bytes: 16 });
    expect([...new Float64Array(Uint8Array.from(frames[7]!.payload!).buffer)]).toEqual([6, -2]);
    expect(headers[8]).toMatchObject({ id: 8, rows: 1, bytes: 8 });
    expect(frames[8]!.payload!.readDoubleLE(0)).toBe(20);
  });

  test('answers a call before any load the same way, and still refuses a second function', () => {
    const { status, frames } = drive([
      request({ op: 'call', id: 1, rows: [[1.0]] }),
      request({ op: 'load', id: 2, fn: double }),
      request({ op: 'load', id: 3, fn: broken }),
      request({ op: 'call', id: 4, rows: [[2.0]] }),
    ]);
    expect(status).toBe(0);
    expect(frames.map((f) => f.header)).toEqual([
      expect.objectContaining({ ready: 1 }),
      { id: 1, error: { type: 'ProtocolError', message: 'call before load' } },
      { id: 2, ok: true },
      { id: 3, error: { type: 'ProtocolError', message: 'a worker serves one function' } },
      expect.objectContaining({ id: 4, values: [4] }),
    ]);
  });
});

test.skipIf(hasPython)(`a call after a failed load: skipped, no ${PYTHON}`, () => {});
