/** An in-memory LanguageRunner for the registry and backstop tests: no interpreter, each behaviour chosen by the body. */
import {
  type CallOptions,
  type ExternalFn,
  ExtFnError,
  type LanguageRunner,
  type NumberValue,
  Value as V,
  type Value,
} from '../src/index.js';

/**
 * An in-memory runner for registry tests. Bodies are tiny commands:
 * `add`, `echo`, `throw-plain`, `throw-typed`, `hang`, `wrong-type`, `sleep:<ms>`.
 */
export function fakeRunner(language = 'fake') {
  const calls: { fn: string; args: readonly Value[]; options: CallOptions }[] = [];
  let closed = 0;
  const runner: LanguageRunner = {
    specificationVersion: 'v1',
    language,
    packageName: `@test/${language}`,
    capabilities: { isolated: false, warmWorkers: false, batch: false },
    async probe() {
      return { language, available: true, detail: 'in memory' };
    },
    async call(fn: ExternalFn, args: readonly Value[], options: CallOptions): Promise<Value> {
      calls.push({ fn: fn.name, args, options });
      const [command, arg] = fn.body.split(':');
      switch (command) {
        case 'add':
          return V.number((args[0] as NumberValue).value + (args[1] as NumberValue).value);
        case 'echo':
          return args[0]!;
        case 'throw-plain':
          throw new TypeError('plain failure');
        case 'throw-typed':
          throw ExtFnError.runtime(fn.name, 'ValueError: nope');
        case 'hang':
          return new Promise(() => {});
        case 'wrong-type':
          return V.text('five');
        case 'sleep':
          await new Promise((r) => setTimeout(r, Number(arg)));
          return V.number(1);
        case 'malformed':
          return { type: 'number', value: 'x' } as unknown as Value;
        default:
          throw new Error(`unknown fake body ${fn.body}`);
      }
    },
    async close() {
      closed++;
    },
  };
  return { runner, calls, closedCount: () => closed };
}

export const fn = (
  name: string,
  body: string,
  argTypes: ExternalFn['argTypes'],
  returnType: ExternalFn['returnType'],
  pure = false,
  language = 'fake',
): ExternalFn => ({
  name,
  language,
  body,
  argTypes,
  returnType,
  pure,
});
