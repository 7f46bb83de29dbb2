/**
 * The descriptor's content address: jobs name a descriptor by it, the host
 * stores the descriptor under it, and a worker checks the two agree. A
 * vectorized function and a per-row one with the same text are different
 * code, so they must not share an address (one would be stored over the
 * other, and workers would run it the other way).
 */
import { createHash } from 'node:crypto';
import type { ExternalFn } from '@improv/extfn-core';
import { expect, test } from 'vitest';
import { descriptorDigest } from '../src/wire.js';

const perRow: ExternalFn = {
  name: 'centred',
  language: 'python',
  body: 'result = args[0]',
  argTypes: ['number'],
  returnType: 'number',
  pure: true,
};

test('a vectorized descriptor and the same text per row have different digests', () => {
  expect(descriptorDigest({ ...perRow, vectorized: true })).not.toBe(descriptorDigest(perRow));
  expect(descriptorDigest({ ...perRow, vectorized: false })).toBe(descriptorDigest(perRow));
  expect(descriptorDigest({ ...perRow, name: 'other' })).not.toBe(descriptorDigest(perRow));
});

test("a per-row descriptor's digest is the one earlier versions published (hosts and workers of both agree)", () => {
  const earlier = createHash('sha256')
    .update(JSON.stringify(['centred', 'python', 'result = args[0]', ['number'], 'number']))
    .digest('base64url');
  expect(descriptorDigest(perRow)).toBe(earlier);
});
