/**
 * Turns a function body into the bytes of a WebAssembly module:
 * `wat:<text>` is assembled with wabt, `wasm:<base64>` is decoded.
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
function loadWabt(): Promise<Wabt> {
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
    const message = error instanceof Error ? error.message : String(error);
    throw new BodyError(`invalid WebAssembly text: ${message.trim()}`);
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

/** The module bytes of a body, or a BodyError naming the accepted prefixes. */
export async function moduleBytes(body: string): Promise<Uint8Array> {
  const trimmed = body.trimStart();
  if (trimmed.startsWith('wat:')) return assembleWat(trimmed.slice(4));
  if (trimmed.startsWith('wasm:')) return decodeBase64(trimmed.slice(5));
  const start = JSON.stringify(trimmed.slice(0, 20));
  throw new BodyError(
    `a wasm body must start with "wat:" (WebAssembly text) or "wasm:" (a base64 binary module); this one starts with ${start}`,
  );
}
