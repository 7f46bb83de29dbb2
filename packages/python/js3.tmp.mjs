import { Value, valueToJson } from '@improv/extfn-core';

const n = 100000;
const rows = Array.from({ length: n }, (_, i) => [Value.number(i), Value.number(0.5)]);
function numberText(v) {
  const t = String(v);
  return Number.isInteger(v) && Math.abs(v) < 1e21 ? t + '.0' : t;
}
const variants = {
  stringify_map: () => Buffer.from(JSON.stringify(rows.map((r) => r.map(valueToJson)))),
  join_rows: () => {
    const parts = new Array(n);
    for (let i = 0; i < n; i++) {
      const r = rows[i];
      let s = '[';
      for (let j = 0; j < r.length; j++) {
        if (j) s += ',';
        s += numberText(r[j].value);
      }
      parts[i] = s + ']';
    }
    return Buffer.from('[' + parts.join(',') + ']');
  },
  join_flat: () => {
    const parts = [];
    for (let i = 0; i < n; i++) {
      const r = rows[i];
      const row = new Array(r.length);
      for (let j = 0; j < r.length; j++) row[j] = numberText(r[j].value);
      parts.push('[' + row.join(',') + ']');
    }
    return Buffer.from('[' + parts.join(',') + ']');
  },
  stringify_plain: () => Buffer.from(JSON.stringify(rows.map((r) => r.map((v) => v.value)))),
};
for (const [name, f] of Object.entries(variants)) {
  let best = Infinity;
  for (let k = 0; k < 15; k++) {
    const t = performance.now();
    f();
    best = Math.min(best, performance.now() - t);
  }
  console.log(name, best.toFixed(1));
}
