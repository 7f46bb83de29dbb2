/** Shared by the Julia tests: finding julia, the bytes a one-shot call sends, and a real Julia parser (tree-sitter-julia). */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { type ExternalFn, type Value, valueToJson } from '@improv/extfn-core';
import { encodeFrame } from '@improv/extfn-interpreter';
import Parser from 'web-tree-sitter';

/** The julia a real test would use: IMPROV_EXTFN_JULIA, else `julia` on PATH. */
function findJulia(): string | undefined {
  const explicit = process.env.IMPROV_EXTFN_JULIA;
  if (explicit) return explicit;
  try {
    return execFileSync('sh', ['-c', 'command -v julia'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}
export const JULIA = findJulia();
export const juliaFound = JULIA !== undefined;
export const noJulia = 'skipped: julia is not installed here';

/**
 * The exact bytes a one-shot call writes to the interpreter's stdin
 * (docs/protocol.md): the driver preamble, `load`, `call`, `exit`. The body
 * and the arguments travel only inside the JSON frames.
 */
export function oneShotInput(driverSource: string, fn: ExternalFn, args: readonly Value[]): Buffer {
  const source = Buffer.from(driverSource, 'utf8');
  return Buffer.concat([
    Buffer.from(`${source.length}\n`),
    source,
    encodeFrame({
      op: 'load',
      id: 1,
      fn: { name: fn.name, body: fn.body, argTypes: fn.argTypes, returnType: fn.returnType },
      maxOutputBytes: 1_048_576,
    }),
    encodeFrame({ op: 'call', id: 2, rows: [args.map(valueToJson)] }),
    encodeFrame({ op: 'exit' }),
  ]);
}

let parser: Parser | undefined;
/** A real Julia parser: tree-sitter-julia's grammar compiled to WebAssembly. */
export async function juliaParser(): Promise<Parser> {
  if (parser) return parser;
  await Parser.init();
  const wasm = readFileSync(
    new URL('../node_modules/tree-sitter-julia/tree-sitter-julia.wasm', import.meta.url),
  );
  const language = await Parser.Language.load(wasm);
  parser = new Parser();
  parser.setLanguage(language);
  return parser;
}

/** ERROR and MISSING nodes of a parse, with where they are: empty means the text is valid Julia. */
export async function juliaSyntaxErrors(source: string): Promise<string[]> {
  const tree = (await juliaParser()).parse(source);
  const errors: string[] = [];
  const walk = (node: Parser.SyntaxNode) => {
    if (node.type === 'ERROR' || node.isMissing) {
      errors.push(
        `${node.isMissing ? 'missing' : 'error'} at ${node.startPosition.row + 1}:${node.startPosition.column + 1}: ${node.text.slice(0, 60)}`,
      );
    }
    for (const child of node.children) walk(child);
  };
  walk(tree.rootNode);
  tree.delete();
  return errors;
}

/**
 * The text form of what the driver builds as an expression at `load`: the
 * body as the body of a function of `args` (driver.jl, `load!`).
 */
export function bodyAsFunction(body: string): string {
  return `function (args)\n    local result\n${body}\n    result\nend\n`;
}

/** The ExtFnError a promise rejects with (the kit's helper, shared by every package's tests). */
export { rejection as failure } from '@improv/extfn-core/testing';
