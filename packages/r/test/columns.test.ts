/**
 * R over `callcols` (binary columns of every type): evalBatch and typed
 * evalColumns against the same calls over JSON `call` frames (a runner with
 * `f64: false`) and against `eval`, for every type, mixed ones, edge values,
 * arguments R cannot hold (NUL, lone surrogates), datetimes the column cannot
 * hold (cells, both ways), a raising row, wrong-typed results, an output-cap
 * row, a drawing row and vectorized bodies; and the driver's JSON answer to
 * callcols when its stdout cannot be reopened as binary. Restricted sandbox.
 */
import {
  type Column,
  type ColumnResults,
  ExtFnError,
  newColumn,
  Registry,
  type RowResult,
  readCell,
  Value,
  type ValueType,
  writeCell,
} from '@improv/extfn-core';
import { createInterpreterRunner, resolveExecutable } from '@improv/extfn-interpreter';
import { describe, expect, test } from 'vitest';
import { DRIVER_SOURCE, R_ARGS, R_ENV, R_LIMITS } from '../src/index.js';
import {
  driverRun,
  frames,
  line,
  RSCRIPT,
  restrictedOk,
  type Signature,
  scopedRegistry,
  skipReason,
} from './helpers.js';

const V = Value;

/** Arguments of each type, edges included (R's int range, i64 ns range, NUL, lone surrogates). */
const SAMPLES: Record<ValueType, Value[]> = {
  number: [1.5, -0, Number.NaN, Number.POSITIVE_INFINITY, -Infinity, 5e-324, 1e308, 42].map(
    V.number,
  ),
  boolean: [true, false, false, true, true, false, true, false].map(V.boolean),
  enum: [0, 1, 2147483647, 2147483648, 4294967295, 3000000000, 7, 65536].map(V.enum),
  datetime: [
    V.datetime('1970-01-01T00:00:00Z'),
    V.datetime('2025-03-31T23:59:59.123456Z'),
    V.datetime('2025-03-31T23:59:59.123456789Z'),
    V.datetime('1969-12-31T23:59:59.999999Z'),
    V.datetime('0001-01-01T00:00:00Z'), // outside i64 ns: a cell
    V.datetime('9999-12-31T23:59:59.999Z'), // a cell
    V.datetime('1677-09-21T00:12:43.145225Z'),
    V.datetime('2262-04-11T23:47:16.854775Z'),
  ],
  text: [
    '',
    'abc',
    'héllo wörld',
    '😀 x',
    'a\u0000b',
    'lone \ud800',
    'tab\t"q"\\',
    'z'.repeat(300),
  ].map(V.text),
};

/** The datetimes a typed column holds (i64 nanoseconds: 1677..2262). */
const INSIDE = SAMPLES.datetime.filter((_, i) => i !== 4 && i !== 5);

const TYPES: ValueType[] = ['number', 'boolean', 'enum', 'datetime', 'text'];

/** What a row's argument is in R, as text: class, storage and value. */
const DESCRIBE = [
  'x <- args[[1]]',
  'shown <- if (inherits(x, "POSIXct")) format(x, "%Y-%m-%d %H:%M:%OS6", tz = "UTC") else format(x, digits = 17)',
  'result <- paste(paste(class(x), collapse = "/"), typeof(x), shown, Encoding(as.character(x)))',
].join('\n');

/** The same outcome: equal Values (Object.is for numbers, nanos kept), or errors of the same kind and message. */
function expectSame(got: readonly RowResult[], want: readonly RowResult[], label: string) {
  expect(got.length, label).toBe(want.length);
  want.forEach((w, i) => {
    const g = got[i]!;
    if (ExtFnError.isInstance(w)) {
      expect(ExtFnError.isInstance(g), `${label} row ${i}: expected ${w.message}`).toBe(true);
      expect([(g as ExtFnError).kind, (g as ExtFnError).message], `${label} row ${i}`).toEqual([
        w.kind,
        w.message,
      ]);
    } else {
      expect(ExtFnError.isInstance(g), `${label} row ${i}: ${(g as Error).message}`).toBe(false);
      const [a, b] = [g as Value, w as Value];
      expect(a.type, `${label} row ${i}`).toBe(b.type);
      if (a.type === 'number') {
        expect(Object.is(a.value, (b as { value: number }).value), `${label} row ${i}`).toBe(true);
      } else {
        expect(a, `${label} row ${i}`).toEqual(b);
      }
    }
  });
}

