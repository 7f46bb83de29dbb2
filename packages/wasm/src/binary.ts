/**
 * A small reader for the parts of a WebAssembly binary this runner must judge
 * before anything runs: imports (refused), memories and tables (capped), the
 * exact type of the `improv_call` export, and every declaration that makes V8
 * allocate at compile or instantiation time (globals, segments, functions and
 * their locals), which src/budget.ts weighs against the module's budget. It
 * also rewrites memory and table limits so that growth stops at the ceiling:
 * V8 enforces a declared maximum, while a Worker's resourceLimits does not cap
 * Wasm memory.
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

/** One function body of the code section, as far as its compile cost goes. */
export interface FunctionBody {
  /** Bytes of the body (local declarations and instructions). */
  bytes: number;
  /** Locals it declares (its parameters not included), summed over its declarations. */
  locals: number;
  /** Of those, locals of type v128 (16 bytes each rather than 8). */
  v128Locals: number;
  /**
   * An upper bound on its blocks, loops, ifs, elses and branches: every
   * instruction byte with one of those opcodes' values (an immediate may
   * happen to have one too, so this never undercounts).
   */
  controlPoints: number;
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
  /** Type of each global the module defines. */
  globals: ValType[];
  /** Exception tags the module defines. */
  tags: number;
  /** Entries of each element segment. */
  elementSegments: number[];
  /** Bytes of each data segment. */
  dataSegments: number[];
  /** The code section's bodies, in function order. */
  bodies: FunctionBody[];
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
    globals: [],
    tags: 0,
    elementSegments: [],
    dataSegments: [],
    bodies: [],
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
        info.globals.push(r.valtype());
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
    case 9:
      for (let n = r.leb(); n > 0; n--) info.elementSegments.push(readElementSegment(r));
      return;
    case 10:
      for (let n = r.leb(); n > 0; n--) info.bodies.push(readBody(r));
      return;
    case 11:
      for (let n = r.leb(); n > 0; n--) info.dataSegments.push(readDataSegment(r));
      return;
    case 13: // tag: an attribute byte and a type index each, read one by one (a count alone
      // could claim 2^50 tags in a few bytes, and the budget sums per tag)
      for (let n = r.leb(); n > 0; n--) {
        r.byte();
        r.leb();
        info.tags++;
      }
      return;
    default:
      return; // custom, data count: nothing is allocated for them beyond their bytes
  }
}

/** Reads one element segment (any of its eight encodings); returns its number of entries. */
function readElementSegment(r: Reader): number {
  const flags = r.leb();
  if (flags > 7) throw new BinaryFormatError(`unsupported element segment flags ${flags}`);
  if (flags === 2 || flags === 6) r.leb(); // table index
  if ((flags & 1) === 0) skipConstExpr(r); // active: an offset
  const expressions = (flags & 4) !== 0;
  if (flags & 3) {
    if (expressions) r.valtype();
    else r.byte(); // element kind (0x00: funcref)
  }
  const entries = r.leb();
  for (let i = 0; i < entries; i++) {
    if (expressions) skipConstExpr(r);
    else r.leb();
  }
  return entries;
}

/** Reads one data segment; returns its length in bytes. */
function readDataSegment(r: Reader): number {
  const flags = r.leb();
  if (flags > 2) throw new BinaryFormatError(`unsupported data segment flags ${flags}`);
  if (flags === 2) r.leb(); // memory index
  if (flags !== 1) skipConstExpr(r); // active: an offset
  const length = r.leb();
  if (r.offset + length > r.end) throw new BinaryFormatError('data segment runs past its section');
  r.offset += length;
  return length;
}

/**
 * Opcodes at which V8's baseline compiler keeps or merges a copy of every
 * local's state: block, loop, if, else, br, br_if, br_table, return, and the
 * exception-handling try/catch/delegate/rethrow family.
 */
const CONTROL_OPCODES = new Uint8Array(256);
for (const op of [
  0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0c, 0x0d, 0x0e, 0x0f, 0x18, 0x19,
]) {
  CONTROL_OPCODES[op] = 1;
}

/** Reads one function body's local declarations and bounds its control points. */
function readBody(r: Reader): FunctionBody {
  const size = r.leb();
  const end = r.offset + size;
  if (end > r.end) throw new BinaryFormatError('function body runs past the code section');
  const body = new Reader(r.bytes, r.offset, end);
  let locals = 0;
  let v128Locals = 0;
  for (let n = body.leb(); n > 0; n--) {
    const count = body.leb();
    locals += count;
    if (body.valtype() === 'v128') v128Locals += count;
  }
  let controlPoints = 0;
  const bytes = r.bytes;
  for (let i = body.offset; i < end; i++) controlPoints += CONTROL_OPCODES[bytes[i]!]!;
  r.offset = end;
  return { bytes: size, locals, v128Locals, controlPoints };
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
