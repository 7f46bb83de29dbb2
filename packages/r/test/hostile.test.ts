/**
 * Awkward and hostile R bodies through the public API, Restricted sandbox:
 * what a row sets that R keeps for the rest of the session (time limits, a
 * locked .Random.seed) ends with that row; results R cannot describe in one
 * line or cannot send (a function, bytes that are not UTF-8) are that row's
 * typed error; a body that ends R, recurses without end, or raises a huge or
 * non-UTF-8 message costs at most its own row and worker.
 */
import { ExtFnError, Value as V, type Value } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { failure, restrictedOk, scopedRegistry, skipReason } from './helpers.js';

const n = V.number;
const shown = (cells: (Value | ExtFnError)[]) =>
  cells.map((c) => (ExtFnError.isInstance(c) ? `${c.kind}: ${c.message}` : c));
/** One worker, one request per batch: rows after a row share its R session and its block. */
const oneWorker = { maxWorkers: 1, chunkMs: 60_000 };
const VEC = { vectorized: true };
// Some 10-50 ms of R code: R looks at its time limits every so many evaluations.
const busy = 'x <- 0\nfor (i in 1:50000) x <- x + 1';

describe.skipIf(!restrictedOk)(
  `hostile R bodies (${restrictedOk ? 'Restricted' : skipReason})`,
  () => {
    test('a time limit a row sets (setTimeLimit, setSessionTimeLimit) reaches no later row of its block, request or worker', async () => {
      const set = {
        elapsed: 'setTimeLimit(elapsed = 0.1)',
        cpu: 'setTimeLimit(cpu = 0.1)',
        session: 'setSessionTimeLimit(elapsed = 0.1)',
      };
      const fns = Object.fromEntries(
        Object.entries(set).map(([name, call]) => [
          name,
          [`${busy}\nif (args[[1]] == 1) ${call}\nresult <- args[[1]]`, ['number'], 'number'],
        ]),
      ) as Parameters<typeof scopedRegistry>[0];
      const { registry, runner } = scopedRegistry(fns, oneWorker);
      const rows = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].map((x) => [n(x)]);
      for (const name of Object.keys(set)) {
        // the same block: row 1 sets it, rows 2.. would reach it
        expect([name, shown(await registry.evalBatch(name, rows))]).toEqual([
          name,
          rows.map((row) => row[0]),
        ]);
        // a later request on the same worker, once the limit would have passed
        expect(await registry.eval(name, [n(1)])).toEqual(n(1));
        await new Promise((resolve) => setTimeout(resolve, 150));
        expect([name, shown(await registry.evalBatch(name, rows.slice(1)))]).toEqual([
          name,
          rows.slice(1).map((row) => row[0]),
        ]);
      }
      // A row's own limit is still its own error, as on a fresh worker.
      const { registry: own } = scopedRegistry({
        own: ['setTimeLimit(elapsed = 0.01)\nrepeat {}', [], 'number'],
      });
      expect((await failure(own.eval('own', []))).message).toBe(
        'function own: Error: reached elapsed time limit',
      );
      expect(runner.stats().killed).toBe(0);
    });

    test('a vectorized chunk that sets a time limit leaves it to no later chunk', async () => {
      const { registry, runner } = scopedRegistry(
        {
          v: [
            `${busy}\nif (any(args[[1]] == 1)) setTimeLimit(elapsed = 0.05)\nresult <- args[[1]]`,
            ['number'],
            'number',
            VEC,
          ],
        },
        { maxWorkers: 1 },
      );
      expect(Array.from((await registry.evalColumns('v', [Float64Array.of(1, 2)])).values)).toEqual(
        [1, 2],
      );
      await new Promise((resolve) => setTimeout(resolve, 200));
      for (let k = 0; k < 3; k++) {
        expect(shown(await registry.evalBatch('v', [[n(3)], [n(4)]]))).toEqual([n(3), n(4)]);
        expect(await registry.eval('v', [n(5)])).toEqual(n(5));
      }
      expect(runner.stats().killed).toBe(0);
    });

    test('a row that locks .Random.seed fails no later row: its binding is unlocked after it', async () => {
      const first = 0.8966972001362592; // set.seed(0); runif(1)
      const { registry } = scopedRegistry(
        {
          lock: [
            'u <- runif(1)\nif (args[[1]] == 1) lockBinding(".Random.seed", globalenv())\nresult <- u',
            ['number'],
            'number',
          ],
          vlock: [
            'u <- runif(length(args[[1]]))\nlockBinding(".Random.seed", globalenv())\nresult <- u',
            ['number'],
            'number',
            VEC,
          ],
        },
        oneWorker,
      );
      const rows = [2, 1, 2, 3].map((x) => [n(x)]);
      expect(shown(await registry.evalBatch('lock', rows))).toEqual(rows.map(() => n(first)));
      expect(await registry.eval('lock', [n(1)])).toEqual(n(first));
      expect(await registry.eval('lock', [n(2)])).toEqual(n(first));
      for (let k = 0; k < 3; k++) {
        const { values, errors } = await registry.evalColumns('vlock', [Float64Array.of(1, 2)]);
        expect([...errors.values()].map((e) => e.message)).toEqual([]);
        expect(values[0]).toBe(first);
      }
    });

    test('a function as the result is a typed error naming it, per row and vectorized, and the worker stays', async () => {
      const { registry, runner } = scopedRegistry({
        fn: ['result <- if (args[[1]] == 2) function(x) x else 1', ['number'], 'number'],
        vfn: ['result <- function(x) x', ['number'], 'number', VEC],
      });
      const batch = await registry.evalBatch(
        'fn',
        [1, 2, 3].map((x) => [n(x)]),
      );
      expect(shown(batch)).toEqual([
        n(1),
        'Runtime: function fn: result expected number, got closure function (x) x',
        n(1),
      ]);
      const { errors } = await registry.evalColumns('vfn', [Float64Array.of(1, 2, 3)]);
      expect([...errors.keys()]).toEqual([0, 1, 2]);
      for (const error of errors.values()) {
        expect(error.message).toMatch(
          /^function vfn: a vectorized body returns one vector of \d+ values, got closure function \(x\) x$/,
        );
      }
      expect(runner.stats().killed).toBe(0);
    });

    test('a text result that is not UTF-8 is the row’s error, not rewritten as "<ff>"; a latin1 one is converted', async () => {
      const bad = 'rawToChar(as.raw(c(0x61, 0xff)))';
      const { registry } = scopedRegistry({
        text: [
          `result <- if (args[[1]] == "bad") ${bad} else paste0(args[[1]], "é")`,
          ['text'],
          'text',
        ],
        vtext: [
          `result <- ifelse(args[[1]] == "bad", ${bad}, paste0(args[[1]], "é"))`,
          ['text'],
          'text',
          VEC,
        ],
        latin1: [
          'x <- rawToChar(as.raw(c(0x61, 0xe9)))\nEncoding(x) <- "latin1"\nresult <- x',
          [],
          'text',
        ],
      });
      const rows = ['x', 'bad', 'ü'].map((s) => [V.text(s)]);
      const expected = [
        V.text('xé'),
        'Runtime: function NAME: result expected text, got character "a\\xff" (not valid UTF-8)',
        V.text('üé'),
      ];
      for (const name of ['text', 'vtext']) {
        const want = expected.map((e) => (typeof e === 'string' ? e.replace('NAME', name) : e));
        expect(shown(await registry.evalBatch(name, rows))).toEqual(want);
        expect(shown([await registry.eval(name, rows[1]!).catch((e) => e)])).toEqual([want[1]]);
      }
      expect(await registry.eval('latin1', [])).toEqual(V.text('aé'));
    });

    test('a body that calls quit() or q() (however caught or reached) fails its own row with a QuitError naming it; the worker stays', async () => {
      const enders = {
        quit: ['quit()', 'quit'],
        status: ['q(status = 3)', 'q'],
        save: ['q("yes")', 'q'],
        namespaced: ['base::quit("no", 3)', 'quit'],
        called: ['do.call("q", list())', 'q'],
        tried: ['try(quit(), silent = TRUE)', 'quit'],
        caught: ['tryCatch(q(), error = function(e) 1, condition = function(c) 2)', 'q'],
        exiting: ['(function() { on.exit(q()); stop("x") })()', 'q'],
      };
      const fns = Object.fromEntries(
        Object.entries(enders).map(([name, [call]]) => [
          name,
          [`if (args[[1]] == 2) ${call}\nresult <- args[[1]]`, ['number'], 'number'],
        ]),
      ) as Parameters<typeof scopedRegistry>[0];
      fns.vec = [
        'if (any(args[[1]] == 2)) q(status = 3)\nresult <- args[[1]]',
        ['number'],
        'number',
        VEC,
      ];
      const { registry, runner } = scopedRegistry(fns, { maxWorkers: 1 });
      const rows = [1, 2, 3].map((x) => [n(x)]);
      const quitError = (name: string, called: string) =>
        `Runtime: function ${name}: QuitError: the body ended the R session with ${called}(): ` +
        `a body must return a value (set result), not call ${called}()`;
      for (const [name, [, called]] of Object.entries({ ...enders, vec: ['', 'q'] })) {
        const want = [n(1), quitError(name, called!), n(3)];
        expect([name, shown(await registry.evalBatch(name, rows))]).toEqual([name, want]);
        expect([name, shown([await registry.eval(name, [n(2)]).catch((e) => e)])]).toEqual([
          name,
          [want[1]],
        ]);
        expect(await registry.eval(name, [n(4)])).toEqual(n(4));
      }
      const { values, errors } = await registry.evalColumns('vec', [Float64Array.of(1, 2, 3)]);
      expect([values[0], shown([...errors.values()]), values[2]]).toEqual([
        1,
        [quitError('vec', 'q')],
        3,
      ]);
      // R went on: one worker per function served every row
      expect(runner.stats().started).toBe(Object.keys(fns).length);
      expect(runner.stats().killed).toBe(0);
    });

    test('a child the body forks (parallel) that returns into the driver never answers for the worker, nor removes its tempdir', async () => {
      // Before: the child's copy of the driver answered the same request, and
      // whichever answer came first was taken (row 2 read 21 as often as 20).
      const fork = 'p <- parallel:::mcfork()\nchild <- inherits(p, "masterProcess")\n';
      const { registry } = scopedRegistry({
        number: [
          `${fork}result <- if (child) args[[1]] * 10 + 1 else args[[1]] * 10`,
          ['number'],
          'number',
        ],
        text: [
          `${fork}result <- if (child) "child" else paste("worker", args[[1]])`,
          ['number'],
          'text',
        ],
        // the worker looks once its child is gone: an exit through R's own would have removed it
        tempdir: [
          `${fork}result <- if (child) 0 else { Sys.sleep(0.5); as.numeric(dir.exists(tempdir(check = FALSE))) }`,
          [],
          'number',
        ],
      });
      const rows = [1, 2, 3, 4].map((x) => [n(x)]);
      for (const mode of ['warm', 'oneShot'] as const) {
        expect([mode, await registry.eval('number', [n(2)], { mode })]).toEqual([mode, n(20)]);
        expect([mode, await registry.eval('text', [n(2)], { mode })]).toEqual([
          mode,
          V.text('worker 2'),
        ]);
      }
      // evalBatch: callf64 (through the shared file) and callcols
      expect(await registry.evalBatch('number', rows)).toEqual(
        rows.map(([x]) => n((x as { value: number }).value * 10)),
      );
      expect(await registry.evalBatch('text', rows)).toEqual(
        rows.map(([x]) => V.text(`worker ${(x as { value: number }).value}`)),
      );
      expect(await registry.eval('tempdir', [])).toEqual(n(1));
    });

    test('tools::pskill() on R itself is a QuitError too; a pskill that leaves R running is not', async () => {
      const { registry } = scopedRegistry({
        term: ['tools::pskill(Sys.getpid())\nresult <- 1', [], 'number'],
        kill: ['tools::pskill(Sys.getpid(), tools::SIGKILL)\nresult <- 1', [], 'number'],
        attached: ['library(tools)\npskill(0L, SIGUSR1)\nresult <- 1', [], 'number'],
        probe: ['result <- as.numeric(tools::pskill(Sys.getpid(), 0L))', [], 'number'],
      });
      for (const name of ['term', 'kill', 'attached']) {
        const error = await failure(registry.eval(name, []));
        expect([error.kind, error.message]).toEqual([
          'Runtime',
          `function ${name}: QuitError: the body ended the R session with tools::pskill() on its own process: ` +
            'a body must return a value (set result), not signal its own process',
        ]);
      }
      expect(await registry.eval('probe', [])).toEqual(n(1));
    });

    // What ends R past quit()'s replacement (.Internal(quit()), the abort restart,
    // closeAllConnections(), a crash): body-ends-r.test.ts.

    test('endless recursion, a huge or non-UTF-8 stop() message, and on.exit() past the deadline are typed errors', async () => {
      const { registry } = scopedRegistry({
        deep: ['f <- function(n) f(n + 1)\nresult <- f(1)', [], 'number'],
        cstack: ['f <- function(x) do.call(f, list(x))\nresult <- f(1)', [], 'number'],
        huge: ['stop(strrep("x", 5e6))', [], 'number'],
        bytes: ['stop(rawToChar(as.raw(c(0x61, 0xe9, 0xff, 0x62))))', [], 'number'],
        exit: ['f <- function() { on.exit(Sys.sleep(60)); stop("x") }\nf()', [], 'number'],
        ok: ['result <- 1', [], 'number'],
      });
      expect((await failure(registry.eval('deep', []))).message).toMatch(
        /^function deep: expressionStackOverflowError: evaluation nested too deeply/,
      );
      expect((await failure(registry.eval('cstack', []))).message).toMatch(
        /^function cstack: CStackOverflowError: C stack usage +\d+ is too close to the limit$/,
      );
      const huge = await failure(registry.eval('huge', []));
      // R keeps the first 8 KiB of a message
      expect(huge.kind).toBe('Runtime');
      expect(huge.message).toMatch(/^function huge: Error: x{8000,8200}$/);
      expect((await failure(registry.eval('bytes', []))).message).toBe(
        'function bytes: Error: a<e9><ff>b',
      );
      const exit = await failure(registry.eval('exit', [], { timeoutMs: 1_000 }));
      expect(exit.kind).toBe('Timeout');
      expect(await registry.eval('ok', [])).toEqual(n(1));
    });
  },
);
