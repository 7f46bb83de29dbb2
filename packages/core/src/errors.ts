/**
 * ExtFnError, the one error type of the runtime: a kind per way a call can
 * fail, structured fields, a fix, and a `Symbol.for` marker so `isInstance`
 * works across two copies of the package.
 */
import { MAX_NAME_LENGTH, nameSpelling, quoted, shownName } from './limits.js';
import type { ValueType } from './value.js';

/** Why a call failed. Every failure the runtime reports is one of these. */
export const EXT_FN_ERROR_KINDS = [
  'NotFound',
  'ArityMismatch',
  'TypeMismatch',
  'LanguageUnavailable',
  'Runtime',
  'Timeout',
  'Sandbox',
] as const;
export type ExtFnErrorKind = (typeof EXT_FN_ERROR_KINDS)[number];

/** Which limit a call hit, when that can be known. */
export type ResourceLimit =
  | 'memory'
  | 'cpu-time'
  | 'processes'
  | 'file-size'
  | 'output'
  | 'wall-clock';

const MARKER = Symbol.for('@improv/extfn.error');

/** The languages this project ships runners for, and the package of each. */
export const FIRST_PARTY_RUNNERS: Readonly<Record<string, string>> = Object.freeze({
  python: '@improv/extfn-python',
  r: '@improv/extfn-r',
  julia: '@improv/extfn-julia',
  pure: '@improv/extfn-pure',
  wasm: '@improv/extfn-wasm',
});

export interface ExtFnErrorFields {
  /** The function being called, when there is one. */
  functionName?: string;
  /** ArityMismatch: the declared arity. TypeMismatch: the declared type. */
  expected?: number | ValueType;
  /**
   * ArityMismatch: the number of arguments given, or what was given instead of
   * an array (`a single Value (number 3), not an array`). TypeMismatch: the type given.
   */
  got?: number | string;
  /** TypeMismatch: the 1-based argument position. */
  position?: number;
  /** Timeout: the deadline in milliseconds. */
  ms?: number;
  /** Runtime: the tail of the interpreter's stderr (traceback, prints). */
  stderr?: string;
  /** Runtime or Timeout: the resource limit that ended the call, when known. */
  limit?: ResourceLimit;
  /** Runtime: the call was cancelled through its AbortSignal. */
  aborted?: boolean;
  /**
   * Runtime: the function's body did not load (it does not parse or compile,
   * or its runner refused it before any row ran), so every call of it fails
   * alike until it is registered anew: an engine can show it once per
   * function instead of once per cell.
   */
  loadFailed?: boolean;
  /** LanguageUnavailable: the language asked for. */
  language?: string;
  /** LanguageUnavailable / NotFound: what is available instead. */
  available?: readonly string[];
  /** Sandbox / LanguageUnavailable / ArityMismatch for arguments not in an array: what to do about it. */
  fix?: string;
  cause?: unknown;
}

/**
 * The one error type of the runtime. Check it with `ExtFnError.isInstance(e)`
 * (works across duplicate installs of this package) and switch on `kind`.
 */
export class ExtFnError extends Error {
  readonly [MARKER] = true;
  readonly kind: ExtFnErrorKind;
  // `declare`: a field is an own property only when set (no `stderr: undefined`
  // on every error, in logs, spreads and Object.keys), and costs nothing to build.
  declare readonly functionName?: string;
  declare readonly expected?: number | ValueType;
  declare readonly got?: number | string;
  declare readonly position?: number;
  declare readonly ms?: number;
  declare readonly stderr?: string;
  declare readonly limit?: ResourceLimit;
  declare readonly aborted?: boolean;
  declare readonly loadFailed?: boolean;
  declare readonly language?: string;
  declare readonly available?: readonly string[];
  declare readonly fix?: string;

  constructor(kind: ExtFnErrorKind, message: string, fields: ExtFnErrorFields = {}) {
    const { cause, ...rest } = fields;
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'ExtFnError';
    this.kind = kind;
    for (const [key, value] of Object.entries(rest)) {
      if (value !== undefined) (this as Record<string, unknown>)[key] = value;
    }
  }

  static isInstance(error: unknown): error is ExtFnError {
    return typeof error === 'object' && error !== null && MARKER in error;
  }