/** `eval` of every row, errors as results. */
async function evalEach(
  registry: { eval(name: string, args: Value[]): Promise<Value> },
  name: string,
  rows: Value[][],
) {
  const out: RowResult[] = [];
  for (const row of rows) out.push(await registry.eval(name, row).catch((e: ExtFnError) => e));
  return out;
}

/**
 * Registers `fns` twice: over callcols (the R runner as shipped) and over JSON
 * `call` frames (`f64: false`), and checks evalBatch on both and eval agree.
 */
function pair(fns: Record<string, Signature>, options: Parameters<typeof scopedRegistry>[1] = {}) {
  const cols = scopedRegistry(fns, options);
  const json = scopedRegistry(fns, { ...options, f64: false });
  // The shipped runner sends callcols; with f64: false, JSON call frames.
  expect([
    (cols.runner as { cols?: boolean }).cols,
    (json.runner as { cols?: boolean }).cols,
  ]).toEqual([true, false]);
  return {
    cols: cols.registry,
    json: json.registry,
    async check(name: string, rows: Value[][], label = name) {
      const viaCols = await cols.registry.evalBatch(name, rows);
      const viaJson = await json.registry.evalBatch(name, rows);
      expectSame(viaCols, viaJson, `${label}: callcols vs JSON`);
      expectSame(viaCols, await evalEach(cols.registry, name, rows), `${label}: callcols vs eval`);
      return viaCols;
    },
  };
}

function column(type: ValueType, values: readonly Value[]): Column {
  const out = newColumn(type, values.length);
  values.forEach((v, i) => {
    expect(writeCell(out, i, v)).toBe(true);
  });
  return out;
}

/** evalColumns results as RowResults (the column's value where no error). */
function columnResults(type: ValueType, results: ColumnResults<Column>): RowResult[] {
  const fn = { argTypes: [type] } as never;
  return Array.from(
    { length: results.values.length },
    (_, i) => results.errors.get(i) ?? readCell(fn, [results.values], 0, i),
  );
}

