/**
 * The constant program on julia's command line (`-e`): it reads `N\n` and
 * then exactly N bytes of driver source from stdin, includes that source
 * into a fresh module and calls its `main()`. stdin is one buffered stream
 * for the whole worker, so the driver goes on reading frames from the same
 * buffer the bootstrap read from. (`julia -` would need EOF on stdin before
 * it runs anything, which leaves no channel for a stream of calls.)
 */
export const BOOTSTRAP =
  'let n = parse(Int, readline(stdin)); ' +
  'src = String(read!(stdin, Vector{UInt8}(undef, n))); ' +
  'm = Module(:ExtfnDriver); ' +
  'Base.include_string(m, src, "extfn-driver.jl"); ' +
  'Base.invokelatest(getfield(m, :main)); end';

/** No startup file or history, plain output, one thread (a worker serves one row at a time). */
export const JULIA_ARGS: readonly string[] = [
  '--startup-file=no',
  '--history-file=no',
  '--color=no',
  '--threads=1',
  '-e',
  BOOTSTRAP,
];

/**
 * Added to the sandbox's clean environment. One thread for Julia and for
 * OpenBLAS: threads count against the sandbox's process limit, and OpenBLAS
 * would start one per core. TZ=UTC for the same output on every host.
 */
export const JULIA_ENV: Readonly<Record<string, string>> = {
  JULIA_NUM_THREADS: '1',
  OPENBLAS_NUM_THREADS: '1',
  TZ: 'UTC',
};

/**
 * Julia reserves large virtual memory regions at start (GC pools, LLVM, the
 * system image mapped whole), so the 1 GiB address-space cap that suits
 * Python stops it before it runs a line. 16 GiB of address space lets it
 * start; it is a cap on reservations, not on resident memory. The wall-clock
 * deadline and the sandbox's other limits still apply.
 */
export const JULIA_LIMITS = {
  memoryBytes: 16 * 1024 ** 3,
  openFiles: 256,
} as const;

/** Julia's start-up (and the first compile of the driver) takes seconds, not milliseconds. */
export const JULIA_STARTUP_TIMEOUT_MS = 60_000;

/** Warm Julia workers stay 10 minutes by default: a restart costs seconds. */
export const JULIA_IDLE_MS = 600_000;
