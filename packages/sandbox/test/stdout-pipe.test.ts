/** stdoutPipe: fd 1 a FIFO the child can reopen through /proc, reachable by no path. */
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { describe, expect, test } from 'vitest';
import { type SandboxPolicy, spawnSandboxed } from '../src/index.js';
import { hasBwrap, hasPython, isRoot, linux, PYTHON, python } from './helpers.js';

const policies: Array<[SandboxPolicy, boolean]> = [
  ['restricted', linux && hasBwrap && hasPython],
  ['unsandboxed', linux && isRoot && hasPython],
  ['trusted', linux && hasPython],
];

/** Reopens its own stdout for writing and reading, and tries the path it was made at. */
const REOPEN = `
link = os.readlink('/proc/self/fd/1')
def write():
    with open('/proc/self/fd/1', 'wb') as f:
        f.write(b'written through the reopened fd\\n')
    return True
report = {
    'link': link,
    'write': attempt(write),
    'read': attempt(lambda: open('/proc/self/fd/1', 'rb').close()),
    'path': attempt(lambda: open(link.removesuffix(' (deleted)'), 'wb').close()),
    'uid': os.getuid(),
}
print(json.dumps(report))
`;

const fifoDirs = () => readdirSync(tmpdir()).filter((name) => name.startsWith('extfn-stdout-'));

/**
 * FIFO directories made since `before` and still there 300 ms later: a leak
 * stays, while another test file's tree (spawner.test.ts runs alongside)
 * removes its own within milliseconds, before its child starts.
 */
async function leftSince(before: string[]): Promise<string[]> {
  const now = fifoDirs().filter((name) => !before.includes(name));
  if (now.length === 0) return [];
  await new Promise((resolve) => setTimeout(resolve, 300));
  const later = fifoDirs();
  return now.filter((name) => later.includes(name));
}

describe.each(policies)('stdoutPipe (%s)', (policy, available) => {
  test.skipIf(!available)(
    'the child reopens /proc/self/fd/1 for writing with the option, and cannot without',
    async () => {
      const piped = await python(REOPEN, { policy, stdoutPipe: true });
      expect(piped.exitCode, piped.stderr).toBe(0);
      const [written, json] = piped.stdout.toString().split('\n');
      expect(written).toBe('written through the reopened fd');
      const report = JSON.parse(json!);
      expect(report.write).toEqual({ ok: true });
      expect(report.link).toMatch(/ \(deleted\)$/);
      // A path that no longer exists: nothing new is reachable through the FIFO's name.
      expect(report.path).toEqual({ errno: 'ENOENT' });
      // Write-only (0200): a body cannot read its own frames back (root ignores the mode).
      if (report.uid !== 0) expect(report.read).toEqual({ errno: 'EACCES' });

      const socket = await python(REOPEN, { policy });
      expect(socket.exitCode, socket.stderr).toBe(0);
      const plain = JSON.parse(socket.stdout.toString());
      expect(plain.link).toMatch(/^socket:/);
      expect(plain.write).toEqual({ errno: 'ENXIO' });
    },
  );

  test.skipIf(!available)(
    'a long-lived tree talks over it; the stream ends with the tree; no FIFO is left on disk',
    async () => {
      const before = fifoDirs();
      const worker = spawnSandboxed({
        command: PYTHON,
        args: [
          '-I',
          '-S',
          '-c',
          'import sys\nout = open("/proc/self/fd/1", "wb", buffering=0)\nfor line in sys.stdin.buffer:\n    out.write(line.upper())',
        ],
        policy,
        stdoutPipe: true,
      });
      // made and unlinked before the child started
      expect(await leftSince(before)).toEqual([]);
      const chunks: Buffer[] = [];
      const ended = new Promise<void>((resolve) => worker.stdout.once('end', () => resolve()));
      worker.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
      worker.stdin.write('one\ntwo\n');
      worker.stdin.end();
      expect(await worker.exited).toEqual({ exitCode: 0, signal: null });
      await ended;
      expect(Buffer.concat(chunks).toString()).toBe('ONE\nTWO\n');
      expect(await leftSince(before)).toEqual([]);
    },
  );
});
