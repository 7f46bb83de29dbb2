/**
 * @improv/extfn-queue: refreshes spread over worker hosts through Redis and
 * BullMQ. `queue()` gives an engine runners that enqueue chunks;
 * `startQueueWorker()` is the worker host that evaluates them.
 */

export {
  ColumnFormatError,
  decodeResults,
  decodeRows,
  encodeNumberColumns,
  encodeResults,
  encodeRows,
} from './columns.js';
export {
  type ConnectionInput,
  parseRedisUrl,
  REDIS_PASSWORD_ENV,
  REDIS_URL_ENV,
  resolveConnection,
} from './connection.js';
export { PACKAGE_NAME, type QueueOptions, queue } from './queue-runner.js';
export {
  DEFAULT_QUEUE_NAME,
  descriptorDigest,
  descriptorKey,
  type JobData,
  jobDataSchema,
  languageQueueName,
  type WarmAnswer,
  type WarmRequest,
  WIRE_VERSION,
  warmChannel,
} from './wire.js';
export {
  type ChunkEvent,
  type QueueWorker,
  type QueueWorkerOptions,
  startQueueWorker,
  type WarmUpEvent,
} from './worker.js';
