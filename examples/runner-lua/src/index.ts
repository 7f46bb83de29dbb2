/**
 * An example third-party subprocess runner: Lua 5.4 bodies, sandboxed and on
 * warm workers, built on @improv/extfn-interpreter exactly as the first-party
 * runners are. What a language takes is how to find the interpreter, a
 * constant bootstrap, and a driver program (drivers/driver.lua) that speaks
 * docs/protocol.md.
 */
import { readFileSync } from 'node:fs';
import {
  createInterpreterRunner,
  type InterpreterRunner,
  type InterpreterRunnerOptions,
  resolveExecutable,
} from '@improv/extfn-interpreter';

/**
 * The constant bootstrap (never the body, never a value): read `N\n`, then N
 * bytes of driver source, and run it. Lua's io.read is buffered, which is
 * fine: the driver goes on reading requests through the same io.stdin, so
 * bytes read ahead are not lost.
 */
export const BOOTSTRAP =
  "local n = tonumber(io.read('l')); local source = io.read(n); assert(load(source, '=driver', 't'))()";

/** `-E`: ignore LUA_INIT and LUA_PATH, so the host's environment cannot change the driver. */
export const LUA_ARGS: readonly string[] = ['-E', '-e', BOOTSTRAP];

/** The driver program (drivers/driver.lua, shipped with the package). */
export const DRIVER_SOURCE: string = readFileSync(
  new URL('../drivers/driver.lua', import.meta.url),
  'utf8',
);

export interface LuaRunnerOptions extends InterpreterRunnerOptions {
  /**
   * The Lua 5.4 interpreter: a path or a command name on PATH. Default: the
   * `IMPROV_EXTFN_LUA` environment variable, else `lua5.4`, else `lua`.
   */
  interpreter?: string;
}

/**
 * The Lua runner. Bodies are Lua 5.4 statements that read `args` (`args[1]`,
 * `args[2]`, …) and set `result`.
 */
export function lua(options: LuaRunnerOptions = {}): InterpreterRunner {
  const { interpreter, ...runnerOptions } = options;
  return createInterpreterRunner(
    {
      language: 'lua',
      packageName: '@improv/example-runner-lua',
      resolveInterpreter: () =>
        resolveExecutable({
          explicit: interpreter,
          envVar: 'IMPROV_EXTFN_LUA',
          names: ['lua5.4', 'lua'],
        }),
      args: LUA_ARGS,
      driverSource: DRIVER_SOURCE,
      // JSON frames only: Lua's strings could carry binary f64 columns, but
      // the example keeps to the part of the protocol every driver needs.
      f64: false,
      installHint:
        'install Lua 5.4 (e.g. apt-get install lua5.4), or set IMPROV_EXTFN_LUA or the `interpreter` option',
    },
    runnerOptions,
  );
}
