/**
 * A small reader for the parts of a WebAssembly binary this runner must judge
 * before anything runs: imports (refused), memories and tables (capped), and
 * the exact type of the `improv_call` export. It also rewrites memory and
 * table limits so that growth stops at the ceiling: V8 enforces a declared
 * maximum, while a Worker's resourceLimits does not cap Wasm memory.
 */

export type ValType = 'i32' | 'i64' | 'f32' | 'f64' | 'v128' | 'funcref' | 'externref';

export interface FuncType {
  params: ValType[];
  results: ValType[];
}

export interface Limits {
  min: number;
  max?: number;
  shared: boolean;
  memory64: boolean;
}

export interface ModuleImport {
  module: string;
  name: string;
  kind: string;
}

export interface ModuleExport {
  name: string;
  kind: 'function' | 'table' | 'memory' | 'global' | 'tag';
  index: number;
}

interface Section {
  id: number;
  /** Offset of the section's id byte in the binary. */
  start: number;
  /** Offset of the payload (after id and size). */
  payload: number;
  end: number;
}

export interface ModuleInfo {
  types: FuncType[];
  imports: ModuleImport[];
  /** Type index of each function defined in the module (imports are refused, so none precede them). */
  functions: number[];
  memories: Limits[];
  tables: { element: ValType; limits: Limits }[];
  /** Number of mutable globals defined by the module. */
  mutableGlobals: number;
  exports: ModuleExport[];
  hasStart: boolean;
  sections: Section[];
}

/** Thrown for a binary this reader cannot follow; the caller reports V8's own message when it has one. */
export class BinaryFormatError extends Error {
  override name = 'BinaryFormatError';
}

const VALTYPES: Record<number, ValType> = {
  127: 'i32',
  126: 'i64',
  125: 'f32',
  124: 'f64',
  123: 'v128',
  112: 'funcref',
  111: 'externref',
};
const EXTERNAL_KINDS = ['function', 'table', 'memory', 'global', 'tag'] as const;

class Reader {
  offset: number;
  constructor(
    readonly bytes: Uint8Array,
    offset = 0,
    readonly end = bytes.length,
  ) {
    this.offset = offset;
  }

  byte(): number {
    if (this.offset >= this.end)
      throw new BinaryFormatError(`unexpected end of module at byte ${this.offset}`);
    return this.bytes[this.offset++]!;
  }

  /** Unsigned LEB128, up to 64 bits (as a JS number: exact up to 2^53). */
  leb(): number {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      const b = this.byte();
      result += (b & 0x7f) * scale;
      if ((b & 0x80) === 0) return result;
      scale *= 128;
    }
    throw new BinaryFormatError(`LEB128 number too long at byte ${this.offset}`);
  }

  name(): string {
    const length = this.leb();
    if (this.offset + length > this.end) throw new BinaryFormatError('name runs past its section');
    const text = new TextDecoder().decode(this.bytes.subarray(this.offset, this.offset + length));
    this.offset += length;
    return text;
  }

  valtype(): ValType {
    const code = this.byte();
    const type = VALTYPES[code];
    if (!type) throw new BinaryFormatError(`unsupported value type 0x${code.toString(16)}`);
    return type;
  }

  limits(): Limits {
    const flags = this.byte();
    if (flags > 0x07)
      throw new BinaryFormatError(`unsupported limits flags 0x${flags.toString(16)}`);
    const min = this.leb();
    const limits: Limits = { min, shared: (flags & 0x02) !== 0, memory64: (flags & 0x04) !== 0 };
    if (flags & 0x01) limits.max = this.leb();
    return limits;
  }
}

/** Reads the sections this runner needs. Throws BinaryFormatError on anything it cannot follow. */
export function readModule(bytes: Uint8Array): ModuleInfo {
  if (
    bytes.length < 8 ||
    bytes[0] !== 0x00 ||
    bytes[1] !== 0x61 ||
    bytes[2] !== 0x73 ||
    bytes[3] !== 0x6d
  ) {
    throw new BinaryFormatError('not a WebAssembly binary (no \\0asm magic number)');
  }
  if (bytes[4] !== 1 || bytes[5] !== 0 || bytes[6] !== 0 || bytes[7] !== 0) {
    throw new BinaryFormatError('unsupported WebAssembly binary version (expected 1)');
  }
  const info: ModuleInfo = {
    types: [],
    imports: [],
    functions: [],
    memories: [],
    tables: [],
    mutableGlobals: 0,
    exports: [],
    hasStart: false,
    sections: [],
  };
  const top = new Reader(bytes, 8);
  while (top.offset < bytes.length) {
    const start = top.offset;
    const id = top.byte();
    const size = top.leb();
    const payload = top.offset;
    const end = payload + size;
    if (end > bytes.length)
      throw new BinaryFormatError(`section ${id} runs past the end of the module`);
    info.sections.push({ id, start, payload, end });
    readSection(info, id, new Reader(bytes, payload, end));
    top.offset = end;
  }
  return info;
}

