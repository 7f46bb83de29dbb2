/**
 * The host side of a zygote (zygote.ts) with stand-in zygote programs, no
 * driver: the tree it runs in (the relaxed filter lets the zygote unshare,
 * its directory is bound read-write), and its failures: a zygote that never
 * gets ready, and one that dies with a start in flight, fail with a typed
 * Sandbox error naming the function. The real zygote (drivers/zygote.py) is
 * tested end to end in packages/python/test/zygote.test.ts.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExtFnError } from '@improv/extfn-core';
import { describe, expect, test } from 'vitest';
import { seccompProgram } from '../src/seccomp.js';
import { hostIsRoot } from '../src/uid-pool.js';
import { sweepDeadHosts, Zygote } from '../src/zygote.js';
import { PYTHON } from './helpers.js';
import { available, BOOT, why } from './zygote-stand-in.js';

function start(program: string, startupMs = 10_000) {
  return Zygote.start({
    command: PYTHON,
    args: ['-s', '-S', '-B', '-c', BOOT],
    program,
    maxWorkers: 2,
    functionName: 'zyg_fn',
    startupMs,
  });
}

describe.skipIf(!available)(`zygote host side ${available ? '' : why}`, () => {
  test('the tree: relaxed filter (it may unshare), its directory read-write, the strict filter there', async () => {
    const program = [
      'import ctypes, json, os',
      'libc = ctypes.CDLL(None, use_errno=True)',
      // CLONE_NEWUSER, refused under the strict filter; in a child, so the zygote stays as it is
      'pid = os.fork()',
      'if pid == 0:',
      '    os._exit(0 if libc.unshare(0x10000000) == 0 else ctypes.get_errno())',
      'rc = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])',
      "d = os.environ.get('IMPROV_EXTFN_ZYGOTE_DIR')",
      "size = os.path.getsize(d + '/strict.bpf')",
      "open(d + '/facts', 'w').write(json.dumps([rc, d, size, sorted(os.listdir(d))]))",
      "print(json.dumps({'zygote': 'ready'}), flush=True)",
      'import sys; sys.stdin.readline()',
    ].join('\n');
    const zygote = await start(program);
    try {
      expect(zygote.alive).toBe(true);
      // written from inside: unshare(CLONE_NEWUSER) allowed, the strict program and the socket there
      const facts = JSON.parse(readFileSync(`${zygote.dir}/facts`, 'utf8'));
      expect(facts).toEqual([
        0,
        '/run/extfn-zygote',
        seccompProgram().length,
        ['facts', 's', 'strict.bpf'],
      ]);
    } finally {
      await zygote.close();
    }
    expect(zygote.alive).toBe(false);
    expect(existsSync(zygote.dir)).toBe(false); // removed with it
    expect(zygote.dir).toMatch(new RegExp(`/extfn-zygote-${process.pid}-[^/]+$`)); // named for its host
  });

  test('a zygote that never gets ready: a Sandbox error naming the function', async () => {
    const error = await start('import time\ntime.sleep(30)', 1500).catch((e) => e);
    expect(ExtFnError.isInstance(error)).toBe(true);
    expect(error.kind).toBe('Sandbox');
    expect(error.message).toContain('function zyg_fn:');
    expect(error.message).toMatch(/did not start.*no ready line/);
  });

  test('a zygote that dies with a start in flight: that start fails with a Sandbox error naming its function', async () => {
    const program = [
      'import json, os, sys',
      "print(json.dumps({'zygote': 'ready'}), flush=True)",
      'sys.stdin.readline()',
      "sys.stderr.write('stand-in zygote: gone\\n')",
      'os._exit(9)',
    ].join('\n');
    const zygote = await start(program);
    const error = await zygote
      .fork({ functionName: 'worker_fn', startupMs: 10_000 })
      .catch((e) => e);
    expect(ExtFnError.isInstance(error)).toBe(true);
    expect(error.kind).toBe('Sandbox');
    expect(error.message).toContain('function worker_fn:');
    expect(error.message).toContain('exited (code 9)');
    expect(zygote.alive).toBe(false);
    const again = await zygote.fork({ functionName: 'next_fn', startupMs: 1000 }).catch((e) => e);
    expect(again.kind).toBe('Sandbox');
    expect(again.message).toContain('function next_fn:');
    await zygote.close();
  });

  test('a worker joins its cgroup (root host) as soon as its pid is answered, before it dials back', async () => {
    // The stand-in's worker waits (WAIT=1) until its cgroup changes, then dials
    // back and says whether it changed: a join that waited for the dial-back
    // would never come first (its cgroup v1 grace period would follow the
    // worker's steps instead of overlapping them).
    const program = [
      'import json, os, socket, sys, time',
      "print(json.dumps({'zygote': 'ready'}), flush=True)",
      'while True:',
      '    line = sys.stdin.readline()',
      '    if not line: os._exit(0)',
      '    req = json.loads(line)',
      "    before = open('/proc/self/cgroup').read()",
      '    pid = os.fork()',
      '    if pid == 0:',
      '        deadline = time.monotonic() + 5',
      "        while req['env'].get('WAIT') == '1' and time.monotonic() < deadline:",
      "            if open('/proc/self/cgroup').read() != before: break",
      '            time.sleep(0.005)',
      "        joined = open('/proc/self/cgroup').read() != before",
      '        conns = []',
      "        for stream in ('stdio', 'stderr'):",
      '            s = socket.socket(socket.AF_UNIX)',
      "            s.connect('/run/extfn-zygote/s')",
      "            s.sendall(('%s %s\\n' % (req['token'], stream)).encode())",
      '            conns.append(s)',
      "        conns[0].sendall(b'joined\\n' if joined else b'not joined\\n')",
      '        time.sleep(30)',
      '        os._exit(0)',
      "    print(json.dumps({'id': req['id'], 'pid': pid}), flush=True)",
    ].join('\n');
    const zygote = await start(program);
    try {
      const own = (pid: number) => readFileSync(`/proc/${pid}/cgroup`, 'utf8');
      const cgroups = hostIsRoot() && own(zygote.pid!).includes('/tree-');
      const worker = await zygote.fork({
        functionName: 'worker_fn',
        startupMs: 10_000,
        env: { WAIT: cgroups ? '1' : '0' },
      });
      try {
        const said = await new Promise<string>((resolve) => {
          let text = '';
          worker.stdout.on('data', (chunk: Buffer) => {
            text += chunk.toString('utf8');
            if (text.includes('\n')) resolve(text.trim());
          });
        });
        // without cgroups (not root, or none offered) there is nothing to join
        expect(said).toBe(cgroups ? 'joined' : 'not joined');
        if (cgroups) expect(own(worker.pid!)).not.toBe(own(zygote.pid!));
      } finally {
        await worker.kill();
      }
    } finally {
      await zygote.close();
    }
  }, 30_000);
});

describe.skipIf(!available)(`a host awaiting a zygote ${available ? '' : why}`, () => {
  test('its start and close() settle before the host exits, however idle the host is', async () => {
    // A subprocess, since vitest itself keeps this process's event loop alive.
    const script = new URL('./fixtures/zygote-await-start.mjs', import.meta.url).pathname;
    const child = spawn(process.execPath, [script, PYTHON], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
    });
    child.stderr.on('data', (chunk) => {
      err += chunk;
    });
    const code = await new Promise((resolve) => child.on('exit', resolve));
    // exit 13 with only 'starting': Node saw nothing holding its loop mid-start
    expect({ code, out: out.trim().split('\n'), err }).toEqual({
      code: 0,
      out: ['starting', 'ready true', 'closed false'],
      err: '',
    });
  }, 30_000);
});

describe('zygote directories of dead hosts', () => {
  test('swept: those of a host pid that is gone, not those of a live host nor other names', () => {
    const parent = mkdtempSync(join(tmpdir(), 'extfn-sweep-'));
    try {
      const gone = spawnSync('true').pid; // a pid that has exited
      const names = [
        `extfn-zygote-${gone}-abc`,
        `extfn-zygote-${process.ppid}-def`, // a live host (this test's parent)
        `extfn-zygote-${process.pid}-ghi`, // this host's own
        'extfn-zygote-jkl', // not named for a host
        `other-${gone}-mno`,
      ];
      for (const name of names) mkdirSync(join(parent, name, 'inner'), { recursive: true });
      sweepDeadHosts(parent);
      expect(names.map((name) => existsSync(join(parent, name)))).toEqual([
        false,
        true,
        true,
        true,
        true,
      ]);
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });
});
