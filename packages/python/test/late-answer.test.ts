/**
 * A frame that comes after its request was answered never writes into the
 * caller's result column. A body can answer its own request first (a JSON
 * `values` answer, which a callcols request also takes) and hold the
 * driver's own answer back; that answer, with its result column, then
 * reaches an idle worker. The frame reader used to keep the column it had
 * been given for the request (payloadInto) until a payload of that size
 * came, and so copied the late column into the caller's result after
 * evalColumns had resolved; now a request's column is dropped when it is
 * answered, and the late frame only kills its worker.
 */
import { describe, expect, test } from 'vitest';
import { alive, noRestricted, restrictedOk, scopedRegistry, waitFor } from './helpers.js';

// Row 0 writes an answer of its own for the whole request (every row 7) and
// makes the driver's answer (every row `row + 1`) wait 300 ms before it goes out.
const LATE = [
  'import __main__, os, sys, time',
  'row = int(args[0])',
  'if row == 0:',
  '    f = sys._getframe()',
  "    while f.f_code.co_name != '_serve':",
  '        f = f.f_back',
  "    request = f.f_locals['request']",
  "    forged = '{\"id\":%d,\"values\":[%s]}\\n' % (request['id'], ','.join(['7'] * request['rows']))",
  '    os.write(__main__._proto_out_fd, forged.encode())',
  '    def late(header, payload=None, write=__main__._write):',
  '        __main__._write = write',
  '        time.sleep(0.3)',
  '        write(header, payload)',
  '    __main__._write = late',
  'result = row + 1',
].join('\n');

describe.skipIf(!restrictedOk)(
  `an answer that comes after its request's${restrictedOk ? '' : ` (${noRestricted})`}`,
  () => {
    test("does not write into the caller's column once evalColumns has resolved", async () => {
      const { registry, runner } = scopedRegistry('restricted', {
        late: [LATE, ['number'], 'enum'],
      });
      const before = new Set(runner.workerPids());
      // Rows from 100 on are plain: a first batch gives the function its time per row,
      // so the four rows below go out as one chunk.
      const warm = await registry.evalColumns('late', [
        Float64Array.from({ length: 64 }, (_, i) => 100 + i),
      ]);
      expect(warm.errors.size).toBe(0);
      expect([...warm.values]).toEqual(Array.from({ length: 64 }, (_, i) => 101 + i));
      const into = new Uint32Array(4);
      const { values, errors } = await registry.evalColumns('late', [Float64Array.of(0, 1, 2, 3)], {
        into,
      });
      expect(errors.size).toBe(0);
      expect(values).toBe(into);
      expect([...into]).toEqual([7, 7, 7, 7]); // the body's own answer, taken for the driver's
      const started = runner.workerPids().filter((pid) => !before.has(pid));
      expect(started).toHaveLength(1);
      // The driver's answer comes while the worker idles: an unexpected frame, so it is killed.
      expect(await waitFor(() => !alive(started[0]!), 10_000)).toBe(true);
      expect([...into]).toEqual([7, 7, 7, 7]);
    });
  },
);

test.skipIf(restrictedOk)(`a late answer: ${noRestricted}`, () => {});
