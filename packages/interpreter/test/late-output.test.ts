/**
 * Output that arrives after its request's answer. stderr is a pipe of its
 * own, so what a body wrote just before answering can reach the host after
 * the answer, while the next request runs (queued behind it, or sent at
 * once). Those bytes must not fail the next request for "output too large"
 * (seen as a rare failure of output-cap.test.ts under load), while a request
 * that writes too much itself still fails. A stand-in tree, so the order of
 * the two pipes is the test's to choose.
 */
import { PassThrough } from 'node:stream';
import type { SandboxExit, SandboxedTree } from '@improv/extfn-sandbox';
import { describe, expect, test } from 'vitest';
import { WorkerFailure } from '../src/failures.js';
import { encodeFrame } from '../src/frames.js';
import { type RequestOptions, WarmWorker } from '../src/warm-worker.js';

/** A tree whose answers and stderr bytes the test writes, in the order it likes. */
function standIn() {
  const stdout = new PassThrough();
  const sent: number[] = [];
  const stdin = new PassThrough();
  stdin.on('data', (chunk: Buffer) => {
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line) sent.push(JSON.parse(line).id);
    }
  });
  let end!: (exit: SandboxExit) => void;
  const tree = {
    pid: undefined, // no process-tree checks
    stdin,
    stdout,
    stderrBytes: 0,
    stderrTail: () => '',
    kill: async () => end({ exitCode: null, signal: 'SIGKILL' } as unknown as SandboxExit),
    exited: new Promise<SandboxExit>((resolve) => {
      end = resolve;
    }),
    ref() {},
    unref() {},
  };
  const answer = (id: number) => stdout.write(encodeFrame({ id, ok: true }));
  const worker = new WarmWorker('k', tree as unknown as SandboxedTree, undefined);
  return { tree, worker, sent, answer };
}

const MB = 1024 * 1024;
const options = (outputBytes: number): RequestOptions => ({
  deadlineMs: 10_000,
  limits: { line: 64 * 1024, payload: 0 },
  outputBytes,
});
const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe('output that arrives after its answer', () => {
  test('counts against the request that wrote it, not the one queued behind', async () => {
    const { tree, worker, sent, answer } = standIn();
    const first = worker.request({ op: 'call' }, undefined, options(MB));
    const second = worker.request({ op: 'call' }, undefined, options(MB));
    await tick();
    expect(sent).toEqual([1, 2]);
    tree.stderrBytes += 0.5 * MB; // the first wrote half its budget before answering…
    answer(1);
    expect((await first).header).toMatchObject({ id: 1, ok: true });
    tree.stderrBytes += 0.5 * MB; // …and as much again reached the host only now
    tree.stderrBytes += 0.9 * MB; // the second's own output, under its budget
    answer(2);
    expect((await second).header).toMatchObject({ id: 2, ok: true });
    expect(worker.alive).toBe(true);
  });

  test('the same when the next request is sent after the answer', async () => {
    const { tree, worker, answer } = standIn();
    const first = worker.request({ op: 'call' }, undefined, options(MB));
    await tick();
    answer(1);
    await first;
    const second = worker.request({ op: 'call' }, undefined, options(MB));
    tree.stderrBytes += 0.8 * MB; // late bytes of the first (it wrote nothing before answering)
    tree.stderrBytes += 0.9 * MB; // the second's own
    await tick();
    answer(2);
    expect((await second).header).toMatchObject({ id: 2 });
  });

  test('a request over its own budget still fails, whatever the one before left unused', async () => {
    const { tree, worker, answer } = standIn();
    const first = worker.request({ op: 'call' }, undefined, options(MB));
    await tick();
    answer(1); // wrote nothing: up to 1 MB may still come late
    await first;
    const second = worker.request({ op: 'call' }, undefined, options(MB));
    tree.stderrBytes += 2 * MB + 1; // more than its budget plus all the first may have had late
    await tick();
    answer(2);
    const error = await second.catch((e) => e);
    expect(error).toBeInstanceOf(WorkerFailure);
    expect(error.reason).toBe('output');
    expect(worker.alive).toBe(false);
  });

  test('what the one before was allowed does not pile up over requests', async () => {
    const { tree, worker, answer } = standIn();
    for (let id = 1; id <= 3; id++) {
      const request = worker.request({ op: 'call' }, undefined, options(MB));
      await tick();
      answer(id); // each wrote nothing
      await request;
    }
    const fourth = worker.request({ op: 'call' }, undefined, options(MB));
    tree.stderrBytes += 2.5 * MB; // within 4 budgets' sum, over 2 (its own + one late)
    await tick();
    answer(4);
    expect((await fourth.catch((e) => e)).reason).toBe('output');
  });

  test('bytes that arrive between two requests use up the late allowance', async () => {
    const { tree, worker, answer } = standIn();
    const first = worker.request({ op: 'call' }, undefined, options(MB));
    await tick();
    answer(1);
    await first;
    tree.stderrBytes += MB; // the first's late bytes, all before the next request
    const second = worker.request({ op: 'call' }, undefined, options(MB));
    tree.stderrBytes += 1.5 * MB; // so the second has only its own budget
    await tick();
    answer(2);
    expect((await second.catch((e) => e)).reason).toBe('output');
  });
});
