/**
 * A classic-BPF seccomp program for bwrap's `--seccomp FD`, generated here so
 * no libseccomp is needed. It denies what no function body needs (debugging
 * other processes, mounting, new namespaces, the kernel keyring, eBPF, perf,
 * userfaultfd, io_uring, module and kexec loading, terminal injection, file
 * handles, execution domains other than Linux's),
 * makes memory no rlimit counts unavailable (SysV IPC, memfds) and kills a process that enters the kernel through another ABI (i386 `int 0x80`,
 * x32, arm32), because syscall numbers differ there and the list would not apply.
 */

export type SeccompArch = 'x86_64' | 'aarch64';

const AUDIT_ARCH = { x86_64: 0xc000003e, aarch64: 0xc00000b7 } as const;
const X32_SYSCALL_BIT = 0x40000000;

// BPF opcodes (linux/filter.h)
const LD_W_ABS = 0x20;
const JMP_JEQ_K = 0x15;
const JMP_JGE_K = 0x35;
const JMP_JSET_K = 0x45;
const RET_K = 0x06;

const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const RET_ALLOW = 0x7fff0000;
const EPERM = 1;
const ENOSYS = 38;

// offsets in struct seccomp_data (little-endian: low word of an argument first)
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const offsetArgLow = (index: number) => 16 + 8 * index;

/** Denied with EPERM. Names → numbers per architecture (asm/unistd_64.h, asm-generic/unistd.h). */
const DENIED: Record<string, { x86_64: number; aarch64: number }> = {
  ptrace: { x86_64: 101, aarch64: 117 },
  process_vm_readv: { x86_64: 310, aarch64: 270 },
  process_vm_writev: { x86_64: 311, aarch64: 271 },
  // the rest of what needs ptrace access to a process: comparing its kernel
  // objects, taking its descriptors, advising on its memory
  kcmp: { x86_64: 312, aarch64: 272 },
  pidfd_getfd: { x86_64: 438, aarch64: 438 },
  process_madvise: { x86_64: 440, aarch64: 440 },
  mount: { x86_64: 165, aarch64: 40 },
  umount2: { x86_64: 166, aarch64: 39 },
  pivot_root: { x86_64: 155, aarch64: 41 },
  chroot: { x86_64: 161, aarch64: 51 },
  open_tree: { x86_64: 428, aarch64: 428 },
  move_mount: { x86_64: 429, aarch64: 429 },
  fsopen: { x86_64: 430, aarch64: 430 },
  fsconfig: { x86_64: 431, aarch64: 431 },
  fsmount: { x86_64: 432, aarch64: 432 },
  fspick: { x86_64: 433, aarch64: 433 },
  mount_setattr: { x86_64: 442, aarch64: 442 },
  unshare: { x86_64: 272, aarch64: 97 },
  setns: { x86_64: 308, aarch64: 268 },
  keyctl: { x86_64: 250, aarch64: 219 },
  add_key: { x86_64: 248, aarch64: 217 },
  request_key: { x86_64: 249, aarch64: 218 },
  bpf: { x86_64: 321, aarch64: 280 },
  perf_event_open: { x86_64: 298, aarch64: 241 },
  userfaultfd: { x86_64: 323, aarch64: 282 },
  io_uring_setup: { x86_64: 425, aarch64: 425 },
  io_uring_enter: { x86_64: 426, aarch64: 426 },
  io_uring_register: { x86_64: 427, aarch64: 427 },
  kexec_load: { x86_64: 246, aarch64: 104 },
  kexec_file_load: { x86_64: 320, aarch64: 294 },
  init_module: { x86_64: 175, aarch64: 105 },
  finit_module: { x86_64: 313, aarch64: 273 },
  delete_module: { x86_64: 176, aarch64: 106 },
  open_by_handle_at: { x86_64: 304, aarch64: 265 },
  name_to_handle_at: { x86_64: 303, aarch64: 264 },
  lookup_dcookie: { x86_64: 212, aarch64: 18 },
  acct: { x86_64: 163, aarch64: 89 },
  quotactl: { x86_64: 179, aarch64: 60 },
  swapon: { x86_64: 167, aarch64: 224 },
  swapoff: { x86_64: 168, aarch64: 225 },
  reboot: { x86_64: 169, aarch64: 142 },
  syslog: { x86_64: 103, aarch64: 116 },
  vhangup: { x86_64: 153, aarch64: 58 },
};

