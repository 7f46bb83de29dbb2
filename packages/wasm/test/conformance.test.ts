/** The runner conformance kit (core/testing) against the Wasm runner. */
import { Value } from '@improv/extfn-core';
import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { test } from 'vitest';
import { wasm } from '../src/index.js';
import { ADD, fnBody, IDENTITY, LOOP, RAISE_NOPE, RETURNS_I32, wat } from './fixtures/bodies.js';

// Fails with "nope" on a negative argument, loops forever on 13, else doubles.
const MIXED = fnBody(
  1,
  `local.get 0 f64.const 0 f64.lt (if (then i32.const 16 global.set 0 unreachable))
   (loop $spin local.get 0 f64.const 13 f64.eq br_if $spin)
   local.get 0 local.get 0 f64.add`,
  `(memory (export "memory") 1) (data (i32.const 16) "nope\\00")
   (global (export "improv_error") (mut i32) (i32.const 0))`,
);

// Returns what the previous call left in a mutable global (-1 at first), then leaves args[0] there.
const REMEMBER = wat(
  `(module (global $g (mut f64) (f64.const -1))
     (func (export "improv_call") (param f64) (result f64) (local $old f64)
       global.get $g local.set $old local.get 0 global.set $g local.get $old))`,
);

// Wasm speaks numbers only (f64 ABI), so the kit runs with types: ['number'].
runnerConformanceSuite(test, () => wasm({ workers: 2 }), {
  types: ['number'],
  bodies: {
    identity: IDENTITY,
    add: ADD,
    raise: RAISE_NOPE,
    noLoad: 'wat:(module (func',
    wrongReturn: RETURNS_I32,
    loop: LOOP,
    mixedBatch: MIXED,
    remember: REMEMBER,
  },
  verbatim: [
    {
      name: 'CRLF, tabs and non-ASCII comments in WAT',
      body: wat(
        '(module ;; résumé "quoted" \\ 𝄞\r\n\t(func (export "improv_call") (result f64)\r\n\t\tf64.const 42.5))',
      ),
      returnType: 'number',
      expected: Value.number(42.5),
    },
  ],
  unsupported: { random: 'WebAssembly modules cannot import a random source' },
  loopTimeoutMs: 1_000,
  prefix: 'wasm runner conformance:',
});