describe.skipIf(!restrictedOk)(`R callcols (${restrictedOk ? 'Restricted' : skipReason})`, () => {
  test('every type: identity and what R sees per row, callcols = JSON = eval (cells and NUL/surrogate errors included)', async () => {
    const fns: Record<string, Signature> = {};
    for (const type of TYPES) {
      fns[`id_${type}`] = ['result <- args[[1]]', [type], type];
      fns[`see_${type}`] = [DESCRIBE, [type], 'text'];
    }
    // The double a datetime argument is, to the last bit: near 1970 R's reading of
    // "0.383283393" (through a long double) is not the double nearest 383283393 / 1e9.
    fns.exact = ['result <- sprintf("%.17g", unclass(args[[1]]))', ['datetime'], 'text'];
    const { check } = pair(fns);
    const exact = await check(
      'exact',
      ['383283393', '364361931', '684387413', '000000001', '999999999'].map((f) => [
        V.datetime(`1970-01-01T00:00:00.${f}Z`),
      ]),
    );
    expect(exact[0]).toEqual(V.text('0.38328339300000003'));
    for (const type of TYPES) {
      const rows = SAMPLES[type].map((v) => [v]);
      const out = await check(`id_${type}`, rows);
      const seen = await check(`see_${type}`, rows);
      if (type === 'text') {
        // R strings cannot hold NUL or a lone surrogate: those rows fail, as on the JSON path.
        expect((out[4] as ExtFnError).message).toMatch(/NUL character/);
        expect((out[5] as ExtFnError).message).toMatch(/lone UTF-16 surrogate/);
        expect(out[2]).toEqual(V.text('héllo wörld'));
        expect((seen[2] as { value: string }).value).toBe('character character héllo wörld UTF-8');
      }
      if (type === 'enum') {
        expect((seen[2] as { value: string }).value).toMatch(/^integer integer 2147483647/);
        expect((seen[3] as { value: string }).value).toMatch(/^numeric double 2147483648/);
        expect(out[4]).toEqual(V.enum(4294967295));
      }
      if (type === 'datetime') {
        expect((seen[1] as { value: string }).value).toMatch(
          /^POSIXct\/POSIXt double 2025-03-31 23:59:59\.1234/,
        );
        expect(out[4]).toEqual(V.datetime('0001-01-01T00:00:00Z'));
      }
    }
  });

  test("the conformance kit's datetimes (3 digits) round-trip through evalBatch exactly as through eval", async () => {
    const { check } = pair({ id: ['result <- args[[1]]', ['datetime'], 'datetime'] });
    const rows: Value[][] = [];
    for (let k = 0; k < 400; k++) {
      // spread over 0001..9999 with millisecond fractions
      const ms = -62135596800000 + Math.floor((k / 400) * 315537897600000) + ((k * 7919) % 1000);
      rows.push([V.datetime(new Date(ms))]);
    }
    const out = await check('id', rows);
    rows.forEach((row, i) => {
      expect(out[i], `row ${i}`).toEqual(row[0]);
    });
  });

  test('mixed types in, each type out; a raising row, wrong-typed results, a drawing row', async () => {
    const body = [
      'n <- args[[1]]; b <- args[[2]]; e <- args[[3]]; d <- args[[4]]; s <- args[[5]]',
      'if (identical(s, "raise")) stop("nope")',
      'result <- if (identical(s, "wrong")) list(1, 2) else if (identical(s, "draw")) runif(1) else',
      '  if (identical(s, "na")) NA else OUT',
    ].join('\n');
    const outs: Record<ValueType, string> = {
      number: 'n * 2 + e',
      boolean: 'b && nchar(s) > 1',
      enum: 'e + 1',
      datetime: 'd + n',
      text: 'paste(s, b, e, format(d, "%Y"))',
    };
    const types: ValueType[] = ['number', 'boolean', 'enum', 'datetime', 'text'];
    const fns: Record<string, Signature> = {};
    for (const type of TYPES) fns[`mix_${type}`] = [body.replace('OUT', outs[type]), types, type];
    const { check } = pair(fns);
    const rows: Value[][] = [];
    const words = ['ok', 'raise', 'wrong', 'draw', 'na', 'héllo', '', 'x'];
    for (let i = 0; i < 300; i++) {
      rows.push([
        V.number(i / 4),
        V.boolean(i % 3 === 0),
        V.enum(i % 5 === 0 ? 4294967290 : i),
        V.datetime(new Date(Date.UTC(2020, 0, 1) + i * 3_600_000 + (i % 1000))),
        V.text(words[i % words.length]!),
      ]);
    }
    for (const type of TYPES) {
      const out = await check(`mix_${type}`, rows, `mix_${type}`);
      expect((out[1] as ExtFnError).message).toMatch(/nope/);
      expect((out[2] as ExtFnError).message).toMatch(/result expected/);
      if (type === 'number') expect((out[3] as Value).type).toBe('number');
      expect((out[4] as ExtFnError).message).toMatch(/NA/);
    }
  });

  test('an output-cap row fails alone; the rows around it keep their values', async () => {
    const { check } = pair(
      {
        loud: [
          'if (args[[1]] == "loud") cat(strrep("y", 5000), "\\n")\nresult <- toupper(args[[1]])',
          ['text'],
          'text',
        ],
      },
      { maxOutputBytes: 2048 },
    );
    const rows = Array.from({ length: 200 }, (_, i) => [V.text(i === 77 ? 'loud' : `r${i}`)]);
    const out = await check('loud', rows);
    expect((out[77] as ExtFnError).limit).toBe('output');
    expect(out[78]).toEqual(V.text('R78'));
  });

  test('a text result past the output cap fails its own row on every path, whatever shares its chunk', async () => {
    const { check } = pair(
      {
        long: ['result <- strrep("x", args[[1]])', ['number'], 'text'],
        long_vec: ['result <- strrep("x", args[[1]])', ['number'], 'text', { vectorized: true }],
      },
      { maxOutputBytes: 2048 },
    );
    const lengths = [10, 2049, 2048, 5000, 5000, 3];
    const rows = lengths.map((x) => [V.number(x)]);
    for (const name of ['long', 'long_vec']) {
      const out = await check(name, rows);
      expect([
        name,
        out.map((c) =>
          ExtFnError.isInstance(c) ? c.limit : (c as { value: string }).value.length,
        ),
      ]).toEqual([name, [10, 'output', 2048, 'output', 'output', 3]]);
    }
  });

  test('vectorized bodies get vectors of the right R type over callcols, and equal JSON and eval', async () => {
    const vec = { vectorized: true };
    const fns: Record<string, Signature> = {
      vtext: [
        'result <- paste0(toupper(args[[1]]), "|", class(args[[1]]), "|", length(args[[1]]) > 0)',
        ['text'],
        'text',
        vec,
      ],
      vdate: [
        'stopifnot(inherits(args[[1]], "POSIXct"))\nresult <- args[[1]] + 60',
        ['datetime'],
        'datetime',
        vec,
      ],
      venum: [
        'stopifnot(is.double(args[[1]]))\nresult <- ifelse(args[[2]], args[[1]], 0)',
        ['enum', 'boolean'],
        'enum',
        vec,
      ],
      vbool: [
        'stopifnot(is.logical(args[[1]]))\nresult <- !args[[1]]',
        ['boolean'],
        'boolean',
        vec,
      ],
      vfail: [
        'if (any(args[[1]] == "bad")) stop("bad row")\nresult <- nchar(args[[1]]) + 0',
        ['text'],
        'number',
        vec,
      ],
    };
    const { check } = pair(fns);
    await check(
      'vtext',
      SAMPLES.text.map((v) => [v]),
    );
    await check(
      'vdate',
      SAMPLES.datetime.map((v) => [v]),
    );
    await check(
      'venum',
      SAMPLES.enum.map((v, i) => [v, SAMPLES.boolean[i]!]),
    );
    await check(
      'vbool',
      SAMPLES.boolean.map((v) => [v]),
    );
    const out = await check(
      'vfail',
      ['a', 'bad', 'ccc'].map((s) => [V.text(s)]),
    );
    expect(out[2]).toEqual(V.number(3));
    expect((out[1] as ExtFnError).message).toMatch(/bad row/);
  });

  test('typed evalColumns (text, datetime, enum, boolean) with error cells in equals evalBatch', async () => {
    const { cols } = pair({
      join: [
        'result <- paste(args[[1]], format(args[[2]], "%H:%M:%OS3", tz = "UTC"), args[[3]], args[[4]])',
        ['text', 'datetime', 'enum', 'boolean'],
        'text',
      ],
      later: ['result <- args[[2]] + nchar(args[[1]])', ['text', 'datetime'], 'datetime'],
    });
    const n = 500;
    const rows = Array.from({ length: n }, (_, i) => [
      SAMPLES.text[i % 8]!,
      INSIDE[i % INSIDE.length]!,
      SAMPLES.enum[i % 8]!,
      SAMPLES.boolean[i % 8]!,
    ]);
    const columns = (arity: number) =>
      (['text', 'datetime', 'enum', 'boolean'] as ValueType[]).slice(0, arity).map((type, k) =>
        column(
          type,
          rows.map((row) => row[k]!),
        ),
      );
    const want = await cols.evalBatch('join', rows);
    const given = new Map([[3, ExtFnError.runtime('join', 'given upstream')]]);
    const got = await cols.evalColumns('join', columns(4), { errors: given });
    const results = columnResults('text', got as ColumnResults<Column>);
    expect((results[3] as ExtFnError).message).toMatch(/given/);
    expectSame(
      results.filter((_, i) => i !== 3),
      want.filter((_, i) => i !== 3),
      'join evalColumns vs evalBatch',
    );
    const laterBatch = await cols.evalBatch(
      'later',
      rows.map((row) => row.slice(0, 2)),
    );
    const later = columnResults(
      'datetime',
      (await cols.evalColumns('later', columns(2))) as ColumnResults<Column>,
    );
    // A result past 2262 comes back as a cell; a datetime column cannot hold it, evalBatch can.
    const far = laterBatch.map(
      (v) => !ExtFnError.isInstance(v) && (v as { value: Date }).value.getUTCFullYear() >= 2262,
    );
    expect(far.filter(Boolean).length).toBeGreaterThan(0);
    far.forEach((isFar, i) => {
      if (isFar)
        expect((later[i] as ExtFnError).message).toMatch(/outside what a nanosecond column holds/);
    });
    expectSame(
      later.filter((_, i) => !far[i]),
      laterBatch.filter((_, i) => !far[i]),
      'later',
    );
  });
});

