/**
 * Where the rows go. A file is written beside its target under a temporary
 * name and renamed over it only when the run succeeds, so an interrupted or
 * failed run leaves the previous file as it was. Standard output is written
 * as rows are ready, waiting when the reader is slower (memory stays bounded),
 * and a reader that goes away (`| head`) is noticed so the run can stop.
 */
import { randomBytes } from 'node:crypto';
import { unlinkSync } from 'node:fs';
import { chmod, type FileHandle, open, realpath, rename, stat, unlink } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { badInput, type CliError, writeFailed } from './cli-error.js';
import { fileErrorReason } from './descriptor-file.js';
import type { CliStream } from './io.js';

export interface RowSink {
  /** Adds text to what the next flush writes (the run flushes after each chunk of rows). */
  write(text: string): void;
  /** Writes what was added, waiting while the destination is behind. */
  flush(): Promise<void>;
  /** The reader went away (EPIPE): nothing more can be written. */
  readonly closed: boolean;
  /** Called once when the reader goes away. */
  onClosed(listener: () => void): void;
  /** The run succeeded: the output takes its place. */
  commit(): Promise<void>;
  /** The run did not finish: the output is dropped (a file target keeps its previous content). */
  discard(): Promise<void>;
  /** Why the destination stopped taking rows (a full disk, an I/O error), if it did. */
  readonly error?: CliError | undefined;
  /**
   * Rows reach the destination as they are written, with no temporary file
   * (standard output, a device, a FIFO): a run that stops leaves what it wrote.
   */
  readonly direct?: boolean;
}

const WRITE_FIX = 'free some space (or fix the device), or write the rows elsewhere with -o FILE';

/** Output to a file, through a temporary file beside it. */
export async function fileSink(path: string, cwd: string): Promise<RowSink> {
  const named = resolve(cwd, path);
  const previous = await stat(named).catch(() => undefined);
  if (previous?.isDirectory()) {
    throw badInput(`cannot write ${path}: it is a directory`, 'give a file name: -o out.csv');
  }
  // A device or a FIFO (-o /dev/null, -o /dev/stdout) is written to, never replaced by a file.
  if (previous && !previous.isFile()) return directSink(path, named);
  // Through a symbolic link: the file it names is replaced, and the link stays.
  const target = previous ? await realpath(named).catch(() => named) : named;
  const temp = join(
    dirname(target),
    `.${basename(target)}.${process.pid}-${randomBytes(4).toString('hex')}.partial`,
  );
  let handle: FileHandle;
  try {
    handle = await open(temp, 'wx');
  } catch (error) {
    throw badInput(
      `cannot write ${path}: ${fileErrorReason(error, 'its directory does not exist')}`,
      'pick a path in a directory that exists and that you can write to',
    );
  }
  // A second Ctrl-C exits at once; the temporary file must not outlive the process.
  const removeOnExit = () => {
    try {
      unlinkSync(temp);
    } catch {}
  };
  process.on('exit', removeOnExit);
  const { write, flush } = pendingWrites(handle, path);
  let finished = false;
  const finish = async (keep: boolean) => {
    if (finished) return;
    finished = true;
    let kept = false;
    try {
      if (keep) {
        await flush();
        // The new file takes the place of the old one, permissions included.
        if (previous) await chmod(temp, previous.mode & 0o7777).catch(() => {});
        // Closing reports a write the system had deferred (a full disk on NFS).
        await handle.close().catch((error: unknown) => {
          throw writeFailed(path, error, WRITE_FIX);
        });
        await rename(temp, target).catch((error: unknown) => {
          throw writeFailed(path, error, WRITE_FIX);
        });
        kept = true;
      } else await handle.close().catch(() => {});
    } finally {
      process.off('exit', removeOnExit);
      if (!kept) {
        await handle.close().catch(() => {});
        await unlink(temp).catch(() => {});
        removeOnExit();
      }
    }
  };
  return {
    write,
    flush,
    closed: false,
    onClosed() {},
    commit: () => finish(true),
    discard: () => finish(false),
  };
}

/** Rows held until `flush` writes them to `handle` in one write; a failed write is WriteFailed. */
function pendingWrites(handle: FileHandle, path: string) {
  let pending: string[] = [];
  return {
    write(text: string) {
      pending.push(text);
    },
    async flush() {
      if (pending.length === 0) return;
      const text = pending.join('');
      pending = [];
      try {
        await handle.write(text);
      } catch (error) {
        throw writeFailed(path, error, WRITE_FIX);
      }
    },
  };
}

/** Output written straight to a device or a FIFO, which a rename would replace. */
async function directSink(path: string, target: string): Promise<RowSink> {
  let handle: FileHandle;
  try {
    handle = await open(target, 'w');
  } catch (error) {
    throw badInput(
      `cannot write ${path}: ${fileErrorReason(error, 'it does not exist')}`,
      'pick a path you can write to',
    );
  }
  const { write, flush } = pendingWrites(handle, path);
  let finished = false;
  const finish = async (keep: boolean) => {
    if (finished) return;
    finished = true;
    try {
      if (keep) await flush();
    } finally {
      await handle.close().catch(() => {});
    }
  };
  return {
    write,
    flush,
    closed: false,
    onClosed() {},
    commit: () => finish(true),
    discard: () => finish(false),
    direct: true,
  };
}

/** Output to a stream (stdout), honouring backpressure, noticing EPIPE and failed writes (a full disk). */
export function streamSink(stream: CliStream): RowSink {
  let pending: string[] = [];
  let closed = false;
  const listeners: (() => void)[] = [];
  const close = () => {
    if (closed) return;
    closed = true;
    for (const listener of listeners.splice(0)) listener();
  };
  let failure: CliError | undefined;
  const onError = (error: unknown) => {
    // EPIPE: the reader went away, which is not an error; anything else (ENOSPC, EIO) is.
    if ((error as { code?: unknown })?.code !== 'EPIPE') {
      failure ??= writeFailed('standard output', error, WRITE_FIX);
    }
    close();
  };
  stream.on?.('error', onError);
  const detach = () => stream.off?.('error', onError);
  const sink: RowSink = {
    write(text) {
      pending.push(text);
    },
    async flush() {
      if (failure) throw failure;
      if (pending.length === 0 || closed) return;
      const text = pending.join('');
      pending = [];
      if (stream.write(text) === false && stream.once) {
        await new Promise<void>((resolve) => {
          const done = () => {
            stream.off?.('drain', done);
            const at = listeners.indexOf(done);
            if (at !== -1) listeners.splice(at, 1);
            resolve();
          };
          stream.once!('drain', done);
          listeners.push(done);
        });
      }
    },
    get closed() {
      return closed;
    },
    get error() {
      return failure;
    },
    direct: true,
    onClosed(listener) {
      if (closed) listener();
      else listeners.push(listener);
    },
    async commit() {
      await sink.flush();
      detach();
    },
    async discard() {
      pending = [];
      detach();
    },
  };
  return sink;
}
