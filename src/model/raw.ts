/**
 * Safe reading of raw (untyped) API objects: every access checks the shape it expects.
 *
 * Only `src/model/` uses this; it keeps the converters free of casts and `any`.
 *
 * @module
 */

/** A JSON object (not an array, not null). */
export type JsonObject = Record<string, unknown>;

/** True for a plain JSON object. */
export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `value[key]` when value is an object, else undefined. */
export function get(value: unknown, ...path: string[]): unknown {
  let current = value;
  for (const key of path) {
    if (!isObject(current)) return undefined;
    current = current[key];
  }
  return current;
}

/** The string at `path`, or `fallback` when absent (null/undefined); null when of another type. */
export function getString(value: unknown, path: string[], fallback = ""): string | null {
  const found = get(value, ...path);
  if (found === undefined || found === null) return fallback;
  return typeof found === "string" ? found : null;
}

/** The array at `path`, or `[]` when absent; null when of another type. */
export function getArray(value: unknown, path: string[]): unknown[] | null {
  const found = get(value, ...path);
  if (found === undefined || found === null) return [];
  return Array.isArray(found) ? found : null;
}

/** The string-valued map at `path` (labels, annotations), ignoring non-string values. */
export function getStringMap(value: unknown, path: string[]): Record<string, string> {
  const found = get(value, ...path);
  const result: Record<string, string> = {};
  if (!isObject(found)) return result;
  for (const [k, v] of Object.entries(found)) if (typeof v === "string") result[k] = v;
  return result;
}

/** Text safe to put in a log line: printable names as they are, anything else JSON-quoted. */
export function printable(text: string): string {
  return /^[\w.\-/:@]*$/.test(text) && text.length <= 256 ? text : JSON.stringify(text);
}

/** Describes a JSON value for an error message: `70000`, `"abc"`, `null`. */
export function describe(value: unknown): string {
  if (value === undefined) return "missing";
  const text = JSON.stringify(value);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}