// ---- the driver alone: its callcols answer with and without a binary stdout ----

describe.skipIf(!restrictedOk)('R callcols frames', () => {
  test('a binary result column on a pipe, JSON values on a socket; a payload it cannot read is a ProtocolError and the next frame still reads', async () => {
    const source = Buffer.from(DRIVER_SOURCE);
    // text column of 3 rows: lengths 2, 0, 3 then "hi" "" "héj"... as UTF-8, padded to 8
    const texts = ['hi', '', 'hé'];
    const utf8 = texts.map((t) => Buffer.from(t, 'utf8'));
    const lengths = Buffer.from(new Uint32Array(utf8.map((b) => b.length)).buffer);
    const body = Buffer.concat([lengths, ...utf8]);
    const textColumn = Buffer.concat([body, Buffer.alloc(((body.length + 7) & ~7) - body.length)]);
    const enumColumn = Buffer.from(new Uint32Array([1, 4294967295, 2147483648, 0]).buffer); // 3 rows + pad
    const stdin = Buffer.concat([
      Buffer.from(`${source.length}\n`),
      source,
      line({
        op: 'load',
        id: 1,
        fn: {
          name: 'f',
          body: 'result <- paste(args[[1]], args[[2]])',
          argTypes: ['text', 'enum'],
          returnType: 'text',
        },
      }),
      line({ op: 'callcols', id: 2, rows: 3, bytes: textColumn.length + 16 }),
      textColumn,
      enumColumn,
      line({ op: 'callcols', id: 3, rows: 3, bytes: 8 }),
      Buffer.alloc(8),
      line({ op: 'exit' }),
    ]);
    const expected = ['hi 1', ' 4294967295', 'hé 2147483648'];
    for (const pipe of [true, false]) {
      const answers = frames((await driverRun(pipe, stdin)).stdout);
      expect(answers.map((f) => f.header.id)).toEqual([undefined, 1, 2, 3]);
      const answer = answers[2]!;
      if (pipe) {
        expect(answer.header).toMatchObject({ id: 2, rows: 3 });
        const p = answer.payload!;
        const lens = new Uint32Array(p.buffer.slice(p.byteOffset, p.byteOffset + 12));
        let at = 12;
        const got = [...lens].map((n) => {
          const s = p.subarray(at, at + n).toString('utf8');
          at += n;
          return s;
        });
        expect(got).toEqual(expected);
        expect(p.length % 8).toBe(0);
      } else {
        expect(answer.header).toMatchObject({ id: 2, values: expected });
      }
      expect((answers[3]!.header.error as { type: string }).type).toBe('ProtocolError');
    }
  });
});

