/** Descriptor files (`descriptor-file.ts`): our form, the engine's form and its model file's `external_fns` map, each mistake named by field or key. */
import { engineSerdeFixture } from '@improv/extfn-core/testing';
import { describe, expect, test } from 'vitest';
import { CliError } from '../src/cli-error.js';
import { parseDescriptorText } from '../src/descriptor-file.js';

const hypot = {
  name: 'hypot',
  language: 'python',
  body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
  argTypes: ['number', 'number'],
  returnType: 'number',
  pure: true,
};

function failure(text: string): CliError {
  try {
    parseDescriptorText(text, 'fn.json');
  } catch (error) {
    expect(error).toBeInstanceOf(CliError);
    return error as CliError;
  }
  throw new Error('expected a failure');
}

describe('parseDescriptorText', () => {
  test('our form, the engine form, an array and the engine map', () => {
    expect(parseDescriptorText(JSON.stringify(hypot), 'f')).toEqual([hypot]);
    expect(parseDescriptorText(`\uFEFF${JSON.stringify(hypot)}`, 'f')).toEqual([hypot]);
    const engine = {
      name: 'hyp_r',
      language: 'R',
      body: 'result <- 1',
      arg_types: ['Number', 'DateTime'],
      return_type: 'Text',
      pure: false,
    };
    expect(parseDescriptorText(JSON.stringify(engine), 'f')).toEqual([
      {
        name: 'hyp_r',
        language: 'r',
        body: 'result <- 1',
        argTypes: ['number', 'datetime'],
        returnType: 'text',
        pure: false,
      },
    ]);
    expect(parseDescriptorText(JSON.stringify([hypot, engine]), 'f').map((f) => f.name)).toEqual([
      'hypot',
      'hyp_r',
    ]);
    expect(
      parseDescriptorText(JSON.stringify({ hypot, hyp_r: engine }), 'f').map((f) => f.name),
    ).toEqual(['hypot', 'hyp_r']);
  });

  test('a missing field is named as missing (not mistaken for an engine map)', () => {
    const { body: _body, ...noBody } = hypot;
    const error = failure(JSON.stringify(noBody));
    expect(error.kind).toBe('BadInput');
    expect(error.message).toContain('fn.json: invalid descriptor "hypot"');
    expect(error.message).toContain('body: missing (expected string)');
    expect(error.fix).toContain('"body"');
  });

  test('a wrong type name lists the type names', () => {
    const error = failure(JSON.stringify({ ...hypot, argTypes: ['number', 'float'] }));
    expect(error.message).toContain(
      'argTypes[1]: expected one of number, boolean, text, datetime, enum',
    );
    expect(error.message).toContain('got "float"');
  });

  test('an unknown language names the languages there are', () => {
    const error = failure(JSON.stringify({ ...hypot, language: 'cobol' }));
    expect(error.message).toBe(
      'fn.json: function hypot has language "cobol", which improv-extfn does not know',
    );
    expect(error.fix).toBe(
      'use one of python, r, julia, pure, wasm, or load a runner package for it with --runner PACKAGE',
    );
  });

  test('not JSON, not an object, nothing inside', () => {
    expect(failure('{"name": ').message).toMatch(
      /^fn\.json is not valid JSON: line 1, column 10: Unexpected end of JSON input$/,
    );
    expect(failure('{\n  "a": 1,\n  oops\n}').message).toMatch(
      /^fn\.json is not valid JSON: line 3, column 3: /,
    );
    expect(failure('42').message).toBe('fn.json holds number, not a descriptor');
    expect(failure('[]').message).toBe('fn.json holds no descriptors');
  });

  test('an engine model file: the functions of its external_fns', () => {
    const fns = parseDescriptorText(JSON.stringify(engineSerdeFixture), 'model.json');
    expect(fns.map((f) => `${f.name}:${f.language}`)).toEqual([
      'hypot:python',
      'hyp_r:r',
      'add_jl:julia',
      'add_pure:pure',
      'double:wasm',
      'stamp:python',
    ]);
  });

  test('a bad entry of a map is named by its key', () => {
    const error = failure(JSON.stringify({ hypot, bad: { ...hypot, name: 'bad', returnType: 7 } }));
    expect(error.message).toContain('fn.json ["bad"]: invalid descriptor "bad"');
  });

  test('two functions of one name are refused, naming the name and where they are', () => {
    const error = failure(JSON.stringify([hypot, { ...hypot, body: 'result = 0' }, hypot]));
    expect(error.kind).toBe('BadInput');
    expect(error.exitCode).toBe(2);
    expect(error.message).toBe('fn.json: 3 functions are named "hypot" ([0], [1], [2])');
    expect(error.fix).toBe('give each function its own name: --name picks a function by name');
  });

  test("a map key that is not its function's name is refused, naming both", () => {
    const error = failure(JSON.stringify({ foo: hypot }));
    expect(error.kind).toBe('BadInput');
    expect(error.message).toBe(
      'fn.json ["foo"]: the key "foo" and the function\'s name "hypot" differ',
    );
    expect(error.fix).toContain('rename the key to "hypot", or the name to "foo"');
    const model = failure(JSON.stringify({ external_fns: { foo: hypot } }));
    expect(model.message).toContain('fn.json .external_fns["foo"]: the key "foo"');
  });
});
