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
