/**
 * What travels through Redis between an engine and its workers: the job's
 * data, the chunk's result, errors, and the names of the keys both sides use.
 * Workers validate everything here with zod before acting on it, because a
 * job is input from the network: it names a descriptor by digest, a deadline
 * and a frame of arguments — never a file, a command or a sandbox policy.
 */
import { createHash } from 'node:crypto';
import {
  EXT_FN_ERROR_KINDS,
  type ExternalFn,
  ExtFnError,
  MAX_TIMEOUT_MS,
} from '@improv/extfn-core';
import { z } from 'zod';

/** Bumped when the job or result shape changes; workers refuse other versions. */
export const WIRE_VERSION = 1;
export const DEFAULT_QUEUE_NAME = 'improv-extfn';
/** The most rows one job may carry. */
export const MAX_CHUNK_ROWS = 65_536;
/** The most bytes of argument frame one job may carry (before base64). */
export const MAX_FRAME_BYTES = 64 * 1024 * 1024;
/** The most bytes of values and errors a worker sends back for one job, by default (before base64). */
export const MAX_RESULT_BYTES = 64 * 1024 * 1024;

/** `12.5 MiB`, for messages. */
export function formatMiB(bytes: number): string {
  const mib = bytes / 1_048_576;
  return `${Number.isInteger(mib) ? mib : mib.toFixed(1)} MiB`;
}

/** BullMQ queue names cannot hold ':'; one queue per language, so a worker only ever sees jobs it can serve. */
export function languageQueueName(queueName: string, language: string): string {
  return `${queueName}-${language}`;
}

/** The Redis hash holding descriptors by digest (the body is sent once per digest, not per chunk). */
export function descriptorKey(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:descriptors`;
}

/** The pub/sub channel engines use to tell workers to stop a running job. */
export function cancelChannel(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:cancel`;
}

/** The pub/sub channel engines use to ask every worker host to warm a function up (`Registry.warmUp`). */
export function warmChannel(prefix: string, queueName: string): string {
  return `${prefix}:${queueName}:warm`;
}

/**
 * The list a warm-up request's answers go to, one per host. Made by each host
 * from its own prefix and queue name and the request's id: a request cannot
 * name a key for a host to write.
 */
export function warmReplyKey(prefix: string, queueName: string, id: string): string {
  return `${prefix}:${queueName}:warm:${id}`;
}

/**
 * Content address of a descriptor: the name is part of it, since row errors
 * carry the name, and so is `vectorized` (the same text run per row is other
 * code), so neither can be stored over the other. A per-row descriptor's
 * digest is what it was before vectorized functions.
 */
export function descriptorDigest(fn: ExternalFn): string {
  const what: unknown[] = [fn.name, fn.language, fn.body, fn.argTypes, fn.returnType];
  if (fn.vectorized === true) what.push('vectorized');
  return createHash('sha256').update(JSON.stringify(what)).digest('base64url');
}

const base64 = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, 'must be base64');

const digestSchema = z
  .string()
  .regex(/^[A-Za-z0-9_-]{43}$/, 'must be a sha256 digest in base64url');

/** A job's data. Strict: a field this version does not know (a policy, a path) is refused. */
export const jobDataSchema = z.strictObject({
  v: z.literal(WIRE_VERSION),
  digest: digestSchema,
  rows: z.number().int().min(1).max(MAX_CHUNK_ROWS),
  args: base64.max(Math.ceil(MAX_FRAME_BYTES / 3) * 4),
  timeoutMs: z.number().int().min(1).max(MAX_TIMEOUT_MS),
  mode: z.enum(['warm', 'oneShot']).optional(),
});
export type JobData = z.infer<typeof jobDataSchema>;

const errorSchema = z.object({
  kind: z.enum(EXT_FN_ERROR_KINDS),
  message: z.string(),
  ms: z.number().optional(),
  stderr: z.string().optional(),
  limit: z
    .enum(['memory', 'cpu-time', 'processes', 'file-size', 'output', 'wall-clock'])
    .optional(),
  aborted: z.boolean().optional(),
  loadFailed: z.boolean().optional(),
  expected: z.union([z.number(), z.string()]).optional(),
  got: z.union([z.number(), z.string()]).optional(),
  position: z.number().optional(),
  fix: z.string().optional(),
});
export type WireError = z.infer<typeof errorSchema>;

/** A chunk's result: the result column, and the failed rows' errors by row index. */
export const chunkResultSchema = z.object({
  v: z.literal(WIRE_VERSION),
  values: base64,
  errors: z.array(z.tuple([z.number().int().min(0), errorSchema])),
});
export type ChunkResult = z.infer<typeof chunkResultSchema>;

/** A warm-up request, as a host reads it off `warmChannel`. Strict, as a job is. */
export const warmRequestSchema = z.strictObject({
  v: z.literal(WIRE_VERSION),
  digest: digestSchema,
  id: z.string().regex(/^[A-Za-z0-9._-]{1,100}$/, 'must be a request id'),
  timeoutMs: z.number().int().min(1).max(MAX_TIMEOUT_MS),
  mode: z.enum(['warm', 'oneShot']).optional(),
});
export type WarmRequest = z.infer<typeof warmRequestSchema>;

/**
 * A host's answer to a warm-up request: `warm` (its runner has the function
 * ready, or starts nothing per function), `skipped` (it serves no runner of
 * the language), `reason` (its runner keeps nothing warm for it, or the
 * descriptor was not found) or `error` (what the calls would get).
 */
export const warmAnswerSchema = z.object({
  v: z.literal(WIRE_VERSION),
  host: z.string(),
  outcome: z.enum(['warm', 'skipped', 'reason', 'error']),
  reason: z.string().optional(),
  error: errorSchema.optional(),
});
export type WarmAnswer = z.infer<typeof warmAnswerSchema>;

/** An ExtFnError as JSON, keeping what a local runner's error carries (not its cause). */
export function errorToWire(error: ExtFnError): WireError {
  const {
    functionName: _name,
    cause: _cause,
    language: _l,
    available: _a,
    ...fields
  } = error.fields();
  return { kind: error.kind, message: error.message, ...fields } as WireError;
}

export function errorFromWire(wire: WireError, functionName: string): ExtFnError {
  const { kind, message, ...fields } = wire;
  const clean = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined));
  return new ExtFnError(kind, message, { ...clean, functionName } as never);
}

/** Worker failures the engine acts on: a descriptor the worker could not find is published again. */
export const DESCRIPTOR_MISSING = 'improv-extfn: descriptor not found';
