import { runnerConformanceSuite } from '@improv/extfn-core/testing';
import { test } from 'vitest';
import { wasm } from '../src/index.js';
import { ADD, IDENTITY, LOOP, RAISE_NOPE, RETURNS_I32 } from './fixtures/bodies.js';

// Wasm speaks numbers only (f64 ABI), so the kit runs with types: ['number'].
runnerConformanceSuite(test, () => wasm({ workers: 2 }), {
  types: ['number'],
  bodies: { identity: IDENTITY, add: ADD, raise: RAISE_NOPE, wrongReturn: RETURNS_I32, loop: LOOP },
  loopTimeoutMs: 1_000,
  prefix: 'wasm runner conformance:',
});
