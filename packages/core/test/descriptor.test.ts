/** Descriptors (`descriptor.ts`): parseExternalFn and parseExternalFns, each bad field named with what was wrong. */
import { describe, expect, test } from 'vitest';
import { InvalidDescriptorError, parseExternalFn, parseExternalFns } from '../src/index.js';

const good = {
  name: 'hypot',
  language: 'python',
  body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: true,
};

function issuesOf(input: unknown): { path: string; message: string }[] {
  try {
    parseExternalFn(input);
  } catch (error) {
    expect(error).toBeInstanceOf(InvalidDescriptorError);
    return (error as InvalidDescriptorError).issues;
  }
  throw new Error('expected the descriptor to be rejected');
}

describe('parseExternalFn', () => {
  test('our form parses; pure defaults to false; language is lower-cased', () => {
    expect(parseExternalFn(good)).toEqual(good);
    const { pure: _pure, ...noPure } = good;
    expect(parseExternalFn({ ...noPure, language: 'Python' })).toEqual({ ...good, pure: false });
  });

  test("the engine's form parses to the same descriptor", () => {
    const engine = {
      name: 'hypot',
      language: 'Python',
      body: good.body,
      arg_types: ['Number', 'Number'],
      return_type: 'Number',
      pure: true,
    };
    expect(parseExternalFn(engine)).toEqual(good);
  });

  test('each bad field is named with what was wrong', () => {
    expect(issuesOf({ ...good, argTypes: ['number', 'float'] })).toEqual([
      {
        path: 'argTypes[1]',
        message: expect.stringMatching(
          /expected one of number, boolean, text, datetime, enum .*got "float"/,
        ),
      },
    ]);
    expect(issuesOf({ ...good, name: '' })[0]).toMatchObject({
      path: 'name',
      message: 'must not be empty',
    });
    expect(issuesOf({ ...good, body: undefined })[0]!.path).toBe('body');
    expect(issuesOf({ ...good, pure: 'yes' })[0]!.path).toBe('pure');
    expect(issuesOf({ ...good, language: 'C++' })[0]).toMatchObject({
      path: 'language',
      message: expect.stringMatching(/language id/),
    });
    expect(issuesOf({ ...good, extra: 1 })[0]!.message).toMatch(/extra/);
    expect(issuesOf({ ...good, arg_types: ['Number'], argTypes: undefined })[0]!.path).toBe(
      'return_type',
    );
    expect(issuesOf('hypot')[0]!.path).toBe('');
  });

  test('the error message names the function and every field', () => {
    expect(() => parseExternalFn({ ...good, returnType: 'money', body: 3 })).toThrow(
      /invalid external function descriptor "hypot":\n {2}body: .*\n {2}returnType: expected one of/,
    );
  });

  test('parseExternalFns reads one, a list, or the engine map', () => {
    expect(parseExternalFns(good)).toHaveLength(1);
    expect(parseExternalFns([good, { ...good, name: 'b' }])).toHaveLength(2);
    expect(parseExternalFns({ hypot: good })).toEqual([good]);
    // One descriptor with a field missing is still one descriptor, reported as such.
    expect(() => parseExternalFns({ ...good, body: undefined })).toThrow(/"hypot":\n {2}body:/);
  });
});

test("unknown fields are an error in our form but ignored in the engine's, as serde ignores them", () => {
  const engine = {
    name: 'f',
    language: 'Wasm',
    body: 'wat:(module)',
    arg_types: [],
    return_type: 'Number',
    pure: true,
    doc: 'added by a newer engine',
  };
  expect(parseExternalFn(engine)).toEqual({
    name: 'f',
    language: 'wasm',
    body: 'wat:(module)',
    argTypes: [],
    returnType: 'number',
    pure: true,
  });
  expect(() =>
    parseExternalFn({ name: 'f', language: 'wasm', body: '', argtypes: [], returnType: 'number' }),
  ).toThrow(/argtypes/);
});

describe('@improv/extfn-core/schemas: zod schemas around the same reader', () => {
  test('they read what parseExternalFn reads, and name the same fields with the same messages', async () => {
    const { externalFnSchema, engineExternalFnSchema } = await import('../src/schemas.js');
    expect(externalFnSchema.parse(good)).toEqual(parseExternalFn(good));
    const engine = {
      name: 'f',
      language: 'Wasm',
      body: '',
      arg_types: ['Number'],
      return_type: 'Text',
      doc: 1,
    };
    expect(engineExternalFnSchema.parse(engine)).toEqual(parseExternalFn(engine));
    for (const bad of [
      { ...good, argTypes: ['number', 'float'], pure: 'yes', extra: 1 },
      { ...good, name: '', language: 'C++' },
      'hypot',
    ]) {
      const parsed = externalFnSchema.safeParse(bad);
      expect(parsed.success).toBe(false);
      const issues = parsed.error!.issues.map((i) => ({
        path: i.path
          .map((k) => (typeof k === 'number' ? `[${k}]` : String(k)))
          .join('.')
          .replace(/\.\[/g, '['),
        message: i.message,
      }));
      expect(issues).toEqual(issuesOf(bad));
    }
    // the engine's form is not ours: arg_types is an unknown field there
    expect(externalFnSchema.safeParse(engine).success).toBe(false);
  });
});

test("core's main entry loads no zod (its ~100 modules are 80 ms of a process's start on a slow VM)", async () => {
  const { readFile } = await import('node:fs/promises');
  const { dirname, join } = await import('node:path');
  const src = new URL('../src/', import.meta.url).pathname;
  const seen = new Set<string>();
  const bare = new Set<string>();
  const visit = async (file: string): Promise<void> => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = await readFile(file, 'utf8');
    for (const [, spec] of text.matchAll(/^(?:import|export)\b[^;]*?from '([^']+)'/gms)) {
      if (spec!.startsWith('.')) await visit(join(dirname(file), spec!.replace(/\.js$/, '.ts')));
      else if (!spec!.startsWith('node:')) bare.add(spec!);
    }
  };
  await visit(join(src, 'index.ts'));
  expect(seen.size).toBeGreaterThan(10); // the walk found core's modules
  expect([...bare]).toEqual([]);
  // and the subpath that has the schemas does load it
  expect(await readFile(join(src, 'schemas.ts'), 'utf8')).toMatch(/from 'zod'/);
});
