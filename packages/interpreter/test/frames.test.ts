/** Framing (`frames.ts`) and worker keys (`key.ts`): headers and binary payloads across any chunking, malformed and oversized frames, RawJson, a driver's `workMs`. */
import { describe, expect, test } from 'vitest';
import { driverWorkMs } from '../src/frames.js';
import { encodeFrame, FrameReader, RawJson } from '../src/index.js';

describe('frames', () => {
  test('a header line and a binary payload survive any chunking', () => {
    const payload = Buffer.from(new Float64Array([1.5, Number.NaN, -0]).buffer);
    const wire = Buffer.concat([
      encodeFrame({ id: 1, values: ['a\nb'] }),
      encodeFrame({ id: 2, rows: 3 }, payload),
      encodeFrame({ id: 3 }),
    ]);
    for (const size of [1, 2, 7, 64, wire.length]) {
      const reader = new FrameReader();
      const frames = [];
      for (let i = 0; i < wire.length; i += size)
        frames.push(...reader.push(wire.subarray(i, i + size)));
      expect(frames.map((f) => f.header.id)).toEqual([1, 2, 3]);
      expect(frames[0]!.header.values).toEqual(['a\nb']);
      expect(frames[1]!.header.bytes).toBe(24);
      const numbers = new Float64Array(Uint8Array.from(frames[1]!.payload!).buffer);
      expect([...numbers]).toEqual([1.5, Number.NaN, -0]);
      expect(reader.buffered).toBe(0);
    }
  });

  test('a line that is not a JSON object is a malformed frame', () => {
    expect(() => new FrameReader().push(Buffer.from('hello\n'))).toThrow(/malformed frame/);
    expect(() => new FrameReader().push(Buffer.from('[1,2]\n'))).toThrow(/malformed frame/);
    expect(() => new FrameReader().push(Buffer.from('{"bytes":-1}\n'))).toThrow(/bad payload size/);
  });

  test('more bytes than the budget is an error, also without a newline', () => {
    const reader = new FrameReader(1024);
    expect(() => reader.push(Buffer.alloc(2048, 0x61))).toThrow(/more than 1024 bytes/);
  });

  test('a long line arriving in many chunks is found in linear time', () => {
    const reader = new FrameReader(64 * 1024 * 1024);
    const line = Buffer.from(`${JSON.stringify({ id: 1, text: 'x'.repeat(8 * 1024 * 1024) })}\n`);
    let frames = 0;
    for (let i = 0; i < line.length; i += 4096)
      frames += reader.push(line.subarray(i, i + 4096)).length;
    expect(frames).toBe(1);
  });

  test('a payload of the announced target size is read into the target, across chunks; another size is not', () => {
    const results = new Float64Array(4);
    const reader = new FrameReader();
    reader.payloadTarget = new Uint8Array(results.buffer, 8, 16); // rows 1…2 of the column
    const bytes = encodeFrame({ id: 1 }, new Uint8Array(new Float64Array([1.5, -2]).buffer));
    const got = [...reader.push(bytes.subarray(0, 13)), ...reader.push(bytes.subarray(13))];
    expect(got).toHaveLength(1);
    expect([...results]).toEqual([0, 1.5, -2, 0]);
    expect(got[0]!.payload!.buffer).toBe(results.buffer);

    reader.payloadTarget = new Uint8Array(results.buffer, 0, 8);
    const [other] = reader.push(encodeFrame({ id: 2 }, new Uint8Array(16).fill(7)));
    expect(other!.payload!.length).toBe(16);
    expect(other!.payload!.buffer).not.toBe(results.buffer);
    expect([...results]).toEqual([0, 1.5, -2, 0]);
  });

  test('RawJson is spliced into the header as is', () => {
    const line = encodeFrame({ op: 'call', rows: new RawJson('[[1.0,"x"]]'), id: 7 }).toString();
    expect(line).toBe('{"op":"call","id":7,"rows":[[1.0,"x"]]}\n');
    expect(JSON.parse(line)).toEqual({ op: 'call', id: 7, rows: [[1, 'x']] });
    expect(encodeFrame({ rows: new RawJson('[]') }).toString()).toBe('{"rows":[]}\n');
  });

  test("a driver's workMs counts only as a number from 0 to the time the host saw", () => {
    expect(driverWorkMs({ id: 1, workMs: 2.5 }, 10)).toBe(2.5);
    expect(driverWorkMs({ id: 1, workMs: 0 }, 10)).toBe(0);
    expect(driverWorkMs({ id: 1, workMs: 10 }, 10)).toBe(10);
    expect(driverWorkMs({ id: 1 }, 10)).toBeUndefined(); // a driver that does not say
    expect(driverWorkMs({ id: 1, workMs: 10.5 }, 10)).toBeUndefined(); // more than the host saw
    expect(driverWorkMs({ id: 1, workMs: -1 }, 10)).toBeUndefined();
    expect(driverWorkMs({ id: 1, workMs: '2' }, 10)).toBeUndefined();
    expect(driverWorkMs({ id: 1, workMs: null }, 10)).toBeUndefined();
    expect(driverWorkMs({ id: 1, workMs: Number.NaN }, 10)).toBeUndefined();
  });
});

describe('functionKey', () => {
  test('covers name, body and types; a descriptor changed in place gets a new key', async () => {
    const { functionKey } = await import('../src/index.js');
    const fn = {
      name: 'f',
      language: 'python',
      body: 'result = 1',
      argTypes: ['number' as const],
      returnType: 'number' as const,
      pure: false,
    };
    const first = functionKey(fn);
    expect(functionKey({ ...fn })).toBe(first);
    expect(functionKey({ ...fn, name: 'g' })).not.toBe(first);
    expect(functionKey({ ...fn, argTypes: ['text'] })).not.toBe(first);
    fn.body = 'result = 2';
    expect(functionKey(fn)).not.toBe(first);
  });
});
