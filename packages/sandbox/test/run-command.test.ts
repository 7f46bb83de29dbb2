/**
 * runCommand (run-command.ts), the host helper runner behind the probe's
 * `bwrap --version`, `kill -1` as a tree's uid and ipcrm: it never rejects,
 * gives what the command printed and how it ended, ends its input at once,
 * and kills it past its time.
 */
import { describe, expect, test } from 'vitest';
import { runCommand } from '../src/run-command.js';

describe('runCommand', () => {
  test('what it printed and exit code 0', async () => {
    const result = await runCommand('/bin/sh', ['-c', 'echo "$GREETING"; cat'], {
      env: { GREETING: 'hello' },
    });
    expect(result).toEqual({ stdout: 'hello\n', exitCode: 0 }); // cat met end of input at once
  });

  test('a failing command: its exit code, not a rejection', async () => {
    const result = await runCommand('/bin/sh', ['-c', 'echo partial; exit 3']);
    expect(result.stdout).toBe('partial\n');
    expect(result.exitCode).toBe(3);
    expect(result.error).toBeInstanceOf(Error);
  });

  test('a command that is not there: an error, not a rejection', async () => {
    const result = await runCommand('/nonexistent/command', []);
    expect(result.exitCode).toBeUndefined();
    expect(result.error?.message).toMatch(/ENOENT/);
  });

  test('past its time: killed, with no exit code', async () => {
    const started = Date.now();
    const result = await runCommand('/bin/sh', ['-c', 'exec sleep 30'], { timeoutMs: 200 });
    expect(result.exitCode).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(10_000);
  });
});
