/**
 * readProcessTree: the process under a pid and all its descendants from
 * /proc — threads counted, children found whichever thread forked them,
 * setsid() ones included — and nothing once the root is gone. And
 * ProcessTreeReader, which re-reads one tree with its /proc files kept open:
 * it sees the tree change, ends with the root, and closes what it opened.
 */
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readlinkSync } from 'node:fs';
import { describe, expect, test, vi } from 'vitest';
import { ProcessTreeReader, readProcessTree } from '../src/index.js';

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

/** How many of this process's fds are open on /proc files of `pid`. */
function procFds(pid: number): number {
  let n = 0;
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (readlinkSync(`/proc/self/fd/${fd}`).startsWith(`/proc/${pid}/`)) n++;
    } catch {
      // closed meanwhile (readdir's own fd)
    }
  }
  return n;
}

// Forks a child that sleeps once it reads a line on stdin; then a thread.
const GROWS = `
import os, sys, threading, time
print("up", flush=True)
sys.stdin.readline()
if os.fork() == 0:
    time.sleep(60)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
time.sleep(0.2)
print("grown", flush=True)
time.sleep(60)
`;

describe.skipIf(!linux || !existsSync(PYTHON))('ProcessTreeReader', () => {
  test('sees a child and a thread appear between reads, then nothing once the root is gone', async () => {
    const child = spawn(PYTHON, ['-c', GROWS], { stdio: ['pipe', 'pipe', 'inherit'] });
    // Wait for a whole line: print's text and its newline may arrive as two chunks.
    let out = '';
    child.stdout.on('data', (data) => {
      out += String(data);
    });
    const line = (text: string) =>
      vi.waitFor(() => expect(out).toContain(`${text}\n`), { timeout: 10_000, interval: 5 });
    await line('up');
    const reader = new ProcessTreeReader(child.pid!);
    try {
      expect(reader.read()).toMatchObject({ threads: 1, processes: [{ pid: child.pid }] });
      expect(reader.read()).toMatchObject({ threads: 1 }); // a second read of the same files
      child.stdin.write('go\n');
      await line('grown');
      const tree = reader.read()!;
      expect(tree.processes).toHaveLength(2);
      expect(tree.processes[1]!.parentPid).toBe(child.pid);
      expect(tree.threads).toBe(3); // two in the parent, one in the child
      expect(procFds(child.pid!)).toBeGreaterThan(0); // it keeps its files open
      for (const p of tree.processes.slice(1)) process.kill(p.pid, 'SIGKILL');
      child.kill('SIGKILL');
      await new Promise((resolve) => child.once('exit', resolve));
      expect(reader.read()).toBeUndefined();
    } finally {
      reader.close();
    }
    expect(procFds(child.pid!)).toBe(0);
  });
});
