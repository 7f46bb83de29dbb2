/**
 * `@improv/extfn-core/schemas`: zod schemas of values and descriptors, for
 * an engine that builds its own zod schemas around them (a model file's).
 * Apart from the main entry so that loading core does not load zod: the
 * descriptor schemas wrap the same reader as `parseExternalFn`
 * (descriptor-reader.ts), with the same issues.
 */
import { z } from 'zod';
import { type ExternalFn, readExternalFn } from './descriptor-reader.js';

export { encodedValueSchema, engineValueSchema, valueSchema } from './value-schema.js';

function descriptorSchema(form: 'ours' | 'engine'): z.ZodType<ExternalFn, unknown> {
  return z.unknown().transform((input, ctx) => {
    const read = readExternalFn(input, form);
    if (read.ok) return read.fn;
    for (const issue of read.issues) {
      ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
    }
    return z.NEVER;
  });
}

/** Our form: unknown fields are an error. */
export const externalFnSchema = descriptorSchema('ours');

/** The engine's serde form (`arg_types`, `return_type`): unknown fields are ignored, as serde does by default. */
export const engineExternalFnSchema = descriptorSchema('engine');
