/**
 * Cluster files for tests: objects written as a multi-document YAML stream (each document is
 * JSON, which is valid YAML, so no YAML writer is needed).
 *
 * @module
 */

/** Objects as one multi-document YAML text. */
export function stringify(objects: readonly unknown[]): string {
  return objects.map((o) => JSON.stringify(o, null, 1)).join("\n---\n") + "\n";
}