function readSection(info: ModuleInfo, id: number, r: Reader): void {
  switch (id) {
    case 1: // type
      for (let n = r.leb(); n > 0; n--) {
        const form = r.byte();
        if (form !== 0x60)
          throw new BinaryFormatError(`unsupported type form 0x${form.toString(16)}`);
        const params = Array.from({ length: r.leb() }, () => r.valtype());
        const results = Array.from({ length: r.leb() }, () => r.valtype());
        info.types.push({ params, results });
      }
      return;
    case 2: // import
      for (let n = r.leb(); n > 0; n--) {
        const module = r.name();
        const name = r.name();
        const kind = r.byte();
        info.imports.push({ module, name, kind: EXTERNAL_KINDS[kind] ?? `kind ${kind}` });
        if (kind === 0) r.leb();
        else if (kind === 1) {
          r.valtype();
          r.limits();
        } else if (kind === 2) r.limits();
        else if (kind === 3) {
          r.valtype();
          r.byte();
        } else if (kind === 4) {
          r.byte();
          r.leb();
        } else return; // unknown kind: the module is refused for importing anyway
      }
      return;
    case 3: // function
      for (let n = r.leb(); n > 0; n--) info.functions.push(r.leb());
      return;
    case 4: // table
      for (let n = r.leb(); n > 0; n--) {
        const element = r.valtype();
        info.tables.push({ element, limits: r.limits() });
      }
      return;
    case 5: // memory
      for (let n = r.leb(); n > 0; n--) info.memories.push(r.limits());
      return;
    case 6: // global: type, mutability, then an init expression we do not need to follow
      for (let n = r.leb(); n > 0; n--) {
        r.valtype();
        if (r.byte() === 1) info.mutableGlobals++;
        skipConstExpr(r);
      }
      return;
    case 7: // export
      for (let n = r.leb(); n > 0; n--) {
        const name = r.name();
        const kind = r.byte();
        const index = r.leb();
        const kindName = EXTERNAL_KINDS[kind];
        if (!kindName) throw new BinaryFormatError(`unknown export kind ${kind}`);
        info.exports.push({ name, kind: kindName, index });
      }
      return;
    case 8:
      info.hasStart = true;
      return;
    default:
      return; // custom, element, code, data, data count, tag: not needed
  }
}

/** Skips a constant expression up to its `end` (0x0b), following immediates of the allowed opcodes. */
function skipConstExpr(r: Reader): void {
  for (;;) {
    const op = r.byte();
    switch (op) {
      case 0x0b:
        return;
      case 0x41: // i32.const
      case 0x42: // i64.const (signed LEB: same byte structure)
      case 0x23: // global.get
      case 0xd2: // ref.func
        r.leb();
        break;
      case 0x43: // f32.const
        r.offset += 4;
        break;
      case 0x44: // f64.const
        r.offset += 8;
        break;
      case 0xd0: // ref.null t
        r.byte();
        break;
      case 0x6a: // extended-const arithmetic
      case 0x6b:
      case 0x6c:
      case 0x7c:
      case 0x7d:
      case 0x7e:
        break;
      case 0xfd: // v128.const
        r.leb();
        r.offset += 16;
        break;
      default:
        throw new BinaryFormatError(
          `unsupported opcode 0x${op.toString(16)} in a global initialiser`,
        );
    }
  }
}

/** `(param f64 f64) (result f64)` — the way WAT writes a signature. */
export function formatFuncType(type: FuncType): string {
  const parts: string[] = [];
  if (type.params.length) parts.push(`(param ${type.params.join(' ')})`);
  if (type.results.length) parts.push(`(result ${type.results.join(' ')})`);
  return parts.length ? parts.join(' ') : '(no params, no results)';
}

export function encodeLeb(value: number): number[] {
  const out: number[] = [];
  let v = value;
  do {
    let b = v % 128;
    v = Math.floor(v / 128);
    if (v > 0) b |= 0x80;
    out.push(b);
  } while (v > 0);
  return out;
}

function encodeLimits(limits: Limits): number[] {
  const flags =
    (limits.max !== undefined ? 1 : 0) | (limits.shared ? 2 : 0) | (limits.memory64 ? 4 : 0);
  const out = [flags, ...encodeLeb(limits.min)];
  if (limits.max !== undefined) out.push(...encodeLeb(limits.max));
  return out;
}

/**
 * A copy of the binary with every memory's and table's maximum set to at
 * most the given ceilings (a missing maximum becomes the ceiling). Other
 * sections are copied byte for byte.
 */
export function capLimits(
  bytes: Uint8Array,
  info: ModuleInfo,
  ceilings: { memoryPages: number; tableElements: number },
): Uint8Array {
  const chunks: Uint8Array[] = [bytes.subarray(0, 8)];
  for (const section of info.sections) {
    let payload: number[] | undefined;
    if (section.id === 5 && info.memories.length) {
      payload = encodeLeb(info.memories.length);
      for (const m of info.memories) {
        payload.push(
          ...encodeLimits({ ...m, max: Math.min(m.max ?? Infinity, ceilings.memoryPages) }),
        );
      }
    } else if (section.id === 4 && info.tables.length) {
      payload = encodeLeb(info.tables.length);
      for (const t of info.tables) {
        const code = Number(Object.entries(VALTYPES).find(([, name]) => name === t.element)![0]);
        const max = Math.min(t.limits.max ?? Infinity, ceilings.tableElements);
        payload.push(code, ...encodeLimits({ ...t.limits, max }));
      }
    }
    if (payload) {
      chunks.push(Uint8Array.from([section.id, ...encodeLeb(payload.length), ...payload]));
    } else {
      chunks.push(bytes.subarray(section.start, section.end));
    }
  }
  const total = chunks.reduce((sum, c) => sum + c.length, 0);
  const out = new Uint8Array(total);
  let offset = 0;
  for (const c of chunks) {
    out.set(c, offset);
    offset += c.length;
  }
  return out;
}
