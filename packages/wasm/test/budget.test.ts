/** The module budget (`budget.ts`): allocating declarations are weighed before compiling, and a module over the budget is refused naming what is too large. */
import { describe, expect, test } from 'vitest';
import { readModule } from '../src/binary.js';
import { assembleWat } from '../src/body.js';
import { budgetRefusal, COSTS, estimate } from '../src/budget.js';

const CEILINGS = { memoryPages: 256, tableElements: 65_536, budgetBytes: 64 * 1_048_576 };

describe('what the reader sees of allocating declarations', () => {
  test('globals, element and data segments, tags and each body’s locals and control points', async () => {
    const bytes = await assembleWat(`(module
      (memory 1 1) (table 4 funcref)
      (global i32 (i32.const 0)) (global (mut v128) (v128.const i64x2 0 0))
      (func $f (param f64) (local i32 i32 f64) (block (br 0)) (if (i32.const 1) (then nop) (else nop)))
      (func (export "improv_call") (result f64) f64.const 1)
      (elem (i32.const 0) func $f $f $f)
      (elem func $f $f)
      (elem funcref (ref.func $f) (ref.null func))
      (data (i32.const 0) "abc") (data "de"))`);
    const info = readModule(bytes);
    expect(info.globals).toEqual(['i32', 'v128']);
    expect(info.elementSegments).toEqual([3, 2, 2]);
    expect(info.dataSegments).toEqual([3, 2]);
    expect(info.bodies.map((b) => b.locals)).toEqual([3, 0]);
    // block, br, if, else (at least; an immediate could add more, never fewer)
    expect(info.bodies[0]!.controlPoints).toBeGreaterThanOrEqual(4);
    expect(info.bodies[1]!.controlPoints).toBe(0);
  });
});

describe('the module budget', () => {
  test('a module exactly at the budget fits; one byte less and it is refused, naming the declaration', async () => {
    const bytes = await assembleWat(
      '(module (table 10 20 funcref) (table 5 externref) (func (export "improv_call") (result f64) f64.const 1))',
    );
    const info = readModule(bytes);
    const { totalBytes } = estimate(info, bytes.length, CEILINGS);
    // The second table has no maximum: it is counted at the ceiling written into the module.
    expect(totalBytes).toBeGreaterThan((20 + 65_536) * COSTS.tableElement);
    expect(budgetRefusal(info, bytes.length, { ...CEILINGS, budgetBytes: totalBytes })).toBe(
      undefined,
    );
    const refused = budgetRefusal(info, bytes.length, { ...CEILINGS, budgetBytes: totalBytes - 1 });
    expect(refused).toContain(`above its budget of`);
    expect(refused).toContain(`(${(totalBytes - 1).toLocaleString('en')} bytes)`);
    expect(refused).toContain('moduleBudgetBytes option of wasm()');
    // The budget ran out at the last declaration counted: the code of improv_call.
    expect(refused).toMatch(/function 0 \(0 locals and parameters/);
  });

  test('tables are summed over the module: 1,000 tables break the default budget at the 32nd', async () => {
    const bytes = await assembleWat(
      `(module ${'(table 65536 funcref)'.repeat(1_000)} (func (export "improv_call") (result f64) f64.const 1))`,
    );
    const refused = budgetRefusal(readModule(bytes), bytes.length, CEILINGS);
    expect(refused).toMatch(
      /^the module would allocate an estimated 2\.0 GiB to compile and instantiate, above its budget of 64 MiB \(67,108,864 bytes\): table 31 \(up to 65,536 elements\), about 2 MiB/,
    );
    expect(refused).toContain('tables 2.0 GiB in 1,000');
  });

  test('locals are weighed by the blocks and branches of their function', async () => {
    const body = (locals: number) =>
      assembleWat(
        `(module (func (export "improv_call") (result f64) (local${' f64'.repeat(locals)}) ${'(block (br 0))'.repeat(3_000)} f64.const 1))`,
      );
    const few = await body(10);
    expect(budgetRefusal(readModule(few), few.length, CEILINGS)).toBe(undefined);
    const many = await body(50_000);
    expect(budgetRefusal(readModule(many), many.length, CEILINGS)).toMatch(
      /function 0 \(50,000 locals and parameters, up to 6,000 blocks and branches/,
    );
  });
});