  /**
   * `name` is not registered. A name longer than MAX_NAME_LENGTH, which no
   * function can have, is shown cut (`shownName`), in the message and in
   * `functionName`, with a fix saying so: the message stays short whatever
   * the caller passed. One spelt as no registered name can be (empty,
   * surrounding spaces, control characters: `nameSpelling`) is shown as a
   * JSON string, so a newline or a terminal's escape in it reaches a log or
   * a terminal escaped.
   */
  static notFound(name: string, registered: readonly string[]): ExtFnError {
    const fix = (what: string) =>
      `pass the name the function was registered under (${what}), e.g. registry.names[0]`;
    if (!nameSpelling(name)) {
      const shown = quoted(name, 100);
      return new ExtFnError(
        'NotFound',
        `function ${shown} is not registered: no function name is empty or has surrounding spaces or control characters (registered: ${listed(registered)})`,
        {
          functionName: shown,
          available: registered,
          fix: fix('no surrounding spaces or control characters'),
        },
      );
    }
    const shown = shownName(name);
    const tooLong = shown !== name;
    return new ExtFnError(
      'NotFound',
      tooLong
        ? `function ${shown} is not registered: a name has at most ${MAX_NAME_LENGTH} characters (registered: ${listed(registered)})`
        : `function ${name} is not registered (registered: ${listed(registered)})`,
      {
        functionName: shown,
        available: registered,
        ...(tooLong ? { fix: fix(`at most ${MAX_NAME_LENGTH} characters`) } : {}),
      },
    );
  }

  static arityMismatch(name: string, expected: number, got: number): ExtFnError {
    const shown = shownName(name);
    return new ExtFnError(
      'ArityMismatch',
      `function ${shown}: expected ${expected} argument(s), got ${got}`,
      { functionName: shown, expected, got },
    );
  }

  static typeMismatch(
    name: string,
    position: number,
    expected: ValueType,
    got: string,
  ): ExtFnError {
    const shown = shownName(name);
    return new ExtFnError(
      'TypeMismatch',
      `function ${shown}: argument ${position} expected ${expected}, got ${got}`,
      { functionName: shown, position, expected, got },
    );
  }

  /**
   * No runner for `language`. The fix names `packageName` when the caller
   * knows it (a runner's declared `packageName`), the first-party package for
   * our own languages, and otherwise says what to install without guessing a
   * package name.
   */
  static languageUnavailable(
    name: string,
    language: string,
    installed: readonly string[],
    packageName: string | undefined = Object.hasOwn(FIRST_PARTY_RUNNERS, language)
      ? FIRST_PARTY_RUNNERS[language]
      : undefined,
  ): ExtFnError {
    const list = installed.length ? installed.join(', ') : 'none';
    const fix = packageName
      ? `install ${packageName} and pass its runner to the Registry`
      : `install a runner package for "${language}" (one that implements LanguageRunner from @improv/extfn-core) and pass its runner to the Registry`;
    const shown = shownName(name);
    return new ExtFnError(
      'LanguageUnavailable',
      `function ${shown}: no runner for language "${language}" is installed; ${fix} (installed: ${list})`,
      { functionName: shown, language, available: installed, fix },
    );
  }

  static runtime(
    name: string,
    message: string,
    fields: Omit<ExtFnErrorFields, 'functionName'> = {},
  ): ExtFnError {
    const shown = shownName(name);
    return new ExtFnError('Runtime', `function ${shown}: ${message}`, {
      ...fields,
      functionName: shown,
    });
  }

  static timeout(name: string, ms: number): ExtFnError {
    const shown = shownName(name);
    return new ExtFnError('Timeout', `function ${shown}: timed out after ${ms} ms`, {
      functionName: shown,
      ms,
      limit: 'wall-clock',
    });
  }

  static sandbox(message: string, fix: string, fields: ExtFnErrorFields = {}): ExtFnError {
    const shown = fields.functionName === undefined ? undefined : shownName(fields.functionName);
    const prefix = shown ? `function ${shown}: ` : '';
    return new ExtFnError('Sandbox', `${prefix}${message}; ${fix}`, {
      ...fields,
      functionName: shown,
      fix,
    });
  }

  static aborted(name: string, reason?: unknown): ExtFnError {
    const shown = shownName(name);
    return new ExtFnError('Runtime', `function ${shown}: aborted`, {
      functionName: shown,
      aborted: true,
      cause: reason,
    });
  }

