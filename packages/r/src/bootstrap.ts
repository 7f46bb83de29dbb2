/**
 * The constant program on Rscript's command line (`-e`): it opens stdin once
 * as a binary connection, reads `N\n` and then N bytes of driver source, and
 * calls the function that source evaluates to with that same connection.
 * One connection for the whole life of the worker: a second
 * `file("stdin")` would have its own buffer and could miss bytes the first
 * one already read ahead. (`Rscript -` would need EOF on stdin before it
 * runs anything, which leaves no channel for a stream of calls.)
 *
 * Everything is evaluated in environments whose parent is baseenv(), so
 * nothing of the driver lives in the global environment the body sees.
 */
export const BOOTSTRAP =
  'local({con<-file("stdin","rb");n<-as.integer(readLines(con,1L));' +
  'src<-rawToChar(readBin(con,"raw",n));Encoding(src)<-"UTF-8";' +
  'eval(parse(text=src,keep.source=FALSE)[[1L]],new.env(parent=baseenv()))(con)},' +
  'new.env(parent=baseenv()))';

/**
 * `--vanilla`: no site or user profile, no saved workspace, no Renviron
 * files. `--no-echo --no-restore` are what Rscript adds for R's binary, which
 * workers usually start directly (src/direct.ts); Rscript takes them too.
 */
export const R_ARGS: readonly string[] = [
  '--no-echo',
  '--no-restore',
  '--vanilla',
  '-e',
  BOOTSTRAP,
];

/**
 * Added to the sandbox's clean environment. R starts with base alone:
 * attaching the default packages costs every start about 70 ms (`methods`
 * another 150 ms). The driver attaches datasets, utils, grDevices, graphics
 * and stats at load, in R's order, for a body that may use them (one that
 * names anything base does not define, or looks names up at run time);
 * `methods` only through the body's own `library(methods)`. TZ=UTC makes
 * `format()` of a datetime print UTC, the same on every host.
 */
export const R_ENV: Readonly<Record<string, string>> = {
  R_DEFAULT_PACKAGES: 'base',
  // The JIT compiler's first use costs a start about 50 ms of CPU: the driver
  // byte-compiles the body and its per-row code itself, once a worker has run
  // a few thousand rows.
  R_ENABLE_JIT: '0',
  TZ: 'UTC',
  LC_ALL: 'C.UTF-8',
  // Keep freed blocks up to 64 MiB in glibc's heap instead of unmapping them:
  // a vectorized chunk's vectors, freed by the driver's minor collection,
  // are then reused by the next chunk instead of fresh pages (first touch
  // costs ~10 µs a page on a Firecracker VM: more than the arithmetic).
  MALLOC_MMAP_THRESHOLD_: '67108864',
  MALLOC_TRIM_THRESHOLD_: '268435456',
};
