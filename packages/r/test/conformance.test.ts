/** The runner conformance kit (core/testing) against the R runner, Restricted sandbox. */
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { test } from 'vitest';
import { RSCRIPT, restrictedOk, runner, skipReason } from './helpers.js';

const bodies = {
  identity: 'result <- args[[1]]',
  add: 'result <- args[[1]] + args[[2]]',
  raise: 'stop("nope")',
  noLoad: 'result <- (',
  wrongReturn: 'result <- "not a number"',
  loop: 'repeat {}',
  largeResult: 'result <- strrep("x", 200000)',
  flood: 'for (i in 1:60000) cat(strrep("z", 99), "\\n")\nresult <- 0',
  mixedBatch: 'x <- args[[1]]\nif (x < 0) stop("nope")\nwhile (x == 13) {}\nresult <- 2 * x',
  remember: 'result <- if (exists("leaked")) leaked else -1\nleaked <<- args[[1]]',
  random: 'result <- runif(1)',
  vectorizedMixed:
    'x <- args[[1]]\nwhile (any(x == 13)) {}\nif (any(x < 0)) stop("nope")\nr <- 2 * x\nr[x == 7] <- NA\nresult <- r',
};

const verbatim = [
  {
    name: 'backslashes and escapes',
    body: String.raw`result <- paste0("C:\\dir\\file", "\x41", '\'')`,
    returnType: 'text' as const,
    expected: Value.text("C:\\dir\\fileA'"),
  },
  {
    name: 'raw strings',
    body: 'result <- r"(a "b" \\n)"',
    returnType: 'text' as const,
    expected: Value.text('a "b" \\n'),
  },
  {
    name: 'CRLF, tabs and a comment with a quote',
    body: 'x <- "\t" # it\'s\r\n\tresult <- x',
    returnType: 'text' as const,
    expected: Value.text('\t'),
  },
  {
    name: 'Windows (CRLF) and old Mac (CR) line ends after code, in a block',
    body: 'x <- 1\r\nif (x == 1) {\r\n  y <- "crlf"\r\n}\ry <- paste(y, "cr")\rresult <- y\r\n',
    returnType: 'text' as const,
    expected: Value.text('crlf cr'),
  },
];

// Without the interpreter every kit test is still listed, skipped with the reason in its name.
runnerConformanceSuite(test.skipIf(!restrictedOk), () => runner(), {
  bodies,
  textNul: false,
  // POSIXct is a double: six digits near today (r.test.ts checks them), but
  // only about four in 9999, so three is what R keeps over the whole range.
  datetimeDigits: 3,
  unsupported: {
    loneSurrogates:
      "R strings are UTF-8 and cannot hold a lone surrogate: such an argument is that row's Runtime error (r.test.ts)",
  },
  verbatim,
  prefix: restrictedOk
    ? `r (${RSCRIPT}, Restricted) conformance:`
    : `r conformance (${skipReason}):`,
});
