/**
 * The zygote's relaxed seccomp program against the strict one, run through
 * a small classic-BPF interpreter for every syscall number on both
 * architectures: they differ only in unshare, mount and clone with
 * namespace flags, which the strict program refuses and the relaxed one lets through.
 */
import { describe, expect, test } from 'vitest';
import { seccompProgram } from '../src/seccomp.js';

const ARCH = { x86_64: 0xc000003e, aarch64: 0xc00000b7 } as const;
const NUMBERS = {
  x86_64: { unshare: 272, mount: 165, clone: 56, umount2: 166, setns: 308, ptrace: 101 },
  aarch64: { unshare: 97, mount: 40, clone: 220, umount2: 39, setns: 268, ptrace: 117 },
} as const;
const CLONE_NEWUSER = 0x10000000;
const CLONE_NEWNET = 0x40000000;
const SIGCHLD = 17;
const ALLOW = 0x7fff0000;
const EPERM = 0x00050001;

/** Runs `program` on seccomp_data { nr, arch, args[0] }: the action it returns. */
function run(program: Uint8Array, arch: number, nr: number, arg0 = 0): number {
  const view = new DataView(program.buffer, program.byteOffset, program.byteLength);
  const data = new DataView(new ArrayBuffer(64));
  data.setUint32(0, nr, true);
  data.setUint32(4, arch, true);
  data.setUint32(16, arg0 >>> 0, true);
  let a = 0;
  for (let pc = 0; pc < program.length / 8; pc++) {
    const code = view.getUint16(pc * 8, true);
    const jt = view.getUint8(pc * 8 + 2);
    const jf = view.getUint8(pc * 8 + 3);
    const k = view.getUint32(pc * 8 + 4, true);
    if (code === 0x20) a = data.getUint32(k, true);
    else if (code === 0x06) return k;
    else if (code === 0x15) pc += a === k ? jt : jf;
    else if (code === 0x35) pc += a >= k ? jt : jf;
    else if (code === 0x45) pc += (a & k) !== 0 ? jt : jf;
    else throw new Error(`unknown opcode ${code.toString(16)} at ${pc}`);
  }
  throw new Error('fell off the end');
}

describe('seccomp: the zygote program', () => {
  const strict = seccompProgram();
  const relaxed = seccompProgram({ zygote: true });

  for (const name of ['x86_64', 'aarch64'] as const) {
    const arch = ARCH[name];
    const n = NUMBERS[name];
    test(`${name}: strict refuses unshare, mount and clone into namespaces; the zygote's allows them`, () => {
      for (const program of [strict, relaxed]) {
        expect(run(program, arch, n.clone, SIGCHLD)).toBe(ALLOW); // a plain fork
      }
      expect(run(strict, arch, n.unshare, CLONE_NEWUSER)).toBe(EPERM);
      expect(run(strict, arch, n.mount)).toBe(EPERM);
      expect(run(strict, arch, n.clone, CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD)).toBe(EPERM);
      expect(run(relaxed, arch, n.unshare, CLONE_NEWUSER)).toBe(ALLOW);
      expect(run(relaxed, arch, n.mount)).toBe(ALLOW);
      expect(run(relaxed, arch, n.clone, CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD)).toBe(ALLOW);
      // still refused in the zygote
      for (const other of [n.umount2, n.setns, n.ptrace]) {
        expect(run(relaxed, arch, other)).toBe(EPERM);
      }
    });

    test(`${name}: personality() only to Linux's own personas and the query, in both`, () => {
      const nr = name === 'x86_64' ? 135 : 92;
      for (const program of [strict, relaxed]) {
        for (const persona of [0, 0x8, 0x20000, 0x20008, 0xffffffff]) {
          expect(run(program, arch, nr, persona)).toBe(ALLOW);
        }
        // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, another execution domain
        for (const persona of [0x0040000, 0x0400000, 0x0100000, 0x0040008, 0x1]) {
          expect(run(program, arch, nr, persona)).toBe(EPERM);
        }
      }
    });

    test(`${name}: the two differ nowhere else`, () => {
      const differ: number[] = [];
      for (let nr = 0; nr < 1024; nr++) {
        for (const arg0 of [0, SIGCHLD, CLONE_NEWUSER, 0x5412]) {
          if (run(strict, arch, nr, arg0) !== run(relaxed, arch, nr, arg0)) differ.push(nr);
        }
      }
      expect([...new Set(differ)].sort((x, y) => x - y)).toEqual(
        [n.unshare, n.mount, n.clone].sort((x, y) => x - y),
      );
      // another ABI is killed by both
      expect(run(relaxed, 0x40000003, 1)).toBe(0x80000000);
      expect(run(relaxed, arch, name === 'x86_64' ? 0x40000001 : 0)).toBe(
        name === 'x86_64' ? 0x80000000 : ALLOW,
      );
    });
  }
});
