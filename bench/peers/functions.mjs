// The functions both sides compute, written once per side: our bodies
// (which read `args` and set `result`) and PostgreSQL's PL/Python and PL/R
// CREATE FUNCTION statements, from the same expressions where possible.

/** A Python expression in x and y as our body (`args`) and as a PL/Python body (named arguments). */
const pyBodies = (expr) => ({
  ours: `result = ${expr.replace(/\bx\b/g, 'args[0]').replace(/\by\b/g, 'args[1]')}`,
  peer: `return ${expr}`,
});

const plpython = (name, params, returns, body) =>
  `CREATE FUNCTION ${name}(${params}) RETURNS ${returns} LANGUAGE plpython3u AS $body$\n${body}\n$body$`;
const plr = (name, params, returns, body) =>
  `CREATE FUNCTION ${name}(${params}) RETURNS ${returns} LANGUAGE plr AS $body$\n${body}\n$body$`;
export const descriptor = (name, language, body, argTypes, returnType, extra = {}) => ({
  name,
  language,
  body,
  argTypes,
  returnType,
  pure: true,
  ...extra,
});

export const GROW_R = { ours: 'result <- args[[1]] * 1.05^args[[2]]', peer: 'x * 1.05^y' };
export const FOUR = [
  ['py_hypot', '(x ** 2 + y ** 2) ** 0.5'],
  ['py_grow', 'x * 1.05 ** y'],
  ['py_spread', 'abs(x - y)'],
  ['py_ratio', 'x / (1.0 + y)'],
].map(([name, expr]) => ({ name, expr, ...pyBodies(expr) }));
export const HYPOT = FOUR[0];
export const sumHypot = (t) => `SELECT sum(py_hypot(x, y)) FROM ${t}`;
export const sumR = (t) => `SELECT sum(r_grow(x, y)) FROM ${t}`;

/** Every PostgreSQL function the workloads call; the PL/R ones only when PL/R is there. */
export function functionStatements({ plr: withPlr }) {
  const statements = [
    plpython('peers_py_version', '', 'text', 'import sys\nreturn sys.version.split()[0]'),
    plpython('py_upper', 'a text, b text', 'text', 'return (a + b).upper()'),
    plpython(
      'py_next_day',
      't timestamptz',
      'timestamptz',
      'import datetime\nreturn datetime.datetime.fromisoformat(t) + datetime.timedelta(days=1)',
    ),
    plpython(
      'py_np_hypot',
      'x float8[], y float8[]',
      'float8[]',
      'import numpy as np\nreturn np.hypot(x, y)',
    ),
    ...FOUR.map(({ name, peer }) => plpython(name, 'x float8, y float8', 'float8', peer)),
  ];
  if (withPlr) {
    statements.push(
      plr('peers_r_version', '', 'text', 'R.version.string'),
      plr('r_grow', 'x float8, y float8', 'float8', GROW_R.peer),
      plr('r_grow_vec', 'x float8[], y float8[]', 'float8[]', GROW_R.peer),
    );
  }
  return statements;
}
