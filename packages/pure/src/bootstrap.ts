/** How Pure is started: the bootstrap script shipped in drivers/ and the directory bound read-only for it. */
import { fileURLToPath } from 'node:url';

/**
 * Pure cannot take a program on its command line, and `pure -q` with the
 * program on stdin reads stdin in blocks of kilobytes with fread(), so it
 * answers nothing until stdin is closed: no stream of calls. The constant
 * bootstrap is therefore a script file shipped in this package
 * (drivers/bootstrap.pure), bound read-only into the sandbox. It reads the
 * protocol's `N\n` + driver preamble from stdin with fgets, evaluates it, and
 * serves frames from the same C stdin stream.
 */
export const BOOTSTRAP_PATH: string = fileURLToPath(
  new URL('../drivers/bootstrap.pure', import.meta.url),
);

/** The directory holding the bootstrap, bound read-only into the sandbox. */
export const DRIVERS_DIR: string = fileURLToPath(new URL('../drivers/', import.meta.url)).replace(
  /\/$/,
  '',
);

/** `-q`: no sign-on message; then the bootstrap script. */
export const PURE_ARGS: readonly string[] = ['-q', BOOTSTRAP_PATH];

/** TZ=UTC for the same time functions on every host. */
export const PURE_ENV: Readonly<Record<string, string>> = { TZ: 'UTC' };

/**
 * Pure compiles with LLVM's JIT, which reserves more address space than a
 * plain interpreter: 2 GiB instead of the sandbox's 1 GiB default.
 */
export const PURE_LIMITS = { memoryBytes: 2 * 1024 ** 3 } as const;
