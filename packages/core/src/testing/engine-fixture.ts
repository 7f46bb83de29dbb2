/**
 * Values and descriptors exactly as the Rust engine (serde_json, externally
 * tagged enums) writes them: the shapes a saved model carries. Runner tests
 * use the descriptors (hypot, hyp_r, add_jl, add_pure, double, stamp) to show
 * that an engine model loads and runs.
 */
export const engineSerdeFixture = {
  about:
    'Values and external-function descriptors as the Rust engine (serde_json, default externally tagged enums) writes them. A model saved by the engine carries these shapes.',
  values: [
    {
      Number: 5,
    },
    {
      Number: -0,
    },
    {
      Number: 1e-300,
    },
    {
      Boolean: true,
    },
    {
      Text: 'Résumé ✓ "quoted" \\ back\nslash',
    },
    {
      DateTime: '2025-03-31T23:59:59.123456789Z',
    },
    {
      DateTime: '1969-07-20T20:17:40Z',
    },
    {
      Enum: 0,
    },
    {
      Enum: 4294967295,
    },
    {
      Error: {
        kind: 'TypeMismatch',
        source_measure: null,
      },
    },
    {
      Error: {
        kind: 'DivisionByZero',
        source_measure: 100,
      },
    },
    {
      Error: {
        kind: {
          Custom: 'external function timed out after 5s',
        },
        source_measure: 200,
      },
    },
  ],
  value_types: ['Number', 'Boolean', 'Text', 'DateTime', 'Enum'],
  external_fns: {
    hypot: {
      name: 'hypot',
      language: 'Python',
      body: 'result = (args[0]**2 + args[1]**2) ** 0.5',
      arg_types: ['Number', 'Number'],
      return_type: 'Number',
      pure: true,
    },
    hyp_r: {
      name: 'hyp_r',
      language: 'R',
      body: 'result <- sqrt(args[[1]]^2 + args[[2]]^2)',
      arg_types: ['Number', 'Number'],
      return_type: 'Number',
      pure: true,
    },
    add_jl: {
      name: 'add_jl',
      language: 'Julia',
      body: '    result = args[1] + args[2]',
      arg_types: ['Number', 'Number'],
      return_type: 'Number',
      pure: true,
    },
    add_pure: {
      name: 'add_pure',
      language: 'Pure',
      body: 'let result = args!0 + args!1;',
      arg_types: ['Number', 'Number'],
      return_type: 'Number',
      pure: true,
    },
    double: {
      name: 'double',
      language: 'Wasm',
      body: 'wat:(module (func (export "improv_call") (param f64) (result f64) local.get 0 local.get 0 f64.add))',
      arg_types: ['Number'],
      return_type: 'Number',
      pure: true,
    },
    stamp: {
      name: 'stamp',
      language: 'Python',
      body: "result = args[0].isoformat() + ' / ' + str(args[1])",
      arg_types: ['DateTime', 'Enum'],
      return_type: 'Text',
      pure: false,
    },
  },
  notes: [
    "serde_json refuses to write NaN or infinite f64 values, so an engine file never holds them; this runtime's own JSON must carry them.",
    "chrono's DateTime<Utc> keeps nanoseconds; a JS Date keeps milliseconds. Decide and document what happens to the rest.",
    'MeasureId is a newtype over an integer and serializes as a bare number.',
  ],
} as const;
