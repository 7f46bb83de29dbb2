/**
 * The R runner end to end: real runs of Rscript under the Restricted sandbox — the
 * fixtures, each type, R's own errors, a runaway loop, the decisions about
 * NA, NUL, enums past R's integers and datetime precision, and how the
 * interpreter is found.
 */

import { ExtFnError, parseExternalFns, Registry, Value } from '@improv/extfn-core';
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { afterEach, describe, expect, test } from 'vitest';
import { r } from '../src/index.js';
import { failure, RSCRIPT, registryWith, restrictedOk, skipReason } from './helpers.js';

const closers: Registry[] = [];
afterEach(async () => {
  for (const registry of closers.splice(0)) await registry.close();
});
function registry(
  fns: Parameters<typeof registryWith>[0],
  options: Parameters<typeof registryWith>[1] = {},
) {
  const made = registryWith(fns, options);
  closers.push(made.registry);
  return made;
}

describe('finding R (no interpreter needed)', () => {
  test('an absent interpreter is LanguageUnavailable, and nothing is started', async () => {
    const runner = r({ interpreter: '/nonexistent/Rscript' });
    const reg = new Registry({ runners: [runner] });
    closers.push(reg);
    reg.register({
      name: 'f',
      language: 'r',
      body: 'result <- 1',
      argTypes: [],
      returnType: 'number',
    });
    const error = await failure(reg.eval('f', []));
    expect(error.kind).toBe('LanguageUnavailable');
    expect(error.message).toMatch(/IMPROV_EXTFN_R/);
    expect(runner.stats().started).toBe(0);
    const probe = await runner.probe();
    expect(probe.available).toBe(false);
    // the option names a file that is not there: the probe says so, and how to fix it
    expect(probe.detail).toMatch(
      /`interpreter` option is set to \/nonexistent\/Rscript, which does not exist/,
    );
    expect(probe.fix).toMatch(/^set the `interpreter` option to .*IMPROV_EXTFN_R/);
  });

  test('IMPROV_EXTFN_R chooses the interpreter when no option is given', async () => {
    const saved = process.env.IMPROV_EXTFN_R;
    process.env.IMPROV_EXTFN_R = '/nonexistent/from-env/Rscript';
    try {
      const probe = await r().probe();
      expect(probe.available).toBe(false);
      expect(probe.detail).toMatch(
        /^IMPROV_EXTFN_R is set to \/nonexistent\/from-env\/Rscript, which does not exist/,
      );
    } finally {
      if (saved === undefined) delete process.env.IMPROV_EXTFN_R;
      else process.env.IMPROV_EXTFN_R = saved;
    }
  });
});

