/**
 * Label and field selectors as the Kubernetes API server reads them from `labelSelector=` and
 * `fieldSelector=` query parameters, for the test API server.
 *
 * Label selectors support `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)` and
 * `key notin (a,b)`, joined by commas; field selectors support `metadata.name` and
 * `metadata.namespace` with `=`, `==` and `!=`. Anything else is a {@link SelectorError}, which
 * the server answers with 400 Bad Request like the real one.
 *
 * @module
 */

import type { RawObject } from "../../src/source/events.ts";

/** A selector that could not be parsed; the message says which part and why. */
export class SelectorError extends Error {
  /** Always `"SelectorError"`. */
  override name = "SelectorError";
}

/** A parsed selector: whether an object matches it. */
export type Selector = (object: RawObject) => boolean;

type LabelOperator = "exists" | "!exists" | "=" | "!=" | "in" | "notin";

interface Requirement {
  key: string;
  operator: LabelOperator;
  values: string[];
}

/** Label keys: optional DNS prefix and `/`, then a name of letters, digits, `-`, `_`, `.`. */
const LABEL_KEY = /^([a-z0-9]([-a-z0-9.]*[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/;
/** Label values: empty, or letters and digits with `-`, `_`, `.` inside. */
const LABEL_VALUE = /^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$/;

/**
 * Parses a label selector; the empty string selects everything.
 *
 * @example
 * ```ts
 * const selector = parseLabelSelector("!service.kubernetes.io/headless,app in (web,api)");
 * selector({ metadata: { labels: { app: "web" } } }); // true
 * ```
 */
export function parseLabelSelector(text: string): Selector {
  const requirements = splitTerms(text).map(parseRequirement);
  return (object) => {
    const labels = labelsOf(object);
    return requirements.every((r) => matches(r, labels));
  };
}

/**
 * Parses a field selector over `metadata.name` and `metadata.namespace`; the empty string
 * selects everything.
 *
 * @example
 * ```ts
 * parseFieldSelector("metadata.name=node-a")({ metadata: { name: "node-a" } }); // true
 * ```
 */
export function parseFieldSelector(text: string): Selector {
  const terms = splitTerms(text).map((term) => {
    const match = /^([a-zA-Z.]+)\s*(==|=|!=)\s*(.*)$/.exec(term);
    if (match === null) throw new SelectorError(`invalid field selector term "${term}"`);
    const [, field, operator, value] = match;
    if (field !== "metadata.name" && field !== "metadata.namespace") {
      throw new SelectorError(`field label not supported: ${field}`);
    }
    return { field: field.slice("metadata.".length), negate: operator === "!=", value };
  });
  return (object) => {
    const metadata = isRecord(object.metadata) ? object.metadata : {};
    return terms.every(({ field, negate, value }) => {
      const actual = metadata[field];
      const equal = (typeof actual === "string" ? actual : "") === value;
      return negate ? !equal : equal;
    });
  };
}

/** Splits on commas that are not inside parentheses; blank input gives no terms. */
function splitTerms(text: string): string[] {
  const terms: string[] = [];
  let depth = 0;
  let current = "";
  for (const char of text) {
    if (char === "(") depth++;
    if (char === ")") depth--;
    if (depth < 0) throw new SelectorError(`unbalanced ")" in selector "${text}"`);
    if (char === "," && depth === 0) {
      terms.push(current.trim());
      current = "";
    } else {
      current += char;
    }
  }
  if (depth !== 0) throw new SelectorError(`unbalanced "(" in selector "${text}"`);
  terms.push(current.trim());
  if (terms.length === 1 && terms[0] === "") return [];
  for (const term of terms) {
    if (term === "") throw new SelectorError(`empty term in selector "${text}"`);
  }
  return terms;
}

function parseRequirement(term: string): Requirement {
  let match = /^!\s*(\S+)$/.exec(term);
  if (match !== null) return requirement(match[1], "!exists", []);
  match = /^(\S+)\s+(in|notin)\s*\(([^)]*)\)$/.exec(term);
  if (match !== null) {
    const values = match[3].split(",").map((v) => v.trim());
    return requirement(match[1], match[2] === "in" ? "in" : "notin", values);
  }
  match = /^([^=!\s]+)\s*(==|=|!=)\s*(\S*)$/.exec(term);
  if (match !== null) {
    return requirement(match[1], match[2] === "!=" ? "!=" : "=", [match[3]]);
  }
  if (/^\S+$/.test(term)) return requirement(term, "exists", []);
  throw new SelectorError(`unable to parse requirement "${term}"`);
}

function requirement(key: string, operator: LabelOperator, values: string[]): Requirement {
  if (!LABEL_KEY.test(key)) throw new SelectorError(`invalid label key "${key}"`);
  for (const value of values) {
    if (!LABEL_VALUE.test(value)) throw new SelectorError(`invalid label value "${value}"`);
  }
  return { key, operator, values };
}

function matches(r: Requirement, labels: Record<string, string>): boolean {
  const has = Object.hasOwn(labels, r.key);
  const value = labels[r.key];
  switch (r.operator) {
    case "exists":
      return has;
    case "!exists":
      return !has;
    case "=":
    case "in":
      return has && r.values.includes(value);
    case "!=":
    case "notin":
      return !has || !r.values.includes(value);
  }
}

function labelsOf(object: RawObject): Record<string, string> {
  const labels = isRecord(object.metadata) ? object.metadata.labels : undefined;
  const result: Record<string, string> = {};
  if (!isRecord(labels)) return result;
  for (const [key, value] of Object.entries(labels)) {
    if (typeof value === "string") result[key] = value;
  }
  return result;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