  /** The same error re-addressed to a function (runners may not know the name). */
  withFunctionName(name: string): ExtFnError {
    const shown = shownName(name);
    if (this.functionName === shown) return this;
    const prefix = `function ${shown}: `;
    const old = this.functionName === undefined ? undefined : `function ${this.functionName}: `;
    const message = this.message.startsWith(prefix)
      ? this.message
      : old !== undefined && this.message.startsWith(old)
        ? prefix + this.message.slice(old.length)
        : prefix + this.message;
    const copy = new ExtFnError(this.kind, message, { ...this.fields(), functionName: shown });
    return copy;
  }

  /** The structured fields, for logs and `--json` output. */
  fields(): ExtFnErrorFields {
    const out: Record<string, unknown> = {};
    for (const key of [
      'functionName',
      'expected',
      'got',
      'position',
      'ms',
      'stderr',
      'limit',
      'aborted',
      'loadFailed',
      'language',
      'available',
      'fix',
      'cause',
    ] as const) {
      if (this[key] !== undefined) out[key] = this[key];
    }
    return out as ExtFnErrorFields;
  }

  toJSON(): Record<string, unknown> {
    const { cause: _cause, ...fields } = this.fields();
    return { kind: this.kind, message: this.message, ...fields };
  }
}

/**
 * Any thrown thing as an ExtFnError: ExtFnErrors pass through, anything else
 * becomes Runtime with the original as `cause`.
 */
export function toExtFnError(error: unknown, functionName: string): ExtFnError {
  if (ExtFnError.isInstance(error)) return error.withFunctionName(functionName);
  return ExtFnError.runtime(functionName, `runner failed: ${describeThrown(error)}`, {
    cause: error,
  });
}

/** Most characters of a thrown thing's text that go into a message. */
const THROWN_TEXT_MAX = 1_000;

/**
 * Anything thrown as a line of text (`TypeError: boom`), never throwing
 * itself: an object without a prototype, a `message` getter that throws, a
 * revoked Proxy. Cut to THROWN_TEXT_MAX characters.
 */
export function describeThrown(error: unknown): string {
  const cut = (text: string) =>
    text.length > THROWN_TEXT_MAX ? `${text.slice(0, THROWN_TEXT_MAX)}…` : text;
  try {
    if (error instanceof Error) return cut(`${String(error.name)}: ${String(error.message)}`);
    if (typeof error === 'object' && error !== null) {
      const message = (error as { message?: unknown }).message;
      if (typeof message === 'string') return cut(message);
      try {
        return cut(String(error));
      } catch {
        return Object.prototype.toString.call(error); // no prototype, or a toString that throws
      }
    }
    return cut(String(error));
  } catch {
    return 'a thrown value that cannot be read';
  }
}

/** The names shown in a NotFound message: the first LISTED_MAX, then how many more. */
const LISTED_MAX = 20;
function listed(names: readonly string[]): string {
  if (names.length === 0) return 'none';
  const shown = names.slice(0, LISTED_MAX).map((n) => (n.length > 60 ? `${n.slice(0, 60)}…` : n));
  const more = names.length - shown.length;
  return more > 0 ? `${shown.join(', ')} and ${more} more` : shown.join(', ');
}

/**
 * Makes the errors of a batch's rows: without a stack trace (it would show
 * only core's own frames, and capturing one costs microseconds: seconds for
 * 10^6 bad rows) and one instance per distinct kind and message, so a
 * million rows that fail alike hold one error between them, as rows a
 * runner fails together already do.
 */
export class RowErrors {
  #seen = new Map<string, ExtFnError>();
  #limit: number | undefined;

  /** Until `end`, errors are made without a stack trace. */
  begin(): void {
    try {
      this.#limit = Error.stackTraceLimit;
      Error.stackTraceLimit = 0;
    } catch {
      this.#limit = undefined; // a frozen Error (a locked-down realm): stacks it is
    }
  }

  end(): void {
    if (this.#limit === undefined) return;
    try {
      Error.stackTraceLimit = this.#limit;
    } catch {
      // as begin
    }
  }

  /** `error`, or an earlier one of this batch with the same kind and message. */
  share(error: ExtFnError): ExtFnError {
    const key = `${error.kind}\u0000${error.message}`;
    const seen = this.#seen.get(key);
    if (seen) return seen;
    if (this.#seen.size >= 1_000) this.#seen.clear(); // bounded: distinct messages are not shared
    this.#seen.set(key, error);
    return error;
  }
}