export const DENIED_SYSCALLS: readonly string[] = Object.keys(DENIED);

/**
 * Answered with ENOSYS, as a kernel built without them would: memory these
 * create is counted by no rlimit (a SysV segment outlives its mapping, a
 * memfd its descriptor once mapped or passed on). Programs that use them
 * check for ENOSYS and fall back (POSIX shared memory lives in /dev/shm,
 * which is size-limited).
 */
const UNAVAILABLE: Record<string, { x86_64: number; aarch64: number }> = {
  shmget: { x86_64: 29, aarch64: 194 },
  shmat: { x86_64: 30, aarch64: 196 },
  msgget: { x86_64: 68, aarch64: 186 },
  msgsnd: { x86_64: 69, aarch64: 189 },
  semget: { x86_64: 64, aarch64: 190 },
  memfd_create: { x86_64: 319, aarch64: 279 },
  memfd_secret: { x86_64: 447, aarch64: 447 },
};

export const UNAVAILABLE_SYSCALLS: readonly string[] = Object.keys(UNAVAILABLE);

const IOCTL = { x86_64: 16, aarch64: 29 };
const PERSONALITY = { x86_64: 135, aarch64: 92 };
/**
 * personality() values let through, as Docker's default profile does: Linux
 * (0), its 32-bit view (PER_LINUX32), UNAME26, and the query (0xffffffff).
 * Anything else (ADDR_NO_RANDOMIZE turning ASLR off for what the body
 * execs, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO, other execution domains) is denied.
 */
const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];
const CLONE = { x86_64: 56, aarch64: 220 };
const CLONE3 = { x86_64: 435, aarch64: 435 };
/** ioctl requests that push input into, or reprogram, the controlling terminal. */
const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;
/** clone() flags that create namespaces (CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET). */
const CLONE_NAMESPACE_FLAGS = 0x7e020000;

interface Instruction {
  code: number;
  jt: number | string;
  jf: number | string;
  k: number;
}

const stmt = (code: number, k: number): Instruction => ({ code, jt: 0, jf: 0, k });
const jump = (code: number, k: number, jt: number | string, jf: number | string): Instruction => ({
  code,
  jt,
  jf,
  k,
});

/**
 * What the zygote's relaxed program lets through (see `seccompProgram`):
 * it makes each worker's namespaces, mounts its /tmp and /proc there, and
 * then stacks the strict program in the worker before any body runs.
 */
const ZYGOTE_ALLOWED = new Set(['unshare', 'mount']);

