/** The values each type's identity test sends through the runner and expects back. */
import { Value as V, type Value, type ValueType } from '../value.js';

export interface SampleOptions {
  /** Text values with NUL characters are supported (default true). */
  textNul?: boolean;
  /** Lone surrogates are sent unless the runner opted out with a reason. */
  loneSurrogates: boolean;
  /** Fraction digits of seconds a datetime keeps (default 3). */
  datetimeDigits?: 0 | 3 | 6 | 9;
}

/** Texts a UTF-8 round trip would change: the protocol carries them as `\u` escapes. */
export const LONE_SURROGATES = ['\uD800', 'a\uDFFFb', '\uDBFF\uDBFF', 'x\uD834'];

export const SAMPLES: Record<ValueType, (o: SampleOptions) => Value[]> = {
  number: () =>
    [
      0,
      -0,
      1,
      -1.5,
      0.1,
      1e-300,
      1.7976931348623157e308,
      5e-324,
      Number.NaN,
      Infinity,
      -Infinity,
    ].map(V.number),
  boolean: () => [V.boolean(true), V.boolean(false)],
  text: (o) =>
    [
      '',
      'hello',
      'Résumé ✓ "quoted" \\ back\nslash',
      "it's '''triple''' and \"\"\"triple\"\"\"",
      '\t\r\n tabs and CRLF\r\n',
      'non-BMP: 𝄞 😀 𐍈',
      '$x #{y} %s {0} `z`',
      ...(o.textNul === false ? [] : ['nul:\u0000:end']),
    ].map(V.text),
  datetime: (o) => {
    const digits = o.datetimeDigits ?? 3;
    const fraction = digits === 0 ? '' : `.${'123456789'.slice(0, digits)}`;
    return [
      V.datetime('1969-07-20T20:17:40Z'),
      V.datetime('1970-01-01T00:00:00Z'),
      V.datetime(`2025-03-31T23:59:59${fraction}Z`),
      V.datetime('2000-02-29T12:00:00+02:00'),
      // the ends of the range every runner carries
      V.datetime('0001-01-01T00:00:00Z'),
      V.datetime(`9999-12-31T23:59:59${digits === 0 ? '' : `.${'9'.repeat(digits)}`}Z`),
      // the ends of a nanosecond column (i64, Arrow's timestamp[ns]), inside and just outside
      ...(digits === 9
        ? [
            '1677-09-21T00:12:43.145224192Z',
            '2262-04-11T23:47:16.854775807Z',
            '1677-09-21T00:12:43.145224191Z',
            '2262-04-11T23:47:16.854775808Z',
          ]
        : [
            '1677-09-21T00:12:44Z',
            '2262-04-11T23:47:16Z',
            '1677-09-21T00:12:43Z',
            '2262-04-11T23:47:17Z',
          ]
      ).map((iso) => V.datetime(iso)),
    ];
  },
  enum: () => [0, 1, 7, 4_294_967_295].map(V.enum),
};
