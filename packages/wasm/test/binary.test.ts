/** The module reader (`binary.ts`) and body decoding (`body.ts`): sections, imports, memory limits capped without breaking the module, `wasm:` and `wat:` bodies. */
import { describe, expect, test } from 'vitest';
import { capLimits, formatFuncType, readModule } from '../src/binary.js';
import { assembleWat, decodeBase64, moduleBytes } from '../src/body.js';
import { MULTIPLY_BASE64 } from './fixtures/bodies.js';

describe('readModule', () => {
  test('reads types, functions, exports, memories, tables and mutable globals', async () => {
    const bytes = await assembleWat(`(module
      (memory 1 4) (table 2 funcref) (global (mut i32) (i32.const 0)) (global f64 (f64.const 1))
      (func (export "improv_call") (param f64 f64) (result f64) local.get 0)
      (func (export "other") (param i32) (result i64) i64.const 0))`);
    const info = readModule(bytes);
    expect(info.imports).toEqual([]);
    expect(info.memories).toEqual([{ min: 1, max: 4, shared: false, memory64: false }]);
    expect(info.tables).toEqual([
      { element: 'funcref', limits: { min: 2, shared: false, memory64: false } },
    ]);
    expect(info.mutableGlobals).toBe(1);
    const entry = info.exports.find((e) => e.name === 'improv_call')!;
    expect(formatFuncType(info.types[info.functions[entry.index]!]!)).toBe(
      '(param f64 f64) (result f64)',
    );
    const other = info.exports.find((e) => e.name === 'other')!;
    expect(formatFuncType(info.types[info.functions[other.index]!]!)).toBe(
      '(param i32) (result i64)',
    );
  });

  test('lists imports of every kind', async () => {
    const bytes = await assembleWat(
      '(module (import "env" "f" (func)) (import "env" "m" (memory 1)) (import "env" "g" (global i32)) (import "env" "t" (table 1 funcref)))',
    );
    expect(readModule(bytes).imports.map((i) => `${i.module}.${i.name}:${i.kind}`)).toEqual([
      'env.f:function',
      'env.m:memory',
      'env.g:global',
      'env.t:table',
    ]);
  });

  test('refuses what is not a wasm binary', () => {
    expect(() => readModule(new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/magic number/);
    expect(() => readModule(decodeBase64(MULTIPLY_BASE64).subarray(0, 20))).toThrow(/past the end/);
  });
});

describe('capLimits', () => {
  test('sets a missing or larger maximum to the ceiling and keeps the module valid', async () => {
    const bytes = await assembleWat(
      '(module (memory 1) (table 1 funcref) (func (export "improv_call") (result f64) f64.const 0))',
    );
    const capped = capLimits(bytes, readModule(bytes), { memoryPages: 3, tableElements: 10 });
    const info = readModule(capped);
    expect(info.memories[0]).toMatchObject({ min: 1, max: 3 });
    expect(info.tables[0]!.limits).toMatchObject({ min: 1, max: 10 });
    const api = (
      globalThis as {
        WebAssembly?: {
          instantiate(b: Uint8Array): Promise<{ instance: { exports: { improv_call(): number } } }>;
        };
      }
    ).WebAssembly!;
    expect((await api.instantiate(capped)).instance.exports.improv_call()).toBe(0);
  });

  test('keeps a smaller maximum and leaves a module without memory byte for byte', async () => {
    const small = await assembleWat('(module (memory 1 2))');
    expect(
      readModule(capLimits(small, readModule(small), { memoryPages: 256, tableElements: 10 }))
        .memories[0]!.max,
    ).toBe(2);
    const none = decodeBase64(MULTIPLY_BASE64);
    expect(capLimits(none, readModule(none), { memoryPages: 1, tableElements: 1 })).toEqual(none);
  });
});

describe('moduleBytes', () => {
  test('accepts base64 with line breaks and refuses other prefixes', async () => {
    const wrapped = `wasm:${MULTIPLY_BASE64.slice(0, 30)}\n${MULTIPLY_BASE64.slice(30)}`;
    expect(await moduleBytes(wrapped)).toEqual(decodeBase64(MULTIPLY_BASE64));
    await expect(moduleBytes('WAT:(module)')).rejects.toThrow(/must start with "wat:"/);
    await expect(moduleBytes('')).rejects.toThrow(/must start with "wat:"/);
  });
});
