import { Value } from '@improv/extfn-core';
import { encodeFrame } from '@improv/extfn-interpreter';

const { callHeader } = await import('/work/main/packages/interpreter/dist/batch.js');
const n = 100000;
const rows = Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
for (let k = 0; k < 6; k++) {
  const t = performance.now();
  const buf = encodeFrame({ ...callHeader(rows), id: 5 });
  console.log(
    `callHeader+encode ${(performance.now() - t).toFixed(1)} ms, ${buf.length} bytes ${buf.subarray(0, 60)}`,
  );
}
