/**
 * On a real pseudo-terminal: model text reaches the screen with its control
 * characters escaped (files, pipes and --json keep the exact bytes), and the
 * progress bar is drawn only on an interactive terminal, moving as rows finish.
 */
import { access, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { cli, inTerminal, PYTHON3, scratch } from './helpers.js';

/** The test runner package: language "js", bodies are JavaScript (see fixtures/extfn-js). */
const JS_RUNNER = fileURLToPath(new URL('./fixtures/extfn-js/index.js', import.meta.url));
const hasPty = await access(PYTHON3).then(
  () => true,
  () => false,
);
const noPty = hasPty ? '' : ` (skipped: no ${PYTHON3} for its pty module)`;

/** OSC 52 (set the clipboard), BEL, clear screen, a bare CR, and a C1 CSI. */
const EVIL = 'ok\u001b]52;c;ZXZpbA==\u0007\u001b[2J\rX\u009b31m';
const EVIL_ESCAPED = 'ok\\u001b]52;c;ZXZpbA==\\u0007\\u001b[2J\\u000dX\\u009b31m';

let tmp: Awaited<ReturnType<typeof scratch>>;
let evil: string;
let slow: string;
beforeAll(async () => {
  tmp = await scratch();
  evil = await tmp.file(
    'evil.json',
    JSON.stringify({
      name: 'evil',
      language: 'js',
      body: JSON.stringify(EVIL).replace(
        /[\u0000-\u001f\u007f-\u009f]/g,
        (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
      ),
      argTypes: ['number'],
      returnType: 'text',
    }),
  );
  slow = await tmp.file(
    'slow.json',
    JSON.stringify({
      name: 'slow',
      language: 'js',
      body: 'new Promise((resolve) => setTimeout(() => resolve(args[0]), 40))',
      argTypes: ['number'],
      returnType: 'number',
    }),
  );
});
afterAll(async () => {
  await tmp.cleanup();
});

const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]|\u00c2[\u0080-\u009f]/;

describe.skipIf(!hasPty)(`on a terminal${noPty}`, () => {
  test('model text is shown with its control characters escaped; a pipe gets the exact bytes', async () => {
    const shown = await inTerminal(['eval', evil, '1', '--runner', JS_RUNNER]);
    expect(shown.exitCode).toBe(0);
    expect(shown.output).toBe(`${EVIL_ESCAPED}\r\n`);
    expect(shown.output.replace(/\r\n/g, '')).not.toMatch(CONTROL);
    const piped = await cli(['eval', evil, '1', '--runner', JS_RUNNER]);
    expect(piped.stdout).toBe(`${EVIL}\n`);
  });

  test('--json on a terminal stays valid JSON with the exact value', async () => {
    const shown = await inTerminal(['eval', evil, '1', '--runner', JS_RUNNER, '--json']);
    expect(shown.output.replace(/\r\n/g, '')).not.toMatch(CONTROL);
    expect(JSON.parse(shown.output).result.value).toBe(EVIL);
  });

  test('run: rows and error messages on the terminal are escaped, the -o file keeps the bytes', async () => {
    const failing = await tmp.file(
      'failing.json',
      JSON.stringify({
        name: 'failing',
        language: 'js',
        body: '(() => { throw new Error("bad\\u001b[31m red") })()',
        argTypes: ['number'],
        returnType: 'number',
      }),
    );
    const rows = await tmp.file('one.csv', '1\n');
    const shown = await inTerminal(['run', evil, rows, '--runner', JS_RUNNER]);
    expect(shown.output).toContain(`1,"${EVIL_ESCAPED}",\r\n`);
    const errors = await inTerminal(['run', failing, rows, '--runner', JS_RUNNER]);
    expect(errors.exitCode).toBe(1);
    expect(errors.output).toContain('bad\\u001b[31m red');
    expect(errors.output.replace(/\r\n/g, '')).not.toMatch(CONTROL);
    const out = `${tmp.dir}/evil.csv`;
    await inTerminal(['run', evil, rows, '--runner', JS_RUNNER, '-o', out]);
    expect(await readFile(out, 'utf8')).toBe(`1,"${EVIL}",\n`);
  });

  test('the progress bar moves as rows finish, is cleared, and the summary gives the wall time', async () => {
    const rows = await tmp.file(
      'sixty.csv',
      `${Array.from({ length: 60 }, (_, i) => i).join('\n')}\n`,
    );
    const out = `${tmp.dir}/sixty.out.csv`;
    const shown = await inTerminal(['run', slow, rows, '--runner', JS_RUNNER, '-o', out], {
      env: { TERM: 'xterm', CI: undefined },
    });
    expect(shown.exitCode).toBe(0);
    const percents = new Set([...shown.output.matchAll(/\r\[[#-]+\] +(\d+)% /g)].map((m) => m[1]));
    expect(percents.size).toBeGreaterThan(1);
    expect(shown.output).toContain('\r\u001b[K');
    // 60 rows of 40 ms each, one after another: the wall time is about 2.4 s. A Node
    // timer counts from the event loop's cached clock and may fire up to a millisecond
    // short of its 40 ms (2.39 s was seen), so the floor allows 60 of those.
    const seconds = Number(/in ([\d.]+) s/.exec(shown.output)?.[1]);
    expect(seconds).toBeGreaterThanOrEqual(2.34);
  });

  test('no progress bar under TERM=dumb or CI=true', async () => {
    const rows = await tmp.file(
      'forty.csv',
      `${Array.from({ length: 40 }, (_, i) => i).join('\n')}\n`,
    );
    for (const env of [{ TERM: 'dumb' }, { TERM: 'xterm', CI: 'true' }]) {
      const shown = await inTerminal(
        ['run', slow, rows, '--runner', JS_RUNNER, '-o', `${tmp.dir}/x.csv`],
        {
          env,
        },
      );
      expect(shown.exitCode, JSON.stringify(env)).toBe(0);
      expect(shown.output, JSON.stringify(env)).not.toContain('\r[');
      expect(shown.output).toMatch(/40 row\(s\): 40 ok/);
    }
  });
});
