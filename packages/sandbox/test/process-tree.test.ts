/**
 * readProcessTree: the process under a pid and all its descendants from
 * /proc — threads counted, children found whichever thread forked them,
 * setsid() ones included — and nothing once the root is gone.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, test } from 'vitest';
import { readProcessTree } from '../src/index.js';

const PYTHON = '/usr/bin/python3';
const linux = existsSync('/proc/self/stat');

/** A python process running `code`; resolves once it printed a line. */
async function python(code: string) {
  const child = spawn(PYTHON, ['-c', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.once('data', () => resolve());
    child.once('exit', (status) => reject(new Error(`exited early with ${status}`)));
  });
  return child;
}

const THREADS = `
import threading, time
for _ in range(3):
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("up", flush=True)
time.sleep(60)
`;

// A thread forks (so the child is listed under that thread), and the child
// starts a new session and forks a grandchild.
const FAMILY = `
import os, threading, time
def fork():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(60)
        time.sleep(60)
t = threading.Thread(target=fork)
t.start(); t.join()
time.sleep(0.3)
print("up", flush=True)
time.sleep(60)
`;

describe.skipIf(!linux || !existsSync(PYTHON))('readProcessTree', () => {
  test('counts the threads of a process (control: one thread before they start)', async () => {
    const child = spawn(PYTHON, ['-c', 'import time; time.sleep(60)'], { stdio: 'ignore' });
    try {
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(readProcessTree(child.pid!)).toMatchObject({ threads: 1 });
    } finally {
      child.kill('SIGKILL');
    }
    const threaded = await python(THREADS);
    try {
      const tree = readProcessTree(threaded.pid!)!;
      expect(tree.processes).toHaveLength(1);
      expect(tree.threads).toBe(4);
    } finally {
      threaded.kill('SIGKILL');
    }
  });

  test('finds children forked by any thread, and setsid() grandchildren', async () => {
    const child = await python(FAMILY);
    try {
      const tree = readProcessTree(child.pid!)!;
      expect(tree.processes).toHaveLength(3);
      expect(tree.processes[0]!.pid).toBe(child.pid);
      expect(tree.processes[1]!.parentPid).toBe(child.pid);
      expect(tree.processes[2]!.parentPid).toBe(tree.processes[1]!.pid);
      expect(tree.cpuSeconds).toBeGreaterThanOrEqual(0);
    } finally {
      // the session's processes are not in the child's group: kill them by pid
      for (const p of readProcessTree(child.pid!)?.processes ?? []) process.kill(p.pid, 'SIGKILL');
    }
  });

  test('a process that is gone has no tree', async () => {
    const child = spawn(PYTHON, ['-c', 'pass'], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('exit', resolve));
    expect(readProcessTree(child.pid!)).toBeUndefined();
  });
});
