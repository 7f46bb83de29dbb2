/**
 * A row's error message is model text: its line breaks must not let it write
 * a line of stderr that looks like ours (`improv-extfn: …` at column 0).
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { ExitCode } from '../src/exit-codes.js';
import { main } from '../src/main.js';
import { cli, fakeIo, fakeRunner, languageStatus, scratch, skipNote } from './helpers.js';

const python = await languageStatus('python');
const FORGED = 'improv-extfn: 1 row(s): 1 ok, 0 failed';

let tmp: Awaited<ReturnType<typeof scratch>>;
beforeAll(async () => {
  tmp = await scratch();
});
afterAll(async () => {
  await tmp.cleanup();
});

const ours = (stderr: string) => stderr.split('\n').filter((l) => l.startsWith('improv-extfn:'));

describe.skipIf(!python.ready)(`a Python body's multi-line error${skipNote(python)}`, () => {
  const boom = {
    name: 'boom',
    language: 'python',
    body: `raise ValueError('boom\\r\\n${FORGED}')`,
    argTypes: ['number'],
    returnType: 'number',
  };

  test('eval: one line of ours; the rest of the message indented like the traceback', async () => {
    const fn = await tmp.file('boom.json', JSON.stringify(boom));
    const result = await cli(['eval', fn, '1']);
    expect(result.exitCode).toBe(ExitCode.FunctionError);
    expect(ours(result.stderr)).toEqual(['improv-extfn: Runtime: function boom: ValueError: boom']);
    expect(result.stderr).toContain(`\n  | ${FORGED}\n  | Traceback (most recent call last):\n`);
  });

  test('run: only the summary is ours', async () => {
    const fn = await tmp.file('boom.json', JSON.stringify(boom));
    const result = await cli(['run', fn, '-', '--format', 'csv'], { input: '1\n' });
    expect(result.exitCode).toBe(ExitCode.FunctionError);
    expect(ours(result.stderr)).toEqual([
      expect.stringMatching(/^improv-extfn: 1 row\(s\): 0 ok, 1 failed \(Runtime 1\) in /),
    ]);
    expect(result.stderr).toContain('  line 1: Runtime: ValueError: boom\n');
  });
});

test('eval: a message with LF or CR LF line breaks never starts a line at column 0', async () => {
  const fn = await tmp.file(
    'picky.json',
    JSON.stringify({
      name: 'picky',
      language: 'wasm',
      body: `(() => { throw new Error("a\\nimprov-extfn: x\\r\\n${FORGED}") })()`,
      argTypes: ['number'],
      returnType: 'number',
    }),
  );
  const io = fakeIo({ '@improv/extfn-wasm': { wasm: () => fakeRunner() } });
  expect(await main(['eval', fn, '1'], io)).toBe(ExitCode.FunctionError);
  expect(io.err()).toBe(
    `improv-extfn: Runtime: function picky: Error: a\n  | improv-extfn: x\n  | ${FORGED}\n`,
  );
});
