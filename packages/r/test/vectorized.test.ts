/**
 * Vectorized R bodies (`vectorized: true`): each argument arrives as a
 * vector, the body returns one vector. Per-cell semantics: evalBatch and
 * evalColumns equal per-row eval on chunks with raising rows, NA slots,
 * wrong lengths and a hanging chunk. Restricted sandbox, Rscript.
 */
import { ExtFnError, type RowResult, Value, type ValueType } from '@improv/extfn-core';
import type { FnTable } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import { failure, restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const VEC = { vectorized: true };
const n = (x: number) => Value.number(x);
const outcome = (r: RowResult) =>
  ExtFnError.isInstance(r) ? { error: r.kind, message: r.message } : r;
/** A row's outcome without its function's name, so two registrations of one body compare. */
const named = (name: string) => (r: RowResult) =>
  ExtFnError.isInstance(r)
    ? { error: r.kind, message: r.message.replace(`function ${name}: `, ''), got: r.got }
    : r;
const NUMS = [[n(1)], [n(2)]];
const WHEN = [[Value.datetime('2001-02-03T04:05:06Z')]];

async function expectPerRowSemantics(
  registry: ReturnType<typeof scopedRegistry>['registry'],
  name: string,
  rows: Value[][],
) {
  const single: RowResult[] = [];
  for (const row of rows) single.push(await registry.eval(name, row).catch((e: ExtFnError) => e));
  expect((await registry.evalBatch(name, rows)).map(outcome)).toEqual(single.map(outcome));
  const fn = registry.get(name)!;
  if (fn.returnType === 'number' && fn.argTypes.every((t) => t === 'number')) {
    const columns = fn.argTypes.map((_, k) =>
      Float64Array.from(rows, (row) => (row[k] as { value: number }).value),
    );
    const { values, errors } = await registry.evalColumns(name, columns);
    const asRows = Array.from(values, (v, i): RowResult => errors.get(i) ?? n(v));
    expect(asRows.map(outcome)).toEqual(single.map(outcome));
  }
  return single;
}

/**
 * Registers each body per row (`name`) and vectorized (`v_name`) and checks
 * that the vectorized one gives every row what the per-row one gives, through
 * evalBatch, eval and (all numbers) evalColumns; returns the per-row outcomes.
 */
async function expectVectorizedAsPerRow(
  cases: Record<string, [string, ValueType[], ValueType, Value[][]]>,
) {
  const fns: FnTable = {};
  for (const [name, [body, argTypes, returnType]] of Object.entries(cases)) {
    fns[name] = [body, argTypes, returnType];
    fns[`v_${name}`] = [body, argTypes, returnType, VEC];
  }
  const { registry } = scopedRegistry(fns);
  const seen: Record<string, unknown[]> = {};
  for (const [name, [, argTypes, returnType, rows]] of Object.entries(cases)) {
    const perRow = (await registry.evalBatch(name, rows)).map(named(name));
    seen[name] = perRow;
    const ways: [string, RowResult[]][] = [
      ['evalBatch', await registry.evalBatch(`v_${name}`, rows)],
      [
        'eval',
        await Promise.all(
          rows.map((row) => registry.eval(`v_${name}`, row).catch((e: ExtFnError) => e)),
        ),
      ],
    ];
    if (returnType === 'number' && argTypes.every((t) => t === 'number')) {
      const column = Float64Array.from(rows, (row) => (row[0] as { value: number }).value);
      const { values, errors } = await registry.evalColumns(`v_${name}`, [column]);
      ways.push(['evalColumns', Array.from(values, (v, i) => errors.get(i) ?? n(v))]);
    }
    for (const [way, results] of ways) {
      expect([name, way, results.map(named(`v_${name}`))]).toEqual([name, way, perRow]);
    }
  }
  return seen;
}

describe.skipIf(!restrictedOk)(`r vectorized (${restrictedOk ? 'Restricted' : skipReason})`, () => {
  test('x * 1.05^y on whole vectors equals the per-row results', async () => {
    const body = 'x <- args[[1]]\ny <- args[[2]]\nstopifnot(length(x) >= 1)\nresult <- x * 1.05^y';
    const { registry } = scopedRegistry({ grow: [body, ['number', 'number'], 'number', VEC] });
    const xs = Float64Array.from({ length: 3000 }, (_, i) => i);
    const ys = Float64Array.from({ length: 3000 }, (_, i) => i % 30);
    const { values, errors } = await registry.evalColumns('grow', [xs, ys]);
    expect(errors.size).toBe(0);
    // R's pow() and V8's may differ in the last bit (an ulp is up to 2^-52 of the value).
    values.forEach((v, i) => {
      const expected = xs[i]! * 1.05 ** ys[i]!;
      expect(Math.abs(v - expected)).toBeLessThanOrEqual(expected * 2 ** -51);
    });
    await expectPerRowSemantics(registry, 'grow', [
      [n(1), n(2)],
      [n(Number.NaN), n(1)],
      [n(-0), n(1)],
      [n(Number.POSITIVE_INFINITY), n(2)],
    ]);
  });

  test("f64 columns in (binary), JSON out: special numbers and R's NA bit pattern read as eval reads them", async () => {
    const body =
      'x <- args[[1]]\nresult <- ifelse(is.nan(x), -1, ifelse(is.na(x), -2, ifelse(x == 0 & 1 / x < 0, -3, x + 1)))';
    const { registry } = scopedRegistry({
      v: [body, ['number'], 'number', VEC],
      r: [body, ['number'], 'number'],
    });
    const xs = new Float64Array(20_000).map((_, i) => i);
    xs[3] = Number.NaN;
    xs[4] = -0;
    xs[5] = Number.POSITIVE_INFINITY;
    // R's NA_real_ is a NaN with payload 1954: a caller's column may hold it; eval would send NaN.
    new DataView(xs.buffer).setBigUint64(6 * 8, 0x7ff00000000007a2n, true);
    for (const name of ['v', 'r']) {
      const { values, errors } = await registry.evalColumns(name, [xs]);
      expect(errors.size, name).toBe(0);
      expect([values[3], values[4], values[5], values[6]], name).toEqual([
        -1,
        -3,
        Number.POSITIVE_INFINITY,
        -1,
      ]);
      expect(values[19_999], name).toBe(20_000);
    }
  });

  test('text, boolean, datetime and enum vectors round-trip', async () => {
    const body = [
      'stopifnot(is.character(args[[1]]), is.logical(args[[2]]), inherits(args[[3]], "POSIXct"), is.double(args[[4]]))',
      'result <- paste(args[[1]], args[[2]], format(args[[3]], "%Y"), args[[4]])',
    ].join('\n');
    const { registry } = scopedRegistry({
      f: [body, ['text', 'boolean', 'datetime', 'enum'], 'text', VEC],
    });
    const rows = [
      [Value.text('a'), Value.boolean(true), Value.datetime('2001-01-01T00:00:00Z'), Value.enum(3)],
      [
        Value.text('é'),
        Value.boolean(false),
        Value.datetime('1999-06-01T00:00:00Z'),
        Value.enum(0),
      ],
    ];
    const single = await expectPerRowSemantics(registry, 'f', rows);
    expect(single).toEqual([Value.text('a TRUE 2001 3'), Value.text('é FALSE 1999 0')]);
  });

  test('mixed chunks: a stop() re-runs the chunk row by row; NA slots fail their row only', async () => {
    const body = [
      'x <- args[[1]]',
      'if (any(x == 13)) stop("thirteen")',
      'result <- ifelse(x < 0, NA_real_, x * 2)',
    ].join('\n');
    const { registry } = scopedRegistry({ f: [body, ['number'], 'number', VEC] });
    const rows = [1, 2, 13, -1, 5, 13, 7].map((x) => [n(x)]);
    const single = await expectPerRowSemantics(registry, 'f', rows);
    const na = {
      error: 'Runtime',
      message: "function f: result expected number, got NA (double, R's missing value)",
    };
    const thirteen = { error: 'Runtime', message: 'function f: Error: thirteen' };
    expect(single.map(outcome)).toEqual([n(2), n(4), thirteen, na, n(10), thirteen, n(14)]);
  });

  test('a wrong length or a result that is not a vector fails the chunk with a clear error', async () => {
    const { registry } = scopedRegistry({
      short: ['result <- args[[1]][-1]', ['number'], 'number', VEC],
      matrix: ['result <- matrix(args[[1]])', ['number'], 'number', VEC],
      fn: ['result <- sum', ['number'], 'number', VEC],
    });
    const rows = [1, 2, 3].map((x) => [n(x)]);
    for (const r of await registry.evalBatch('short', rows)) {
      expect((r as ExtFnError).message).toMatch(
        /returns one value per row: \d+ rows, got \d+ values/,
      );
    }
    for (const r of await registry.evalBatch('matrix', rows)) {
      expect((r as ExtFnError).message).toMatch(
        /returns one vector of \d+ values, got a \d+x1 matrix of double \(as.vector\(result\) drops its dimensions\)$/,
      );
    }
    expect((await failure(registry.eval('fn', [n(1)]))).message).toMatch(
      /returns one vector of 1 values, got (builtin|closure)/,
    );
  });

  test('a hanging chunk: only the row that hangs times out, the others get their values', async () => {
    const body = 'x <- args[[1]]\nif (any(x == 13)) repeat {}\nresult <- x + 1';
    const { registry } = scopedRegistry({ f: [body, ['number'], 'number', VEC] });
    const batch = await registry.evalBatch(
      'f',
      [1, 2, 13, 4].map((x) => [n(x)]),
      {
        timeoutMs: 2000,
      },
    );
    expect(batch.map(outcome)).toEqual([
      n(2),
      n(3),
      expect.objectContaining({ error: 'Timeout' }),
      n(5),
    ]);
  });

  test('a classed result without a `[` method (a class of its own, S4, ts) or a list gives each row what the same body gives per row', async () => {
    const seen = await expectVectorizedAsPerRow({
      own: ['result <- structure(args[[1]] * 2, class = "myclass")', ['number'], 'number', NUMS],
      s4: [
        'library(methods)\nsetClass("Num", contains = "numeric")\nresult <- new("Num", args[[1]] * 2)',
        ['number'],
        'number',
        NUMS,
      ],
      ts: ['result <- stats::ts(args[[1]])', ['number'], 'number', NUMS],
      list: ['result <- as.list(args[[1]])', ['number'], 'number', NUMS],
      record: [
        'result <- structure(as.list(args[[1]]), class = "rec")',
        ['number'],
        'number',
        NUMS,
      ],
      shout: [
        'result <- structure(toupper(args[[1]]), class = "shout")',
        ['text'],
        'text',
        [[Value.text('a')], [Value.text('b')]],
      ],
    });
    const refused = (type: string, got: string) => ({
      error: 'Runtime',
      message: `result expected ${type}, got ${got}`,
      got,
    });
    expect(seen).toEqual({
      own: [refused('number', 'myclass 2'), refused('number', 'myclass 4')],
      s4: [refused('number', 'Num 2'), refused('number', 'Num 4')],
      ts: [refused('number', 'ts 1'), refused('number', 'ts 2')],
      list: [refused('number', 'list 1'), refused('number', 'list 2')],
      record: [refused('number', 'rec 1'), refused('number', 'rec 2')],
      shout: [refused('text', 'shout "A"'), refused('text', 'shout "B"')],
    });
  });

  test('a classed result with a `[` method is refused (factor, AsIs) or taken (POSIXlt, Date) as per row', async () => {
    const seen = await expectVectorizedAsPerRow({
      factor: ['result <- factor(args[[1]])', ['text'], 'text', [[Value.text('a')]]],
      asis: ['result <- I(args[[1]])', ['number'], 'number', NUMS],
      lt: ['result <- as.POSIXlt(args[[1]])', ['datetime'], 'datetime', WHEN],
      date: ['result <- as.Date(args[[1]])', ['datetime'], 'datetime', WHEN],
    });
    expect(seen.factor).toEqual([
      { error: 'Runtime', message: 'result expected text, got factor a', got: 'factor a' },
    ]);
    expect(seen.lt).toEqual(WHEN.map((row) => row[0]));
    expect(seen.date).toEqual([Value.datetime('2001-02-03T00:00:00Z')]);
  });

  test('RNG: each chunk starts from the same seed, as each row does', async () => {
    const { registry } = scopedRegistry({
      draw: ['result <- args[[1]] + runif(length(args[[1]]))', ['number'], 'number', VEC],
    });
    const first = await registry.eval('draw', [n(0)]);
    expect(await registry.eval('draw', [n(0)])).toEqual(first);
    // set.seed(0); runif(1)
    expect((first as { value: number }).value).toBeCloseTo(0.8966972001362592, 15);
  });

  test('a chunk cannot leave a global behind for the next chunk', async () => {
    const { registry } = scopedRegistry({
      remember: [
        // -99 unless the write is seen within its own chunk (the control).
        'before <- if (exists("leaked")) leaked else -1\nleaked <<- args[[1]][1]\nresult <- rep(if (identical(leaked, args[[1]][1])) before else -99, length(args[[1]]))',
        ['number'],
        'number',
        VEC,
      ],
    });
    const rows = [1, 2, 3].map((x) => [n(x)]);
    expect(await registry.evalBatch('remember', rows)).toEqual(rows.map(() => n(-1)));
    expect(await registry.evalBatch('remember', rows)).toEqual(rows.map(() => n(-1)));
    expect(await registry.eval('remember', [n(4)])).toEqual(n(-1));
  });
});
