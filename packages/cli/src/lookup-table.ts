/**
 * A lookup table for keys that come from outside (a cell's text, a flag's
 * unit, a command line's topic, a descriptor's language): made without a
 * prototype, so `constructor`, `__proto__` or `toString` find nothing, as
 * any other unknown key does, rather than Object's own members.
 */
export function lookupTable<T>(entries: Record<string, T>): Readonly<Record<string, T>> {
  return Object.freeze(Object.assign(Object.create(null) as Record<string, T>, entries));
}
