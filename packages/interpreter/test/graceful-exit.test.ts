/**
 * Graceful exits: a healthy worker that ends (close, idle) is sent `exit`
 * and may end on its own before its tree is killed, so interpreters clean
 * up after themselves; a driver that does not exit is killed after the grace.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Registry, Value } from '@improv/extfn-core';
import { afterEach, describe, expect, test } from 'vitest';
import { createInterpreterRunner } from '../src/index.js';
import { alive, fixtureRegistry, hasPython, waitFor } from './helpers.js';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

function scratch(): string {
  const dir = mkdtempSync(join(tmpdir(), 'extfn-exit-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A body that leaves a file behind when its interpreter exits normally (atexit). */
const MARK_AT_EXIT = [
  'import atexit',
  'atexit.register(lambda p=args[0]: open(p, "w").write("bye"))',
  'result = 1',
].join('\n');

describe.skipIf(!hasPython)('graceful exits (trusted policy: the host /tmp is visible)', () => {
  test('close() lets an idle worker exit on its own, and no worker pid survives', async () => {
    const { registry, runner } = fixtureRegistry(
      { mark: [MARK_AT_EXIT, ['text'], 'number'] },
      { policy: 'trusted' },
    );
    cleanups.push(() => registry.close());
    const marker = join(scratch(), 'exited');
    expect(await registry.eval('mark', [Value.text(marker)])).toEqual(Value.number(1));
    const pids = runner.workerPids();
    expect(pids).toHaveLength(1);
    await registry.close();
    expect(readFileSync(marker, 'utf8')).toBe('bye'); // atexit ran: the driver ended by itself
    for (const pid of pids) expect(alive(pid)).toBe(false);
    expect(runner.workerPids()).toEqual([]);
  });

  test('an idle shutdown is graceful too', async () => {
    const { registry, runner } = fixtureRegistry(
      { mark: [MARK_AT_EXIT, ['text'], 'number'] },
      { policy: 'trusted', idleMs: 100 },
    );
    cleanups.push(() => registry.close());
    const marker = join(scratch(), 'exited');
    await registry.eval('mark', [Value.text(marker)]);
    const [pid] = runner.workerPids();
    expect(await waitFor(() => existsSync(marker) && !alive(pid!))).toBe(true);
    expect(runner.stats()).toMatchObject({ live: 0, killed: 0 });
  });

  test('an evicted worker exits gracefully, and its slot is taken until it is gone', async () => {
    const { registry, runner } = fixtureRegistry(
      {
        mark: [MARK_AT_EXIT, ['text'], 'number'],
        other: ['result = 2', [], 'number'],
      },
      { policy: 'trusted', maxWorkers: 1, maxLiveWorkers: 1 },
    );
    cleanups.push(() => registry.close());
    const marker = join(scratch(), 'evicted');
    await registry.eval('mark', [Value.text(marker)]);
    const [first] = runner.workerPids();
    let most = 0;
    const sampler = setInterval(() => {
      most = Math.max(most, runner.workerPids().length);
    }, 1);
    try {
      expect(await registry.eval('other', [])).toEqual(Value.number(2));
    } finally {
      clearInterval(sampler);
    }
    expect(readFileSync(marker, 'utf8')).toBe('bye');
    expect(alive(first!)).toBe(false);
    expect(most).toBeLessThanOrEqual(1);
    expect(runner.stats()).toMatchObject({ peak: 1, live: 1, killed: 0 });
  });

  test('a driver that does not exit is killed after the grace: close() still returns promptly', async () => {
    const { registry, runner } = fixtureRegistry(
      {
        stuck: ['import atexit\natexit.register(lambda: time.sleep(30))\nresult = 1', [], 'number'],
      },
      { policy: 'trusted' },
    );
    cleanups.push(() => registry.close());
    await registry.eval('stuck', []);
    const [pid] = runner.workerPids();
    const started = performance.now();
    await registry.close();
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(alive(pid!)).toBe(false);
  });
});

const RSCRIPT = '/usr/bin/Rscript';
const hasR = existsSync(RSCRIPT);
/** The same kind of bootstrap @improv/extfn-r uses: one binary stdin connection for the whole worker. */
const R_BOOTSTRAP =
  'local({con<-file("stdin","rb");n<-as.integer(readLines(con,1L));' +
  'src<-rawToChar(readBin(con,"raw",n));Encoding(src)<-"UTF-8";' +
  'eval(parse(text=src,keep.source=FALSE)[[1L]],new.env(parent=baseenv()))(con)},' +
  'new.env(parent=baseenv()))';

describe('graceful exits with R', () => {
  test.skipIf(!hasR)(
    `close() under policy trusted leaves no /tmp/Rtmp* behind${hasR ? '' : ' (skipped: Rscript absent)'}`,
    async () => {
      const runner = createInterpreterRunner(
        {
          language: 'fixture-r',
          packageName: '@improv/extfn-fixture-r',
          resolveInterpreter: async () => ({ path: RSCRIPT }),
          args: ['--vanilla', '-e', R_BOOTSTRAP],
          driverSource: readFileSync(new URL('./fixtures/driver.R', import.meta.url), 'utf8'),
          limits: { openFiles: 256 },
        },
        { policy: 'trusted', maxWorkers: 2 },
      );
      const registry = new Registry({ runners: [runner], timeoutMs: 20_000 });
      cleanups.push(() => registry.close());
      for (const name of ['a', 'b']) {
        registry.register({
          name,
          language: 'fixture-r',
          body: name,
          argTypes: [],
          returnType: 'text',
          pure: false,
        });
      }
      // Two workers, each with its own session temp dir on the host's /tmp.
      const dirs = await Promise.all(
        ['a', 'b'].map(
          async (name) => ((await registry.eval(name, [])) as { value: string }).value,
        ),
      );
      expect(dirs).toHaveLength(2);
      for (const dir of dirs) {
        expect(dir).toMatch(/^\/tmp\/Rtmp/);
        expect(existsSync(dir), dir).toBe(true);
      }
      const pids = runner.workerPids();
      expect(pids).toHaveLength(2);
      await registry.close();
      for (const dir of dirs) expect(existsSync(dir), `${dir} after close()`).toBe(false);
      for (const pid of pids) expect(alive(pid), `worker ${pid}`).toBe(false);
    },
  );
});