function archBlock(arch: SeccompArch, zygote: boolean): Array<Instruction | string> {
  const deny = `${arch}:deny`;
  const out: Array<Instruction | string> = [`${arch}:start`, stmt(LD_W_ABS, OFFSET_NR)];
  if (arch === 'x86_64') out.push(jump(JMP_JGE_K, X32_SYSCALL_BIT, `${arch}:kill`, 0));
  for (const [name, numbers] of Object.entries(DENIED)) {
    if (!(zygote && ZYGOTE_ALLOWED.has(name))) out.push(jump(JMP_JEQ_K, numbers[arch], deny, 0));
  }
  out.push(jump(JMP_JEQ_K, CLONE3[arch], `${arch}:enosys`, 0));
  for (const numbers of Object.values(UNAVAILABLE))
    out.push(jump(JMP_JEQ_K, numbers[arch], `${arch}:enosys`, 0));
  out.push(jump(JMP_JEQ_K, IOCTL[arch], `${arch}:ioctl`, 0));
  out.push(jump(JMP_JEQ_K, PERSONALITY[arch], `${arch}:personality`, 0));
  // the zygote's clone may create namespaces: no flag check
  if (!zygote) out.push(jump(JMP_JEQ_K, CLONE[arch], `${arch}:clone`, 0));
  out.push(stmt(RET_K, RET_ALLOW));
  // ioctl(fd, request): the kernel compares the request as 32 bits, so do we
  out.push(`${arch}:ioctl`, stmt(LD_W_ABS, offsetArgLow(1)));
  out.push(jump(JMP_JEQ_K, TIOCSTI, deny, 0));
  out.push(jump(JMP_JEQ_K, TIOCLINUX, deny, 0));
  out.push(stmt(RET_K, RET_ALLOW));
  // personality(persona): an unsigned int, so the low word is all the kernel reads
  out.push(`${arch}:personality`, stmt(LD_W_ABS, offsetArgLow(0)));
  for (const persona of PERSONALITIES) out.push(jump(JMP_JEQ_K, persona, `${arch}:persona`, 0));
  out.push(stmt(RET_K, RET_ERRNO | EPERM));
  out.push(`${arch}:persona`, stmt(RET_K, RET_ALLOW));
  // clone(flags, …) on both architectures: no new namespaces
  if (!zygote) {
    out.push(`${arch}:clone`, stmt(LD_W_ABS, offsetArgLow(0)));
    out.push(jump(JMP_JSET_K, CLONE_NAMESPACE_FLAGS, deny, 0));
    out.push(stmt(RET_K, RET_ALLOW));
  }
  // clone3 passes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone;
  // SysV IPC and memfds: see UNAVAILABLE
  out.push(`${arch}:enosys`, stmt(RET_K, RET_ERRNO | ENOSYS));
  out.push(deny, stmt(RET_K, RET_ERRNO | EPERM));
  out.push(`${arch}:kill`, stmt(RET_K, RET_KILL_PROCESS));
  return out;
}

/**
 * The program as `struct sock_filter[]` bytes, in host byte order.
 * `zygote: true` is the relaxed program of a Python zygote (zygote.ts):
 * `unshare`, `mount` and clone's namespace flags let through, everything
 * else as strict. It never runs a body: every worker it clones stacks the
 * strict program (which the zygote reads from its directory) on top.
 */
export function seccompProgram(options: { zygote?: boolean } = {}): Uint8Array {
  const zygote = options.zygote === true;
  const items: Array<Instruction | string> = [
    stmt(LD_W_ABS, OFFSET_ARCH),
    jump(JMP_JEQ_K, AUDIT_ARCH.x86_64, 'x86_64:start', 0),
    jump(JMP_JEQ_K, AUDIT_ARCH.aarch64, 'aarch64:start', 0),
    stmt(RET_K, RET_KILL_PROCESS),
    ...archBlock('x86_64', zygote),
    ...archBlock('aarch64', zygote),
  ];
  const labels = new Map<string, number>();
  const program: Instruction[] = [];
  for (const item of items) {
    if (typeof item === 'string') labels.set(item, program.length);
    else program.push(item);
  }
  const bytes = new Uint8Array(program.length * 8);
  const view = new DataView(bytes.buffer);
  const little = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  program.forEach((instruction, index) => {
    const offset = (target: number | string): number => {
      if (typeof target === 'number') return target;
      const at = labels.get(target);
      // classic BPF only jumps forward, by at most 255 instructions
      const distance = at === undefined ? -1 : at - index - 1;
      if (distance < 0 || distance > 255) throw new Error(`seccomp: cannot jump to ${target}`);
      return distance;
    };
    view.setUint16(index * 8, instruction.code, little);
    view.setUint8(index * 8 + 2, offset(instruction.jt));
    view.setUint8(index * 8 + 3, offset(instruction.jf));
    view.setUint32(index * 8 + 4, instruction.k >>> 0, little);
  });
  return bytes;
}

/** The architectures this filter knows; elsewhere Restricted runs without the seccomp layer. */
export function seccompArch(arch: string = process.arch): SeccompArch | undefined {
  if (arch === 'x64') return 'x86_64';
  if (arch === 'arm64') return 'aarch64';
  return undefined;
}
