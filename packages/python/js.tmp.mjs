import { Value, valueFromJson } from '@improv/extfn-core';
import { encodeFrame, FrameReader } from '@improv/extfn-interpreter';

const n = 100000;
const rows = Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
const { rowsToJson, resultsFromJsonFrame } = await import(
  '/work/main/packages/interpreter/dist/marshal.js'
);
const fn = { name: 'add', argTypes: ['number', 'number'], returnType: 'number' };
for (let k = 0; k < 5; k++) {
  const t = performance.now();
  const j = rowsToJson(rows);
  const t1 = performance.now();
  const buf = encodeFrame({ op: 'call', rows: j, id: 5 });
  const t2 = performance.now();
  const resp = Buffer.from(
    JSON.stringify({ id: 5, values: rows.map((r) => r[0].value + 0.5) }) + '\n',
  );
  const t3 = performance.now();
  const [frame] = new FrameReader(1 << 30).push(resp);
  const t4 = performance.now();
  resultsFromJsonFrame(fn, frame, n);
  const t5 = performance.now();
  console.log(
    `rowsToJson ${(t1 - t).toFixed(1)} encode ${(t2 - t1).toFixed(1)} parse ${(t4 - t3).toFixed(1)} values ${(t5 - t4).toFixed(1)}  bytes ${buf.length}`,
  );
}
