/**
 * The rows file as text that comes in pieces, with how far reading has got
 * (for the progress bar). A byte that is not UTF-8 arrives escaped (see
 * utf8.ts), for the row it is in to be reported.
 */
import { type FileHandle, open } from 'node:fs/promises';
import { resolve } from 'node:path';
import { badInput, usage } from './cli-error.js';
import { fileErrorReason } from './descriptor-file.js';
import { type CliIo, releaseStdin } from './io.js';
import { EscapingDecoder } from './utf8.js';

export interface TextSource {
  readonly chunks: AsyncIterable<string>;
  /** Bytes in the file, when known (not for stdin). */
  readonly size: number | undefined;
  /** Bytes read so far. */
  bytesRead(): number;
  close(): Promise<void>;
}

/** Small enough that the first batch is read and parsed at once; large enough to cost nothing per row. */
const CHUNK_BYTES = 64 * 1024;

/** Opens the rows file (or stdin for `-`); a file that cannot be read fails here, before any work. */
export async function openRows(path: string, io: CliIo): Promise<TextSource> {
  if (path === '-') {
    if (!io.stdin) throw usage('this environment has no standard input to read rows from');
    const input = io.stdin();
    let bytes = 0;
    async function* decode(): AsyncIterable<string> {
      const decoder = new EscapingDecoder();
      for await (const chunk of input) {
        if (typeof chunk === 'string') {
          bytes += Buffer.byteLength(chunk);
          yield chunk;
        } else {
          bytes += chunk.byteLength;
          yield decoder.decode(chunk);
        }
      }
      const rest = decoder.end();
      if (rest) yield rest;
    }
    return {
      chunks: decode(),
      size: undefined,
      bytesRead: () => bytes,
      close: async () => releaseStdin(input),
    };
  }
  let handle: FileHandle;
  let size: number;
  try {
    handle = await open(resolve(io.cwd, path), 'r');
    const stat = await handle.stat();
    if (stat.isDirectory()) {
      await handle.close();
      throw Object.assign(new Error('directory'), { code: 'EISDIR' });
    }
    size = stat.size;
  } catch (error) {
    throw badInput(
      `cannot read rows file ${path}: ${fileErrorReason(error, 'no such file')}`,
      `check the path (relative to ${io.cwd})`,
    );
  }
  const stream = handle.createReadStream({ highWaterMark: CHUNK_BYTES });
  // Not encoding 'utf8', which would turn a byte that is not UTF-8 into U+FFFD unseen.
  async function* decode(): AsyncIterable<string> {
    const decoder = new EscapingDecoder();
    for await (const chunk of stream) yield decoder.decode(chunk as Buffer);
    const rest = decoder.end();
    if (rest) yield rest;
  }
  return {
    chunks: decode(),
    size,
    bytesRead: () => stream.bytesRead,
    close: async () => {
      stream.destroy();
      await handle.close().catch(() => {});
    },
  };
}
