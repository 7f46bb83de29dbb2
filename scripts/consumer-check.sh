#!/usr/bin/env bash
# The consumer check: what a new user gets from npm. Packs the packages with
# pnpm (which rewrites workspace: ranges), installs the tarballs with npm into
# a fresh application OUTSIDE the workspace, type-checks it strictly (strict,
# module nodenext, no skipLibCheck) with the oldest supported TypeScript and
# the current one, and runs the READMEs' examples: the Wasm one everywhere, the
# Python one where the Restricted sandbox and /usr/bin/python3 work.
#
#   scripts/consumer-check.sh [--node /path/to/node]
#
# --node (or CONSUMER_NODE) picks the Node that type-checks and runs the
# application (e.g. Node 24 next to the machine's Node 20); npm and pnpm are
# the ones on PATH. Needs the npm registry (TypeScript, @types/node, zod,
# wabt), nothing else online. Exits non-zero with a line saying what failed.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NODE="${CONSUMER_NODE:-node}"
while [ $# -gt 0 ]; do
  case "$1" in
    --node) NODE="$2"; shift 2 ;;
    *) echo "consumer-check: unknown argument $1 (usage: consumer-check.sh [--node PATH])" >&2; exit 2 ;;
  esac
done

# The oldest TypeScript the published types support (zod 4's own types use
# NoInfer, new in 5.4), and the one the workspace builds with.
TS_OLDEST="${TS_OLDEST:-5.4.5}"
TS_CURRENT="${TS_CURRENT:-5.9.3}"
export TURBO_TELEMETRY_DISABLED=1
PACKAGES=(core sandbox interpreter python r julia pure wasm)

fail() { echo "consumer-check: FAILED: $*" >&2; exit 1; }
step() { echo "consumer-check: $*"; }

"$NODE" --version >/dev/null 2>&1 || fail "no usable node at '$NODE'"
step "node $("$NODE" --version) ($NODE), npm $(npm --version), pnpm $(pnpm --version)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/improv-consumer.XXXXXX")"
# KEEP_WORK=1 leaves the application behind for a look.
[ "${KEEP_WORK:-}" = 1 ] && step "working in $WORK" || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/tarballs" "$WORK/app/src"

step "building ${PACKAGES[*]}"
(cd "$ROOT" && pnpm exec turbo run build --output-logs=errors-only \
  $(printf -- '--filter=@improv/extfn-%s ' "${PACKAGES[@]}")) >/dev/null \
  || fail "the build failed (run: pnpm build)"

for pkg in "${PACKAGES[@]}"; do
  (cd "$ROOT/packages/$pkg" && pnpm pack --pack-destination "$WORK/tarballs" >/dev/null) \
    || fail "pnpm pack failed in packages/$pkg"
