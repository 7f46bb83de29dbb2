/**
 * A host process whose only work is a batch must see it settle, and must end
 * on its own after close(), when a body ends its own interpreter: the next
 * worker then starts (or its exit is heard) while no request is in flight,
 * and nothing else keeps Node's event loop alive. Run in a child Node
 * process, since the question is whether that process exits, and when.
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, test } from 'vitest';
import { noRestricted, PYTHON, restrictedOk } from './helpers.js';

const DIST = fileURLToPath(new URL('../dist/index.js', import.meta.url));

/** Runs the host script in a fresh Node process; resolves with its exit code and output. */
function host(script: string[], env: NodeJS.ProcessEnv): Promise<{ code: number; out: string }> {
  return new Promise((resolve, reject) =>
    execFile(
      process.execPath,
      ['--input-type=module', '-e', script.join('\n')],
      {
        cwd: fileURLToPath(new URL('..', import.meta.url)),
        env: { ...process.env, ...env },
        timeout: 20_000,
      },
      (error, stdout, stderr) => {
        if (error?.killed)
          reject(new Error(`the host did not exit on its own\n${stdout}\n${stderr}`));
        else resolve({ code: typeof error?.code === 'number' ? error.code : 0, out: stdout });
      },
    ),
  );
}

describe.skipIf(!restrictedOk)(
  `a body that ends its interpreter ${restrictedOk ? '' : noRestricted}`,
  () => {
    for (const zygote of ['1', '0']) {
      test(`its batch settles and the host exits after close() (IMPROV_EXTFN_ZYGOTE=${zygote})`, async () => {
        const { code, out } = await host(
          [
            "import { Registry, Value } from '@improv/extfn-core';",
            `import { python } from ${JSON.stringify(DIST)};`,
            `const registry = new Registry({ runners: [python({ interpreter: ${JSON.stringify(PYTHON)}, policy: 'restricted' })], timeoutMs: 5000 });`,
            "registry.register({ name: 'ok', language: 'python', body: 'result = 1', argTypes: [], returnType: 'number' });",
            "registry.register({ name: 'quit', language: 'python', body: 'import os\\nos._exit(3)', argTypes: ['number'], returnType: 'number' });",
            "await registry.eval('ok', []);",
            "const rows = await registry.evalBatch('quit', [[Value.number(1)], [Value.number(2)], [Value.number(3)]]);",
            'console.log(JSON.stringify(rows.map((row) => row.message)));',
            'await registry.close();',
          ],
          { IMPROV_EXTFN_ZYGOTE: zygote },
        );
        // exit code 13 is Node's for a top-level await that never settled: the batch was lost
        expect(code).toBe(0);
        expect(JSON.parse(out)).toEqual(
          Array(3).fill(
            "function quit: the interpreter exited with code 3 while running this row: the function's body " +
              "ended its interpreter (an exit, an abort, a signal to its own process, the driver's connections " +
              'closed) or crashed it; a body must return its result, or raise an error to fail its row',
          ),
        );
      }, 30_000);
    }
  },
);
