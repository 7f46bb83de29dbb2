/**
 * Turns a function body into the bytes of a WebAssembly module:
 * `wat:<text>` is assembled with wabt, `wasm:<base64>` is decoded.
 * `screenBody` runs on the host's main thread, so it does no work in
 * proportion to a body beyond a few times the size cap; the rest runs in the
 * compile worker, under the call's deadline.
 */

/** The body prefixes this runner accepts. */
export const BODY_PREFIXES = ['wat:', 'wasm:'] as const;

/** A body the runner refuses; its message is for the modeler. */
export class BodyError extends Error {
  override name = 'BodyError';
}

type WabtInit = typeof import('wabt');
type Wabt = Awaited<ReturnType<WabtInit>>;
let wabtReady: Promise<Wabt> | undefined;

/** wabt is ~1 MB of Emscripten output: loaded on the first `wat:` body, once. */
export function loadWabt(): Promise<Wabt> {
  wabtReady ??=
    // wabt is CommonJS (`export =`): Node hands it over as the namespace's default export.
    (import('wabt') as unknown as Promise<{ default: WabtInit }>)
      .then((m) => m.default())
      .catch((error) => {
        wabtReady = undefined; // let a later call try again
        throw error;
      });
  return wabtReady;
}

const MAX_MESSAGE_CHARS = 2_000;

/** Assembles WebAssembly text; errors keep wabt's `body.wat:line:col` messages. */
export async function assembleWat(text: string): Promise<Uint8Array> {
  const wabt = await loadWabt();
  let module: ReturnType<Wabt['parseWat']> | undefined;
  try {
    module = wabt.parseWat('body.wat', text);
    module.resolveNames();
    module.validate();
    return module.toBinary({ log: false, write_debug_names: false }).buffer.slice();
  } catch (error) {
    const message = (error instanceof Error ? error.message : String(error)).trim();
    if (!/^(parseWat|validate) failed:/.test(message)) {
      // Not a diagnostic: wabt itself failed (its stack or heap ran out). That instance is
      // unusable from now on, so the next body gets a fresh one.
      wabtReady = undefined;
      module = undefined;
      throw new BodyError(
        `the WebAssembly text could not be assembled: wabt failed with "${message.slice(0, 200)}" (expressions nested a few hundred levels deep exhaust its stack)`,
      );
    }
    // A large body can give thousands of errors; the first ones say what is wrong.
    const shown =
      message.length > MAX_MESSAGE_CHARS ? `${message.slice(0, MAX_MESSAGE_CHARS)} …` : message;
    throw new BodyError(`invalid WebAssembly text: ${shown}`);
  } finally {
    module?.destroy();
  }
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export function decodeBase64(text: string): Uint8Array {
  const compact = text.replace(/\s+/g, '');
  if (!BASE64.test(compact) || compact.length % 4 === 1) {
    throw new BodyError(
      'the wasm: body is not valid base64 (standard alphabet, optional = padding)',
    );
  }
  return new Uint8Array(Buffer.from(compact, 'base64'));
}

/** The default of the maxBodyBytes option: 1 MiB of WebAssembly text, or of binary module. */
export const DEFAULT_MAX_BODY_BYTES = 1_048_576;

export function formatBytes(bytes: number): string {
  if (bytes >= 1_073_741_824) {
    const gib = bytes / 1_073_741_824;
    return `${Number.isInteger(gib) ? gib : gib.toFixed(1)} GiB`;
  }
  if (bytes >= 1_048_576) {
    const mib = bytes / 1_048_576;
    return `${Number.isInteger(mib) ? mib : mib.toFixed(1)} MiB`;
  }
  if (bytes >= 1_024) {
    const kib = bytes / 1_024;
    return `${Number.isInteger(kib) ? kib : kib.toFixed(1)} KiB`;
  }
  return `${bytes} bytes`;
}

function tooLarge(what: string, size: string, maxBodyBytes: number): BodyError {
  return new BodyError(
    `${what} is ${size}, above the limit of ${formatBytes(maxBodyBytes)}; a host that trusts its models can raise it with the maxBodyBytes option of wasm()`,
  );
}

/** Longest body screenBody reads; a longer one is refused on its length alone. */
export function screenedLength(maxBodyBytes: number): number {
  // Base64 takes 4 characters per 3 bytes; the rest is room for line breaks.
  return 3 * maxBodyBytes + 64;
}

/**
 * Checks a body's prefix and size before any work is sent to a worker: `wat:`
 * text at most `maxBodyBytes` of UTF-8, a `wasm:` binary at most
 * `maxBodyBytes` once decoded. Looks at no more than about three times the
 * cap, however long the body is. Throws BodyError.
 */
export function screenBody(body: string, maxBodyBytes: number): void {
  if (body.length > screenedLength(maxBodyBytes)) {
    throw tooLarge('the body', `${body.length.toLocaleString('en')} characters long`, maxBodyBytes);
  }
  const trimmed = body.trimStart();
  if (trimmed.startsWith('wat:')) {
    const bytes = Buffer.byteLength(trimmed) - 4;
    if (bytes > maxBodyBytes)
      throw tooLarge('the wat: body', `${formatBytes(bytes)} of text`, maxBodyBytes);
  } else if (trimmed.startsWith('wasm:')) {
    const text = trimmed.slice(5);
    if ((text.length * 3) / 4 > maxBodyBytes) {
      const compact = text.replace(/\s+/g, '');
      const padding = compact.endsWith('==') ? 2 : compact.endsWith('=') ? 1 : 0;
      const bytes = Math.floor((compact.length * 3) / 4) - padding;
      if (bytes > maxBodyBytes)
        throw tooLarge('the wasm: body', `a binary of ${formatBytes(bytes)}`, maxBodyBytes);
    }
  } else {
    throw prefixError(trimmed);
  }
}

function prefixError(trimmed: string): BodyError {
  const start = JSON.stringify(trimmed.slice(0, 20));
  return new BodyError(
    `a wasm body must start with "wat:" (WebAssembly text) or "wasm:" (a base64 binary module); this one starts with ${start}`,
  );
}

/** The module bytes of a body, or a BodyError naming the accepted prefixes. */
export async function moduleBytes(body: string): Promise<Uint8Array> {
  const trimmed = body.trimStart();
  if (trimmed.startsWith('wat:')) return assembleWat(trimmed.slice(4));
  if (trimmed.startsWith('wasm:')) return decodeBase64(trimmed.slice(5));
  throw prefixError(trimmed);
}
