/**
 * The hostile-body corpus of hostile-paths.test.ts: R bodies that keep
 * state in the global environment, change options, the environment, the
 * RNG or the search path, print, raise, quit, sleep or return odd values,
 * each with the invariant it checks, and the code that runs one through
 * every path of the public API (eval row by row, evalBatch cold and warm,
 * evalColumns, and the vectorized form where the body has one) and lists
 * where a row's outcome differs between paths or from what the case says it
 * must be.
 *
 * Rows are x = 0, 1, …, 299 (one number argument unless a case says
 * otherwise); a case's hostile rows are mostly x %% 8 == 0: row 0, a cold
 * batch's first chunk alone, rows at the ends of its next chunks (they grow
 * at most eightfold: rows 1–8, then at most 9–72, interpreter/src/scheduler.ts)
 * and rows all through the driver's blocks of 128 rows in the warm requests
 * (which hold several: see hostile-paths.test.ts), so state a row leaves for
 * the rows after it, in its block, its chunk or the next one, shows.
 */
import { Value as V } from '@improv/extfn-core';
import type { PathCase } from '@improv/extfn-core/testing';

export type Case = PathCase;

const n = V.number;
const hostile = (x: number) => x % 8 === 0;

/** The corpus. Each body's hostile rows are mostly x %% 8 == 0 (see the header). */
export const CORPUS: Case[] = [
  {
    name: 'a counter kept in the global environment (assign) starts over on every row: every row reads 1',
    body: [
      'cnt <- get0("cnt", envir = globalenv(), inherits = FALSE, ifnotfound = 0) + 1',
      'assign("cnt", cnt, envir = globalenv())',
      'result <- cnt',
    ].join('\n'),
    vectorized: [
      'cnt <- get0("cnt", envir = globalenv(), inherits = FALSE, ifnotfound = 0) + 1',
      'assign("cnt", cnt, envir = globalenv())',
      'result <- args[[1]] * 0 + cnt',
    ].join('\n'),
    expect: () => n(1),
  },
  {
    name: 'a global a row sets with <<- is seen by that row only',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) counter <<- x',
      'result <- if (exists("counter")) counter else -1',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? x : -1),
  },
  {
    name: 'T and pi shadowed in the global environment by a row are base’s again in the next',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) {',
      '  assign("T", FALSE, envir = globalenv())',
      '  assign("pi", 3, envir = globalenv())',
      '}',
      'result <- as.numeric(T) * 10 + pi',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 3 : 10 + Math.PI),
  },
  {
    name: 'a function a row defines in the global environment is gone in the next: only the rows that define it can call it',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) assign("helper", function(v) v * 2, envir = globalenv())',
      'result <- if (exists("helper", envir = globalenv(), inherits = FALSE)) helper(x) else -1',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 2 * x : -1),
  },
  {
    name: 'a list a row attaches is detached after it: only that row sees its names',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) attach(list(zz = x), name = "hostile", warn.conflicts = FALSE)',
      'result <- if (exists("zz")) zz else -1',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? x : -1),
  },
  {
    name: 'a row cannot add bindings to base or to the locked environments above the global one: it fails alone and no later row sees them',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) assign("hp", x, envir = baseenv())',
      'if (x %% 61 == 17) assign("hp", x, envir = parent.env(globalenv()))',
      'result <- if (exists("hp")) hp else -1',
    ].join('\n'),
    expect: (x) =>
      hostile(x)
        ? /^Error: cannot add binding of 'hp' to the base environment$/
        : x % 61 === 17
          ? /^Error: cannot add bindings to a locked environment$/
          : n(-1),
  },
  {
    name: 'a row that changes its args list changes no other row’s args',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) {',
      '  args$extra <- 99',
      '  args[[3]] <- -1',
      '}',
      'args[[1]] <- args[[1]] * 2',
      'result <- length(args) * 1000 + args[[1]]',
    ].join('\n'),
    expect: (x) => n((hostile(x) ? 3000 : 1000) + 2 * x),
  },
  {
    name: 'the generator is back at set.seed(0) before every row: rows that do not seed it (set.seed, RNGkind) draw the same numbers',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) {',
      '  set.seed(x)',
      '  runif(3)',
      '}',
      'if (x %% 61 == 17) RNGkind("Wichmann-Hill")',
      'result <- runif(1) + sample(10, 1) + rnorm(1)',
    ].join('\n'),
    expect: (x) => (hostile(x) || x % 61 === 17 ? undefined : 'same'),
  },
  {
    name: 'options a row sets (digits, scipen, OutDec, warn, its own) reach no later row, in its block or after',
    body: [
      'x <- args[[1]]',
      'before <- getOption("digits") * 100 + getOption("scipen", 0) + nchar(getOption("OutDec"))',
      'if (x %% 8 == 0) options(digits = 3, scipen = 50, OutDec = ",", warn = 2, hostile = x)',
      'shown <- format(pi)',
      'result <- before * 100 + nchar(shown) + is.null(getOption("hostile"))',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 70104 : 70109),
  },
  {
    name: 'options a vectorized chunk sets reach no later chunk',
    body: [
      'before <- getOption("digits")',
      'if (args[[1]] %% 8 == 0) options(digits = 3)',
      'result <- before',
    ].join('\n'),
    vectorized: [
      'before <- getOption("digits")',
      'options(digits = 3)',
      'result <- args[[1]] * 0 + before',
    ].join('\n'),
    expect: () => n(7),
  },
  {
    name: 'warnings never fail a row, not even after an earlier row set options(warn = 2)',
    body: [
      'x <- args[[1]]',
      'if (x %% 8 == 0) options(warn = 2)',
      'y <- as.integer("z")',
      'if (x %% 61 == 17) warning("row warns")',
      'result <- if (is.na(y)) x else -1',
    ].join('\n'),
    expect: (x) => n(x),
  },
  {
    name: 'the time zone, environment variables, working directory and collation a row changes are back for the next row',
    returnType: 'text',
    body: [
      'x <- args[[1]]',
      'before <- paste(Sys.getenv("TZ"), Sys.getenv("HOSTILE"), getwd(), Sys.getlocale("LC_COLLATE"))',
      'if (x %% 8 == 0) {',
      '  Sys.setenv(TZ = "Asia/Tokyo", HOSTILE = x)',
      '  setwd("/usr")',
      '  invisible(Sys.setlocale("LC_COLLATE", "C"))',
      '}',
      'result <- paste(before, format(as.POSIXct(0, origin = "1970-01-01", tz = ""), "%H"))',
    ].join('\n'),
    expect: (x) => (hostile(x) ? undefined : 'same'),
  },
  {
    name: 'rows that print (partial lines with cat, message, 100 KB) keep their values; a row printing past the 1 MiB cap fails with "output too large" on every path',
    body: [
      'x <- args[[1]]',
      'cat(strrep("p", x %% 7))',
      'message(strrep("m", x %% 5))',
      'if (x %% 8 == 0) cat(strrep("y", 100000))',
      'if (x %% 61 == 17) cat(strrep("z", 2^20 + 1))',
      'result <- x',
    ].join('\n'),
    vectorized: [
      'x <- args[[1]]',
      'cat(strrep("p", length(x)))',
      'if (any(x %% 8 == 0)) cat(strrep("y", 100000))',
      'if (any(x %% 61 == 17)) cat(strrep("z", 2^20 + 1))',
      'result <- x',
    ].join('\n'),
    expect: (x) => (x % 61 === 17 ? /^output too large$/ : n(x)),
  },
  {
    name: 'a row that takes the driver’s sink() away and prints fails alone (its worker is replaced); the rows after it keep their values and their output cap',
    body: [
      'x <- args[[1]]',
      'if (x %% 97 == 7) sink()',
      'cat("row", x, "\\n")',
      'if (x %% 61 == 17) cat(strrep("z", 2^20 + 1))',
      'result <- x',
    ].join('\n'),
    expect: (x) =>
      x % 97 === 7
        ? /^malformed frame from the driver: "row \d+ "$/
        : x % 61 === 17
          ? /^output too large$/
          : n(x),
  },
  {
    name: 'rows that fail (stop, a condition class of their own, q(), invokeRestart("abort")) get their own error, a warning fails nothing, and the rows after them keep their values',
    body: [
      'x <- args[[1]]',
      'k <- x %% 13',
      'if (k == 1) stop("bad row ", x)',
      'if (k == 2) stop(structure(class = c("myError", "error", "condition"), list(message = paste("mine", x), call = NULL)))',
      'if (k == 3) q(status = 3)',
      'if (k == 4) invokeRestart("abort")',
      'if (k == 5) warning("only a warning")',
      'result <- if (k == 6) log(-1) else x',
    ].join('\n'),
    vectorized: [
      'x <- args[[1]]',
      'k <- x %% 13',
      'if (any(k == 1)) stop("bad row ", x[k == 1][1])',
      'if (any(k == 2)) stop(structure(class = c("myError", "error", "condition"), list(message = paste("mine", x[k == 2][1]), call = NULL)))',
      'if (any(k == 3)) q(status = 3)',
      'if (any(k == 4)) invokeRestart("abort")',
      'if (any(k == 5)) warning("only a warning")',
      'result <- ifelse(k == 6, NaN, x)',
    ].join('\n'),
    expect: (x) =>
      [
        n(x),
        /^Error: bad row \d+$/,
        /^myError: mine \d+$/,
        /^QuitError: the body ended the R session with q\(\)/,
        /^QuitError: the body jumped out of its call with invokeRestart\("abort"\)/,
        n(x),
        n(Number.NaN),
      ][x % 13] ?? n(x),
  },
  {
    name: 'special results come back as themselves (NaN, ±Inf, -0, an integer, 1e308 * 10) and refused ones (NA, NULL, a vector of two, a string, TRUE, an integer overflow) are each row’s own error',
    body: [
      'k <- args[[1]] %% 12',
      'result <- switch(k + 1, NaN, Inf, -Inf, -0, 5L, 1e308 * 10, NA, NULL, c(1, 2), "five", TRUE, .Machine$integer.max + 1L)',
    ].join('\n'),
    expect: (x) =>
      [
        n(Number.NaN),
        n(Infinity),
        n(-Infinity),
        n(-0),
        n(5),
        n(Infinity),
        /^result expected number, got NA \(logical, R's missing value\)$/,
        /^result expected number, got NULL$/,
        /^result expected number, got double of length 2$/,
        /^result expected number, got character "five"$/,
        /^result expected number, got logical TRUE$/,
        /^result expected number, got NA \(integer, R's missing value\)$/,
      ][x % 12],
  },
  {
    name: 'recursion well below the limit (200 calls, 400 on some rows) succeeds on every path, whatever rows ran before',
    body: [
      'down <- function(m) if (m == 0) 0 else 1 + down(m - 1)',
      'x <- args[[1]]',
      'result <- down(if (x %% 8 == 0) 400 else 200)',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? 400 : 200),
  },
  {
    name: 'rows that sleep (2 ms) keep their values and their places',
    body: ['x <- args[[1]]', 'if (x %% 8 == 0) Sys.sleep(0.002)', 'result <- x'].join('\n'),
    expect: (x) => n(x),
  },
  {
    name: 'garbage collection inside a row: a finalizer the row registers runs in that row',
    body: [
      'x <- args[[1]]',
      'fired <- 0',
      'if (x %% 8 == 0) {',
      '  e <- new.env()',
      '  reg.finalizer(e, function(env) fired <<- fired + 1)',
      '  rm(e)',
      '  invisible(gc())',
      '}',
      'result <- x + fired',
    ].join('\n'),
    expect: (x) => n(hostile(x) ? x + 1 : x),
  },
  {
    name: 'time and pids differ from run to run, yet every path gives every row a number (shape only)',
    body: 'result <- as.numeric(Sys.time()) + Sys.getpid() + args[[1]]',
    shapeOnly: true,
  },
  {
    name: 'a text function (callcols and JSON frames) whose rows raise, print and get a NUL (their argument error) keeps each row’s own result',
    argTypes: ['text'],
    returnType: 'text',
    args: (i) => [
      V.text(
        `row-${String(i).padStart(3, '0')}${i % 9 === 0 ? 'é' : ''}${i % 29 === 0 ? '\u0000' : ''}`,
      ),
    ],
    body: [
      's <- args[[1]]',
      'x <- as.integer(substr(s, 5, 7))',
      'if (x %% 13 == 1) stop("bad ", s)',
      'if (x %% 8 == 0) cat(strrep(s, 100))',
      'result <- paste0(toupper(s), "·", length(args))',
    ].join('\n'),
    vectorized: [
      's <- args[[1]]',
      'x <- as.integer(substr(s, 5, 7))',
      'if (any(x %% 13 == 1)) stop("bad ", s[x %% 13 == 1][1])',
      'if (any(x %% 8 == 0)) cat(strrep(s[x %% 8 == 0], 100))',
      'result <- paste0(toupper(s), "·", length(args))',
    ].join('\n'),
    expect: (x) =>
      x % 29 === 0
        ? /^ValueError: text argument 1 contains a NUL character/
        : x % 13 === 1
          ? /^Error: bad row-\d+/
          : undefined,
  },
  {
    name: 'a row that switches LC_CTYPE to C leaves the later rows’ text functions in UTF-8',
    argTypes: ['text'],
    returnType: 'text',
    args: (i) => [V.text(`école-${i}-ß`)],
    body: [
      's <- args[[1]]',
      'if (grepl("-[0-9]*0-", s)) invisible(Sys.setlocale("LC_CTYPE", "C"))',
      'result <- paste(toupper(s), nchar(s), Sys.getlocale("LC_CTYPE"))',
    ].join('\n'),
    expect: (i) =>
      i % 10 === 0 ? undefined : V.text(`ÉCOLE-${i}-ß ${8 + String(i).length} C.UTF-8`),
  },
  {
    name: 'a datetime function of a datetime, an enum and a boolean (callcols) whose rows raise and print keeps each row’s own result',
    argTypes: ['datetime', 'enum', 'boolean'],
    returnType: 'datetime',
    args: (i) => [
      V.datetime(new Date(Date.UTC(2024, 0, 1) + i * 3_600_123)),
      V.enum(i),
      V.boolean(i % 3 === 0),
    ],
    body: [
      'when <- args[[1]]',
      'k <- args[[2]]',
      'flag <- args[[3]]',
      'if (k %% 13 == 1) stop("enum ", k)',
      'if (flag && k %% 8 == 0) print(when)',
      'result <- when + k * 86400 + if (flag) 0.5 else 0',
    ].join('\n'),
    vectorized: [
      'when <- args[[1]]',
      'k <- args[[2]]',
      'flag <- args[[3]]',
      'if (any(k %% 13 == 1)) stop("enum ", k[k %% 13 == 1][1])',
      'if (any(flag & k %% 8 == 0)) print(when[flag & k %% 8 == 0])',
      'result <- when + k * 86400 + ifelse(flag, 0.5, 0)',
    ].join('\n'),
    expect: (x) => (x % 13 === 1 ? /^Error: enum \d+$/ : undefined),
  },
];