describe.skipIf(!restrictedOk)(
  `R under Restricted (${restrictedOk ? RSCRIPT : skipReason})`,
  () => {
    test('the engine fixture hyp_r: hypot on 3, 4 is 5, warm and one-shot', async () => {
      const fixtures = JSON.parse(JSON.stringify(engineSerdeFixture));
      const hyp = parseExternalFns(fixtures.external_fns).find((fn) => fn.name === 'hyp_r')!;
      expect(hyp.body).toBe('result <- sqrt(args[[1]]^2 + args[[2]]^2)');
      const reg = new Registry({
        runners: [r({ interpreter: RSCRIPT, policy: 'restricted' })],
        functions: [hyp],
      });
      closers.push(reg);
      expect(await reg.eval('hyp_r', [Value.number(3), Value.number(4)])).toEqual(Value.number(5));
      expect(
        await reg.eval('hyp_r', [Value.number(3), Value.number(4)], {
          mode: 'oneShot',
          cache: false,
        }),
      ).toEqual(Value.number(5));
    });

    test("stop() is a Runtime error with R's message; a custom condition keeps its class", async () => {
      const { registry: reg } = registry({
        boom: ['stop("x went wrong")', [], 'number'],
        custom: [
          'stop(structure(class = c("myError", "error", "condition"), list(message = "mine", call = NULL)))',
          [],
          'number',
        ],
        deep: [
          'f <- function(n) if (n == 0) stop("bottom") else f(n - 1)\nresult <- f(3)',
          [],
          'number',
        ],
      });
      const boom = await failure(reg.eval('boom', []));
      expect(boom.kind).toBe('Runtime');
      expect(boom.message).toBe('function boom: Error: x went wrong');
      expect((await failure(reg.eval('custom', []))).message).toBe(
        'function custom: myError: mine',
      );
      const deep = await failure(reg.eval('deep', []));
      expect(deep.message).toBe('function deep: Error: bottom');
      expect(deep.stderr).toMatch(/Error in f\(n - 1\): bottom/);
    });

    test('a syntax error is reported at load with the parser message', async () => {
      const { registry: reg } = registry({ bad: ['result <- (1 +', [], 'number'] });
      const error = await failure(reg.eval('bad', []));
      expect(error.kind).toBe('Runtime');
      expect(error.message).toMatch(/unexpected end of input/);
    });

    test('a runaway loop is a Timeout and the next call works', async () => {
      const { registry: reg } = registry({
        spin: ['while (TRUE) {}', [], 'number'],
        one: ['result <- 1', [], 'number'],
      });
      const error = await failure(reg.eval('spin', [], { timeoutMs: 800 }));
      expect(error.kind).toBe('Timeout');
      expect(error.ms).toBe(800);
      expect(await reg.eval('one', [])).toEqual(Value.number(1));
    });

    test('NA is never a number: an NA result is a Runtime error, NaN comes back as NaN', async () => {
      const { registry: reg } = registry({
        na: ['result <- NA_real_', [], 'number'],
        nan: ['result <- args[[1]] * 0', ['number'], 'number'],
        missing: ['result <- c(1, 2)[5]', [], 'number'],
      });
      const na = await failure(reg.eval('na', []));
      expect(na.message).toBe(
        "function na: result expected number, got NA (double, R's missing value)",
      );
      expect(await reg.eval('nan', [Value.number(Number.POSITIVE_INFINITY)])).toEqual(
        Value.number(Number.NaN),
      );
      expect((await failure(reg.eval('missing', []))).message).toMatch(/got NA/);
    });

    test('a text with a lone surrogate is that row’s Runtime error before the body runs (not Unicode)', async () => {
      const { registry: reg } = registry({
        len: ['result <- nchar(args[[1]])', ['text'], 'number'],
      });
      const batch = await reg.evalBatch('len', [[Value.text('a\uD800b')], [Value.text('ok')]]);
      expect((batch[0] as ExtFnError).message).toBe(
        'function len: ValueError: text argument 1 contains a lone UTF-16 surrogate, which is not Unicode',
      );
      expect(batch[1]).toEqual(Value.number(2));
    });

    test('a text with NUL is that row’s Runtime error before the body runs (R strings cannot hold NUL)', async () => {
      const { registry: reg } = registry({
        len: ['result <- nchar(args[[1]])', ['text'], 'number'],
      });
      const error = await failure(reg.eval('len', [Value.text('a\u0000b')]));
      expect(error.message).toBe(
        'function len: ValueError: text argument 1 contains a NUL character, which R strings cannot hold',
      );
      const batch = await reg.evalBatch('len', [
        [Value.text('ab')],
        [Value.text('\u0000')],
        [Value.text('😀')],
      ]);
      expect(batch[0]).toEqual(Value.number(2));
      expect(ExtFnError.isInstance(batch[1])).toBe(true);
      expect(batch[2]).toEqual(Value.number(1));
    });

    test('types as R sees them: numeric, logical, character, POSIXct in UTC, integer enums', async () => {
      const { registry: reg } = registry({
        kinds: [
          'result <- paste(class(args[[1]]), typeof(args[[2]]), class(args[[3]])[1], attr(args[[3]], "tzone"), typeof(args[[4]]), typeof(args[[5]]), class(args[[6]]), sep = ",")',
          ['number', 'enum', 'datetime', 'datetime', 'boolean', 'enum'],
          'text',
        ],
        year: ['result <- as.numeric(format(args[[1]], "%Y"))', ['datetime'], 'number'],
        later: ['result <- args[[1]] + 0.25', ['datetime'], 'datetime'],
        date: ['result <- as.Date("2024-02-29")', [], 'datetime'],
        // A Date with a fraction of a day is still its day (as R prints it), at midnight.
        halfDay: ['result <- as.Date("2020-01-01") + args[[1]]', ['number'], 'datetime'],
        bigEnum: ['result <- args[[1]] - 1', ['enum'], 'enum'],
      });
      const kinds = await reg.eval('kinds', [
        Value.number(1),
        Value.enum(3),
        Value.datetime('2025-01-01T00:00:00Z'),
        Value.datetime('2025-01-01T00:00:00Z'),
        Value.boolean(true),
        Value.enum(4_294_967_295),
      ]);
      expect(kinds).toEqual(Value.text('numeric,integer,POSIXct,UTC,double,logical,numeric'));
      expect(await reg.eval('year', [Value.datetime('1969-12-31T23:59:59.999Z')])).toEqual(
        Value.number(1969),
      );
      expect(await reg.eval('later', [Value.datetime('2025-03-31T23:59:59.875Z')])).toEqual(
        Value.datetime('2025-04-01T00:00:00.125Z'),
      );
      expect(await reg.eval('date', [])).toEqual(Value.datetime('2024-02-29T00:00:00Z'));
      expect(await reg.evalBatch('halfDay', [[Value.number(0.5)], [Value.number(-0.5)]])).toEqual([
        Value.datetime('2020-01-01T00:00:00Z'),
        Value.datetime('2019-12-31T00:00:00Z'),
      ]);
      expect(await reg.eval('bigEnum', [Value.enum(4_294_967_295)])).toEqual(
        Value.enum(4_294_967_294),
      );
      expect((await failure(reg.eval('bigEnum', [Value.enum(0)]))).message).toMatch(
        /result expected enum, got double -1/,
      );
    });

    // POSIXct is a double count of seconds: about 0.24 µs of precision near 2025,
    // coarser far from 1970 (about 8 µs around the year 1, so five digits there).
    test('datetimes keep microseconds: nanoseconds are rounded to the microsecond', async () => {
      const { registry: reg } = registry({ id: ['result <- args[[1]]', ['datetime'], 'datetime'] });
      expect(await reg.eval('id', [Value.datetime('2025-03-31T23:59:59.123456789Z')])).toEqual(
        Value.datetime('2025-03-31T23:59:59.123457Z'),
      );
      expect(await reg.eval('id', [Value.datetime('1900-01-01T00:00:00.000001Z')])).toEqual(
        Value.datetime('1900-01-01T00:00:00.000001Z'),
      );
      expect(await reg.eval('id', [Value.datetime('0001-01-01T00:00:00.123Z')])).toEqual(
        Value.datetime('0001-01-01T00:00:00.123Z'),
      );
      expect(await reg.eval('id', [Value.datetime('0001-01-01T00:00:00.123456Z')])).toEqual(
        Value.datetime('0001-01-01T00:00:00.12346Z'),
      );
    });

    test('both ends of the datetime range: the first instant exactly, the last second of 9999 never rounds into 10000', async () => {
      const { registry: reg } = registry({
        id: ['result <- args[[1]]', ['datetime'], 'datetime'],
        year: ['result <- as.numeric(format(args[[1]], "%Y"))', ['datetime'], 'number'],
        past: ['result <- args[[1]] + 86400', ['datetime'], 'datetime'],
      });
      const first = Value.datetime('0001-01-01T00:00:00Z');
      expect(await reg.eval('id', [first])).toEqual(first);
      // Near 9999 a double holds about 30 µs: the fraction is rounded down, never up past the range.
      for (const last of ['9999-12-31T23:59:59.999999999Z', '9999-12-31T23:59:59.99999Z']) {
        const back = await reg.eval('id', [Value.datetime(last)]);
        expect(back).toEqual(Value.datetime('9999-12-31T23:59:59.9999Z'));
        expect(await reg.eval('year', [Value.datetime(last)])).toEqual(Value.number(9999));
      }
      expect(await reg.eval('id', [Value.datetime('9999-12-31T23:59:59Z')])).toEqual(
        Value.datetime('9999-12-31T23:59:59Z'),
      );
      const past = await failure(reg.eval('past', [Value.datetime('9999-12-31T00:00:00Z')]));
      expect(past.message).toMatch(/result expected datetime, got .*outside the years 0001-9999/);
    });

    test('each row gets fresh variables, the same random seed, and its own output', async () => {
      const { registry: reg } = registry({
        leak: [
          'if (exists("seen", inherits = FALSE)) stop("leaked")\nseen <- TRUE\nresult <- args[[1]]',
          ['number'],
          'number',
        ],
        draw: ['result <- runif(1)', ['number'], 'number'],
        chatty: [
          'print(args[[1]])\nmessage("to stderr")\nwarning("careful")\nresult <- args[[1]]',
          ['number'],
          'number',
        ],
      });
      const rows = [1, 2, 3].map((n) => [Value.number(n)]);
      expect(await reg.evalBatch('leak', rows)).toEqual(rows.map((row) => row[0]));
      const draws = await reg.evalBatch('draw', rows);
      expect(new Set(draws.map((v) => (v as { value: number }).value)).size).toBe(1);
      expect(await reg.eval('draw', [Value.number(9)])).toEqual(draws[0]);
      expect(await reg.evalBatch('chatty', rows)).toEqual(rows.map((row) => row[0]));
    });

    test('the RNG is reset only once a row draws, and results stay those of a reset before every row', async () => {
      const { registry: reg } = registry({
        sometimes: [
          'x <- args[[1]]\nif (x > 5) x <- x + runif(1)\nresult <- x',
          ['number'],
          'number',
        ],
        failing: [
          'u <- runif(1)\nif (args[[1]] == 2) stop("after a draw")\nresult <- u',
          ['number'],
          'number',
        ],
      });
      const first = 0.8966972001362592; // set.seed(0); runif(1)
      const rows = [1, 2, 6, 3, 7, 6].map((x) => [Value.number(x)]);
      const batch = await reg.evalBatch('sometimes', rows);
      expect(batch.map((v) => (v as { value: number }).value)).toEqual([
        1,
        2,
        6 + first,
        3,
        7 + first,
        6 + first,
      ]);
      // A row that draws and then fails leaves the generator moved: the next row still starts from the seed.
      const failing = await reg.evalBatch(
        'failing',
        [2, 1, 3].map((x) => [Value.number(x)]),
      );
      expect((failing[0] as ExtFnError).message).toMatch(/after a draw/);
      expect(failing[1]).toEqual(Value.number(first));
      expect(failing[2]).toEqual(Value.number(first));
    });

    test('rows share an environment only where none can see what another left', async () => {
      const { registry: reg } = registry({
        // Straight-line: every name assigned before it is read; shared, and results as fresh.
        straight: ['x <- args[[1]]\ny <- x * 2\nresult <- y + x', ['number'], 'number'],
        // Reads `y` before assigning it: a shared environment would hand row 2 row 1's y.
        early: ['result <- y\ny <- args[[1]]', ['number'], 'number'],
        // Reads `keep` before assigning it, by a string or through a formula's
        // environment: all.names() does not see the read, yet a shared
        // environment would hand row 2 row 1's keep.
        dynget: [
          'prev <- dynGet("keep", ifnotfound = -1)\nkeep <- args[[1]]\nresult <- prev',
          ['number'],
          'number',
        ],
        formula: [
          'prev <- c(attr(~0, ".Environment")[["keep"]], -1)[[1]]\nkeep <- args[[1]]\nresult <- prev',
          ['number'],
          'number',
        ],
        // Conditional assignment at top level: not straight-line.
        maybe: [
          'if (args[[1]] > 0) z <- 1\nresult <- exists("z", inherits = FALSE)',
          ['number'],
          'boolean',
        ],
      });
      const rows = [1, 2, 3].map((x) => [Value.number(x)]);
      expect(await reg.evalBatch('straight', rows)).toEqual([3, 6, 9].map(Value.number));
      for (const name of ['dynget', 'formula']) {
        expect([name, await reg.evalBatch(name, rows)]).toEqual([
          name,
          rows.map(() => Value.number(-1)),
        ]);
        expect([name, await reg.eval(name, [Value.number(7)], { cache: false })]).toEqual([
          name,
          Value.number(-1),
        ]);
      }
      for (const r of await reg.evalBatch('early', rows)) {
        expect((r as ExtFnError).message).toMatch(/object 'y' not found/);
      }
      expect(
        await reg.evalBatch(
          'maybe',
          [1, -1].map((x) => [Value.number(x)]),
        ),
      ).toEqual([Value.boolean(true), Value.boolean(false)]);
    });

    test('a row cannot leave a global behind, by any route, and the write is seen within its row', async () => {
      // Each body reads what an earlier row left (-1 if none), writes args[[1]]
      // where every row could see it, and returns -99 unless the write took
      // effect within its own row (the control: the route really writes).
      const check = (write: string, read = 'leaked') =>
        `before <- if (exists("leaked")) ${read} else -1\n${write}\nresult <- if (identical(${read}, args[[1]])) before else -99`;
      const routes: Record<string, string> = {
        superassign: check('leaked <<- args[[1]]'),
        assignGlobal: check('assign("leaked", args[[1]], envir = globalenv())'),
        parsed: check('eval(parse(text = "leaked <<- args[[1]]"))'),
        getAssign: check('get("assign")("leaked", args[[1]], envir = topenv())'),
        searchPath: check('assign("leaked", args[[1]], envir = as.environment(1))'),
        parentEnv: check('assign("leaked", args[[1]], envir = parent.env(environment()))'),
        attached: check('attach(list(leaked = args[[1]]), name = "rows", warn.conflicts = FALSE)'),
        // A package a row attaches stays usable (it holds no row's values).
        library: check('library(tools)\nleaked <<- if (is.function(toTitleCase)) args[[1]]'),
        // Every statement an assignment, through functions got by name (a
        // fresh environment per row, since they are not known to leave it alone).
        straight: [
          'before <- getExportedValue("base", "get0")("leaked", envir = globalenv(), ifnotfound = -1)',
          'x <- getExportedValue("base", "assign")("leaked", args[[1]], pos = 1)',
          'after <- getExportedValue("base", "get0")("leaked", envir = globalenv())',
          'result <- before + (after - args[[1]])',
        ].join('\n'),
      };
      const fns = Object.fromEntries(
        Object.entries(routes).map(([name, body]) => [
          name,
          [body, ['number'], 'number'] as [string, ['number'], 'number'],
        ]),
      );
      const { registry: reg } = registry(fns);
      const rows = [1, 2, 3, 4].map((x) => [Value.number(x)]);
      for (const name of Object.keys(routes)) {
        expect([name, await reg.evalBatch(name, rows)]).toEqual([
          name,
          rows.map(() => Value.number(-1)),
        ]);
        expect([name, await reg.eval(name, [Value.number(5)])]).toEqual([name, Value.number(-1)]);
      }
    });

    test('a row that leaves a global behind and locks the global environment costs its worker, not the next row', async () => {
      const { registry: reg, runner } = registry({
        lock: [
          [
            'result <- if (exists("leaked")) leaked else -1',
            'if (args[[1]] > 0) {',
            '  leaked <<- args[[1]]',
            '  lockEnvironment(globalenv())',
            '}',
          ].join('\n'),
          ['number'],
          'number',
        ],
      });
      // Control: a row that does neither is fine, and so is the next one.
      expect(await reg.evalBatch('lock', [[Value.number(0)], [Value.number(0)]])).toEqual([
        Value.number(-1),
        Value.number(-1),
      ]);
      const locked = await failure(reg.eval('lock', [Value.number(1)]));
      expect(locked.message).toMatch(/exited/);
      expect(runner.stats().killed).toBeGreaterThan(0);
      // The next row runs on a fresh worker: nothing left behind.
      expect(await reg.eval('lock', [Value.number(0)])).toEqual(Value.number(-1));
    });

    test('a result that is not one value is a Runtime error naming what came back', async () => {
      const { registry: reg } = registry({
        vec: ['result <- c(1, 2, 3)', [], 'number'],
        unset: ['x <- 1', [], 'number'],
        factor: ['result <- factor("a")', [], 'enum'],
        text: ['result <- 1L', [], 'text'],
        bool: ['result <- NA', [], 'boolean'],
      });
      expect((await failure(reg.eval('vec', []))).message).toBe(
        'function vec: result expected number, got double of length 3',
      );
      expect((await failure(reg.eval('unset', []))).message).toBe(
        'function unset: NameError: the body did not set result',
      );
      expect((await failure(reg.eval('factor', []))).message).toMatch(
        /result expected enum, got factor/,
      );
      expect((await failure(reg.eval('text', []))).message).toBe(
        'function text: result expected text, got integer 1',
      );
      expect((await failure(reg.eval('bool', []))).message).toMatch(
        /result expected boolean, got NA/,
      );
    });

    test('a body that writes to the protocol channel breaks only its own worker', async () => {
      const { registry: reg, runner } = registry({
        shell: ['system("echo \'{\\"id\\":99}\'")\nresult <- 1', [], 'number'],
        unsink: ['sink()\ncat("{}\\n")\nresult <- 2', [], 'number'],
        ok: ['result <- 3', [], 'number'],
      });
      expect((await failure(reg.eval('shell', []))).message).toMatch(/unexpected frame/);
      expect(await reg.eval('ok', [])).toEqual(Value.number(3));
      expect((await failure(reg.eval('unsink', []))).message).toMatch(/unexpected frame/);
      expect(await reg.eval('ok', [])).toEqual(Value.number(3));
      expect(runner.stats().killed).toBe(2);
    });

    test('evalBatch equals eval on each row: values, R errors, wrong types and a hanging row', async () => {
      const body = [
        'x <- args[[1]]',
        'if (x == 3) stop("three")',
        'if (x == 5) repeat {}',
        'result <- if (x == 7) "seven" else x * 2',
      ].join('\n');
      const { registry: reg } = registry({ mixed: [body, ['number'], 'number'] });
      const rows = Array.from({ length: 10 }, (_, i) => [Value.number(i)]);
      const batch = await reg.evalBatch('mixed', rows, { timeoutMs: 1_500 });
      for (let i = 0; i < rows.length; i++) {
        const got = batch[i];
        if (i === 5) {
          expect(ExtFnError.isInstance(got) && got.kind).toBe('Timeout');
          continue;
        }
        let single: unknown;
        try {
          single = await reg.eval('mixed', rows[i]!, { timeoutMs: 1_500 });
        } catch (error) {
          single = error;
        }
        if (ExtFnError.isInstance(single)) {
          expect(ExtFnError.isInstance(got) && [got.kind, got.message]).toEqual([
            single.kind,
            single.message,
          ]);
        } else {
          expect(got).toEqual(single);
        }
      }
      expect(batch[3] instanceof Error && batch[3].message).toBe('function mixed: Error: three');
      expect(batch[4]).toEqual(Value.number(8));
    });
  },
);