done
# What a release must hold: real version ranges, and the license text.
for tarball in "$WORK"/tarballs/*.tgz; do
  name="$(basename "$tarball")"
  manifest="$(tar -xzOf "$tarball" package/package.json)"
  if grep -q '"workspace:' <<<"$manifest"; then
    fail "$name still has a workspace: range (pack with pnpm, never npm)"
  fi
  tar -xzOf "$tarball" package/LICENSE | cmp -s - "$ROOT/LICENSE" \
    || fail "$name does not carry the repository's LICENSE"
done

cd "$WORK/app"
cat >package.json <<'JSON'
{ "name": "improv-consumer-check", "private": true, "type": "module" }
JSON
step "npm install of the tarballs, typescript $TS_OLDEST and $TS_CURRENT"
npm install --no-audit --no-fund --loglevel=error \
  "$WORK"/tarballs/*.tgz \
  "ts-oldest@npm:typescript@$TS_OLDEST" "ts-current@npm:typescript@$TS_CURRENT" \
  "@types/node@^20.19.0" >/dev/null || fail "npm install of the packed tarballs failed"

# The READMEs' own examples, taken from their "## Use" sections: the first
# TypeScript block of the core README (Wasm only) and of the root README
# (Python and Wasm). A README whose example stops compiling fails here.
extract() { # file → the first ```ts block after "## Use"
  awk '/^## Use/{use=1} use && /^```ts/{on=1; next} on && /^```/{exit} on{print}' "$1"
}
extract "$ROOT/packages/core/README.md" >src/wasm-example.ts
extract "$ROOT/README.md" >src/python-example.ts
[ -s src/wasm-example.ts ] || fail "no TypeScript example under '## Use' in packages/core/README.md"
[ -s src/python-example.ts ] || fail "no TypeScript example under '## Use' in README.md"

# Beyond "it runs": the results are checked.
cat >src/check.ts <<'TS'
import assert from 'node:assert/strict';
import { ExtFnError, Registry, Value } from '@improv/extfn-core';
import { wasm } from '@improv/extfn-wasm';

const registry = new Registry({ runners: [wasm()] });
registry.register({
  name: 'double', language: 'wasm', pure: true,
  body: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))',
  argTypes: ['number'], returnType: 'number',
});
assert.deepEqual(await registry.eval('double', [Value.number(21)]), Value.number(42));
const [bad] = await registry.evalBatch('double', [[Value.text('x')]]);
assert.ok(ExtFnError.isInstance(bad) && bad.kind === 'TypeMismatch');
const out = await registry.evalColumns('double', [Float64Array.of(1, 2.5)]);
assert.deepEqual([...out.values], [2, 5]);
await registry.close();
console.log('consumer-check: wasm results as documented');
TS
# The zod schemas, from their own subpath (the main entry loads no zod).
cat >src/schemas.ts <<'TS'
import assert from 'node:assert/strict';
import { parseExternalFn, Value } from '@improv/extfn-core';
import { externalFnSchema, valueSchema } from '@improv/extfn-core/schemas';

const descriptor = { name: 'f', language: 'wasm', body: '', argTypes: ['number'], returnType: 'text' };
assert.deepEqual(externalFnSchema.parse(descriptor), parseExternalFn(descriptor));
assert.deepEqual(valueSchema.parse({ Number: 5 }), Value.number(5));
assert.equal(externalFnSchema.safeParse({ ...descriptor, returnType: 'money' }).success, false);
console.log('consumer-check: the schemas subpath reads as parseExternalFn does');
TS
# Every runner's published types, type-checked like the rest.
cat >src/every-runner.ts <<'TS'
import type { LanguageRunner } from '@improv/extfn-core';
import { julia } from '@improv/extfn-julia';
import { pure } from '@improv/extfn-pure';
import { python } from '@improv/extfn-python';
import { r } from '@improv/extfn-r';
import { wasm } from '@improv/extfn-wasm';

export const factories: (() => LanguageRunner)[] = [python, r, julia, pure, wasm];
TS
cat >src/sandbox-ok.ts <<'TS'
import { probeSandbox } from '@improv/extfn-sandbox';

const probe = await probeSandbox({ policy: 'restricted' });
console.log(probe.ok ? 'ok' : `the Restricted sandbox is unavailable here (${probe.problem ?? probe.summary})`);
TS

# Trees start from the spawner (packages/sandbox/src/spawner.ts); it must start from the installed files.
cat >src/spawner-ok.ts <<'TS'
import { spawnerPid, spawnerReady } from '@improv/extfn-sandbox';

console.log((await spawnerReady()) && spawnerPid() !== process.pid ? 'spawner ok' : 'no spawner');
TS

cat >tsconfig.json <<'JSON'
{
  "compilerOptions": {
    "strict": true,
    "module": "nodenext",
    "moduleResolution": "nodenext",
    "target": "es2022",
    "lib": ["es2022"],
    "types": ["node"],
    "skipLibCheck": false,
    "outDir": "out",
    "rootDir": "src"
  },
  "include": ["src"]
}
JSON

for ts in ts-oldest ts-current; do
  version="$("$NODE" node_modules/$ts/bin/tsc --version)"
  step "type-check without skipLibCheck: $version"
  "$NODE" node_modules/$ts/bin/tsc -p tsconfig.json --noEmit \
    || fail "the application does not type-check with $version (strict, nodenext, no skipLibCheck)"
done
"$NODE" node_modules/ts-current/bin/tsc -p tsconfig.json || fail "emitting the application failed"

step "running the core README's example (Wasm) and the result checks"
"$NODE" out/wasm-example.js || fail "the core README's example failed"
"$NODE" out/check.js || fail "the Wasm results differ from what the README says"
"$NODE" out/schemas.js || fail "@improv/extfn-core/schemas does not read as parseExternalFn does"

step "starting the sandbox's spawner from the installed package"
[ "$("$NODE" out/spawner-ok.js)" = "spawner ok" ] || fail "the installed @improv/extfn-sandbox could not start its spawner (dist/spawner-process.js)"

export IMPROV_EXTFN_PYTHON="${IMPROV_EXTFN_PYTHON:-/usr/bin/python3}"
sandbox="$("$NODE" out/sandbox-ok.js)"
if [ ! -x "$IMPROV_EXTFN_PYTHON" ]; then
  step "SKIPPED the root README's example (Python): no interpreter at $IMPROV_EXTFN_PYTHON"
elif [ "$sandbox" != ok ]; then
  step "SKIPPED the root README's example (Python): $sandbox"
else
  step "running the root README's example (Python and Wasm, $IMPROV_EXTFN_PYTHON)"
  "$NODE" out/python-example.js | tee python.out || fail "the root README's example failed"
  grep -q "value: 5" python.out || fail "the root README's example did not print hypot(3, 4) = 5"
fi
step "passed"
