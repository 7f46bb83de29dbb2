/**
 * A zygote that stops answering (SIGSTOP from outside, wedged): a fork gives
 * up once the zygote has not answered its line within a few seconds, not at
 * the worker's whole start-up deadline, and says so (`unanswered`: the
 * interpreter then replaces it). A host loop too busy to read the answer in
 * time is not taken for one. Stand-in zygote program, as in zygote.test.ts.
 */
import { readFileSync } from 'node:fs';
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { Zygote } from '../src/zygote.js';
import { PYTHON } from './helpers.js';
import { available, BOOT, why } from './zygote-stand-in.js';

/** Answers each fork line with the child's pid; the child dials back and waits. */
const PROGRAM = [
  'import json, os, socket, sys, time',
  "print(json.dumps({'zygote': 'ready'}), flush=True)",
  'while True:',
  '    line = sys.stdin.readline()',
  '    if not line: os._exit(0)',
  '    req = json.loads(line)',
  '    pid = os.fork()',
  '    if pid == 0:',
  '        conns = []',
  "        for stream in ('stdio', 'stderr'):",
  '            s = socket.socket(socket.AF_UNIX)',
  "            s.connect('/run/extfn-zygote/s')",
  "            s.sendall(('%s %s\\n' % (req['token'], stream)).encode())",
  '            conns.append(s)',
  '        time.sleep(60)',
  '        os._exit(0)',
  "    print(json.dumps({'id': req['id'], 'pid': pid}), flush=True)",
].join('\n');

function start() {
  return Zygote.start({
    command: PYTHON,
    args: ['-s', '-S', '-B', '-c', BOOT],
    program: PROGRAM,
    maxWorkers: 2,
    functionName: 'zyg_fn',
    startupMs: 10_000,
  });
}

/** The zygote's own process (bwrap's child): what a SIGSTOP from outside would hit. */
function zygoteProcess(zygote: Zygote): number {
  const children = readFileSync(`/proc/${zygote.pid}/task/${zygote.pid}/children`, 'utf8');
  return Number(children.trim().split(/\s+/)[0]);
}

describe.skipIf(!available)(`a zygote that stops answering ${available ? '' : why}`, () => {
  test('a fork gives up within seconds, not at its 15 s start-up deadline, and marks it unanswered', async () => {
    const zygote = await start();
    const stopped = zygoteProcess(zygote);
    try {
      const worker = await zygote.fork({ functionName: 'first_fn', startupMs: 15_000 });
      await worker.kill();
      expect(zygote.unanswered).toBe(false);
      process.kill(stopped, 'SIGSTOP');
      const began = Date.now();
      const error = await zygote
        .fork({ functionName: 'stalled_fn', startupMs: 15_000 })
        .catch((e: unknown) => e);
      const ms = Date.now() - began;
      expect(ExtFnError.isInstance(error)).toBe(true);
      expect((error as ExtFnError).kind).toBe('Sandbox');
      expect((error as ExtFnError).message).toContain('function stalled_fn:');
      expect((error as ExtFnError).message).toMatch(/did not answer the fork in 3000 ms/);
      expect(ms).toBeGreaterThanOrEqual(2_900);
      expect(ms).toBeLessThan(6_000);
      expect(zygote.unanswered).toBe(true);
    } finally {
      process.kill(stopped, 'SIGCONT');
      await zygote.close();
    }
  });

  test('an answer waiting while the host loop is busy past that deadline is read, not taken for a stall', async () => {
    const zygote = await start();
    try {
      const forking = zygote.fork({ functionName: 'busy_fn', startupMs: 15_000 });
      // the zygote answers meanwhile; the host reads it only after its timers have run
      const until = Date.now() + 3_500;
      while (Date.now() < until) {}
      const worker = await forking;
      expect(zygote.unanswered).toBe(false);
      await worker.kill();
    } finally {
      await zygote.close();
    }
  });
});
