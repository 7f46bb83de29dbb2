/**
 * A structural reader for Pure source, for checks without a Pure
 * interpreter (no Pure parser exists on npm): it tokenizes comments,
 * strings, numbers, identifiers and operators as Pure's lexer does, and
 * splits top-level statements at `;` outside brackets and outside
 * when/with/case … end blocks.
 */

export interface Token {
  kind: 'id' | 'num' | 'str' | 'op';
  text: string;
  line: number;
}

export function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  let line = 1;
  const fail = (why: string): never => {
    throw new SyntaxError(`line ${line}: ${why}`);
  };
  while (i < source.length) {
    const c = source[i]!;
    if (c === '\n') {
      line++;
      i++;
    } else if (/\s/.test(c)) {
      i++;
    } else if (source.startsWith('//', i)) {
      while (i < source.length && source[i] !== '\n') i++;
    } else if (source.startsWith('/*', i)) {
      const end = source.indexOf('*/', i + 2);
      if (end < 0) fail('open comment at end of file');
      line += source.slice(i, end).split('\n').length - 1;
      i = end + 2;
    } else if (c === '"') {
      let j = i + 1;
      while (j < source.length && source[j] !== '"') {
        if (source[j] === '\n') fail('newline in a string constant');
        j += source[j] === '\\' ? 2 : 1;
      }
      if (j >= source.length) fail('unterminated string constant');
      tokens.push({ kind: 'str', text: source.slice(i, j + 1), line });
      i = j + 1;
    } else if (/[0-9]/.test(c)) {
      const m = /^(0x[0-9a-fA-F]+|[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?L?)/.exec(source.slice(i))!;
      tokens.push({ kind: 'num', text: m[0], line });
      i += m[0].length;
    } else if (/[A-Za-z_]/.test(c)) {
      const m = /^[A-Za-z_][A-Za-z_0-9]*(::[A-Za-z_][A-Za-z_0-9]*)*/.exec(source.slice(i))!;
      tokens.push({ kind: 'id', text: m[0], line });
      i += m[0].length;
    } else if ('()[]{},;'.includes(c)) {
      tokens.push({ kind: 'op', text: c, line });
      i++;
    } else {
      const m = /^[-+*/<>=~!@#$%^&|:.\\'?]+/.exec(source.slice(i));
      if (!m) fail(`invalid character ${JSON.stringify(c)}`);
      tokens.push({ kind: 'op', text: m![0], line });
      i += m![0].length;
    }
  }
  return tokens;
}

const OPENERS: Record<string, string> = { '(': ')', '[': ']', '{': '}' };
const BLOCKS = new Set(['when', 'with', 'case']);

/** Top-level statements (token lists, without their `;`); throws on unbalanced text. */
export function statements(source: string): Token[][] {
  const out: Token[][] = [];
  let current: Token[] = [];
  const stack: string[] = [];
  for (const token of tokenize(source)) {
    const t = token.text;
    if (token.kind === 'op' && t in OPENERS) stack.push(OPENERS[t]!);
    else if (token.kind === 'op' && [')', ']', '}'].includes(t)) {
      if (stack.pop() !== t) throw new SyntaxError(`line ${token.line}: unbalanced ${t}`);
    } else if (token.kind === 'id' && BLOCKS.has(t)) stack.push('end');
    else if (token.kind === 'id' && t === 'end') {
      if (stack.pop() !== 'end')
        throw new SyntaxError(`line ${token.line}: end without when/with/case`);
    }
    if (token.kind === 'op' && t === ';' && stack.length === 0) {
      if (current.length === 0) throw new SyntaxError(`line ${token.line}: empty statement`);
      out.push(current);
      current = [];
    } else {
      current.push(token);
    }
  }
  if (stack.length) throw new SyntaxError(`unclosed ${stack.join(', ')} at end of file`);
  if (current.length) throw new SyntaxError(`line ${current[0]!.line}: statement without ;`);
  return out;
}

/** The names a script defines: heads of equations, `let` variables and extern functions. */
export function definedNames(source: string): Set<string> {
  const names = new Set<string>();
  for (const statement of statements(source)) {
    const [first, second] = statement;
    if (!first) continue;
    if (first.text === 'let' && second) names.add(second.text);
    else if (first.text === 'extern') {
      statement.forEach((t, k) => {
        if (t.kind === 'id' && statement[k + 1]?.text === '(') names.add(t.text);
      });
    } else if (first.text === 'nonfix') {
      for (const t of statement.slice(1)) names.add(t.text);
    } else if (first.kind === 'id' && statement.some((t) => t.text === '=')) {
      names.add(first.text);
    }
  }
  return names;
}

/** Every identifier with the given prefix used anywhere in the source. */
export function usedNames(source: string, prefix: string): Set<string> {
  return new Set(
    tokenize(source)
      .filter((t) => t.kind === 'id' && t.text.startsWith(prefix))
      .map((t) => t.text),
  );
}
