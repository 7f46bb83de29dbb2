/**
 * Idle workers do not keep the host alive: a script that evaluates once and
 * never calls close() exits on its own, and its workers go with it. Run as a
 * subprocess; the bound below is a timeout-as-failure, not a speed claim
 * (idle shutdown is 30 s, so a host held by its workers would pass it).
 */
import { spawn } from 'node:child_process';
import { describe, expect, test } from 'vitest';
import { alive, BOOTSTRAP, hasPython, policy, waitFor } from './helpers.js';

/** Runs the script; resolves with its exit code and stdout, or `undefined` if it was still running after `ms`. */
function runHost(
  ms: number,
  close = false,
): Promise<{ code: number | null; stdout: string } | undefined> {
  const script = new URL('./fixtures/forget-close.mjs', import.meta.url).pathname;
  const args = [script, BOOTSTRAP, policy, ...(close ? ['close'] : [])];
  const child = spawn(process.execPath, args, {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      resolve(undefined);
    }, ms);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout });
    });
  });
}

describe.skipIf(!hasPython)(`a host that forgets close() (policy ${policy})`, () => {
  test('exits on its own with code 0 after its calls, and leaves no worker behind', async () => {
    const ended = await runHost(20_000);
    expect(ended, 'the host was still running after 20 s').toBeDefined();
    expect(ended!.code).toBe(0);
    const { value, rows, pids } = JSON.parse(ended!.stdout.split('\n')[0]!) as {
      value: unknown;
      rows: unknown[];
      pids: number[];
    };
    expect(value).toEqual({ type: 'number', value: 41 });
    expect(rows).toHaveLength(2);
    expect(pids.length).toBeGreaterThan(0);
    expect(await waitFor(() => pids.every((pid) => !alive(pid)), 5_000)).toBe(true);
  });

  test('control: a host that awaits close() sees it settle, then exits with code 0', async () => {
    const ended = await runHost(20_000, true);
    expect(ended, 'the host was still running after 20 s').toBeDefined();
    expect(ended!.code).toBe(0);
    expect(ended!.stdout).toContain('{"closed":true}');
  });
});
