/**
 * A fake warm worker for tests that drive the runner or the pool without an
 * interpreter: it answers JSON `call` frames with each row's arguments summed,
 * a millisecond later. No sandbox module is imported here (on-register.test.ts
 * needs a process where nothing of the sandbox has run).
 */
import type { DispatchWorker } from '../src/dispatch.js';
import type { Frame, FrameHeader, RawJson } from '../src/frames.js';

export class SummingWorker implements DispatchWorker {
  static nextPid = 1;
  readonly pid = SummingWorker.nextPid++;
  alive = true;
  requests = 0;
  busyMs = 0;
  constructor(readonly key: string) {}
  async request(header: FrameHeader): Promise<Frame> {
    const rows = JSON.parse((header.rows as RawJson).text) as number[][];
    await new Promise((resolve) => setTimeout(resolve, 1));
    this.requests++;
    return { header: { values: rows.map((row) => row.reduce((a, b) => a + b, 0)) }, elapsedMs: 1 };
  }
  leftWork(): undefined {
    return undefined;
  }
  async retire(): Promise<void> {
    this.alive = false;
  }
  async stop(): Promise<void> {
    this.alive = false;
  }
  async kill(): Promise<void> {
    this.alive = false;
  }
}
