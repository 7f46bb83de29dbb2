/**
 * sharedFile: a descriptor the host opened reaches the child as the
 * descriptor IMPROV_EXTFN_SHARED_FD names, which the child can read, write
 * and reopen through /proc/self/fd; RLIMIT_FSIZE keeps it from growing the
 * file (the policies that set rlimits); without the option there is neither.
 */
import { closeSync, fstatSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, test } from 'vitest';
import { DEFAULT_LIMITS, type SandboxPolicy } from '../src/index.js';
import { hasBwrap, hasPython, isRoot, linux, pythonJson } from './helpers.js';

const policies: Array<[SandboxPolicy, boolean]> = [
  ['restricted', linux && hasBwrap && hasPython],
  ['unsandboxed', linux && isRoot && hasPython],
];

/** Reads the shared descriptor, writes through a reopened one, and tries to grow the file. */
const USE = `
name = os.environ.get('IMPROV_EXTFN_SHARED_FD')
report = {'name': name}
if name is not None:
    fd = int(name)
    report['read'] = attempt(lambda: os.pread(fd, 5, 0).decode())
    def reopen():
        with open('/proc/self/fd/%d' % fd, 'r+b') as f:
            f.seek(5)
            f.write(b' world')
        return True
    report['reopen'] = attempt(reopen)
    report['grow'] = attempt(lambda: os.ftruncate(fd, 1 << 30))
    report['size'] = os.fstat(fd).st_size
print(json.dumps(report))
`;

const opened: number[] = [];
afterEach(() => {
  for (const fd of opened.splice(0)) closeSync(fd);
});

describe.each(policies)('sharedFile (%s)', (policy, available) => {
  test.skipIf(!available)(
    'the child reads it, writes it through /proc/self/fd, and cannot grow it past RLIMIT_FSIZE',
    async () => {
      const path = join(tmpdir(), `extfn-shared-test-${process.pid}-${Date.now()}`);
      const fd = openSync(path, 'wx+', 0o600);
      opened.push(fd);
      unlinkSync(path);
      writeSync(fd, 'hello');
      const report = await pythonJson<Record<string, unknown>>(USE, policy, { sharedFile: fd });
      expect(report.name).toMatch(/^[34]$/);
      expect(report.read).toEqual({ ok: 'hello' });
      expect(report.reopen).toEqual({ ok: true });
      expect(report.grow).toEqual({ errno: 'EFBIG' });
      expect(report.size).toBeLessThanOrEqual(DEFAULT_LIMITS.fileSizeBytes);
      const back = Buffer.alloc(11);
      readSync(fd, back, 0, 11, 0);
      expect(back.toString()).toBe('hello world');
      expect(fstatSync(fd).size).toBe(11);

      const without = await pythonJson<Record<string, unknown>>(USE, policy);
      expect(without).toEqual({ name: null });
    },
  );
});