describe.skipIf(!restrictedOk)('R callcols without a binary stdout', () => {
  test('the runner reads the JSON values the driver answers callcols with on a socket: evalBatch and evalColumns as over a pipe', async () => {
    // The R runner's spec with stdoutPipe off: fd 1 is Node's socket, which R cannot reopen.
    const socket = createInterpreterRunner(
      {
        language: 'r',
        packageName: '@improv/extfn-r',
        resolveInterpreter: () =>
          resolveExecutable({ explicit: RSCRIPT, envVar: 'IMPROV_EXTFN_R', names: ['Rscript'] }),
        args: R_ARGS,
        driverSource: DRIVER_SOURCE,
        env: R_ENV,
        limits: R_LIMITS,
        vectorized: true,
        f64: true,
        columns: true,
        stdoutPipe: false,
      },
      { policy: 'restricted' },
    );
    const registry = new Registry({ runners: [socket], timeoutMs: 10_000 });
    const { registry: piped } = scopedRegistry({});
    try {
      const fn = {
        name: 'later',
        language: 'r',
        body: 'if (args[[2]] == "raise") stop("nope")\nresult <- args[[1]] + nchar(args[[2]])',
        argTypes: ['datetime', 'text'],
        returnType: 'datetime',
        pure: false,
      } as const;
      registry.register(fn);
      piped.register(fn);
      const rows = INSIDE.flatMap((d) =>
        ['', 'héllo', 'raise', 'a\u0000b'].map((s) => [d, V.text(s)]),
      );
      const want = await piped.evalBatch('later', rows);
      expectSame(await registry.evalBatch('later', rows), want, 'socket evalBatch');
      const columns = [
        column(
          'datetime',
          rows.map((row) => row[0]!),
        ),
        rows.map((row) => (row[1] as { value: string }).value),
      ];
      const viaSocket = columnResults(
        'datetime',
        (await registry.evalColumns('later', columns)) as ColumnResults<Column>,
      );
      const viaPipe = columnResults(
        'datetime',
        (await piped.evalColumns('later', columns)) as ColumnResults<Column>,
      );
      expectSame(viaSocket, viaPipe, 'socket evalColumns');
      expect((viaSocket[2] as ExtFnError).message).toMatch(/nope/);
    } finally {
      await registry.close();
    }
  });
});

test.skipIf(restrictedOk)(`R callcols: ${skipReason}`, () => {});
