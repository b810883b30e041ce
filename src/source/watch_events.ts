/**
 * What the API server's watch sends and what a reflector keeps of it: parsing one watch event,
 * the Status of an `ERROR` event, the watch-list's end bookmark, the record a store remembers
 * of each object, and the events a relist yields. Pure: no requests here.
 *
 * @module
 */

import type { ObjectEvent, ObjectKind, RawObject } from "./events.ts";
import { ApiStatusError, isRecord } from "./api_http.ts";

/**
 * The events that turn a store holding `previous` into one holding `next` (both by object
 * key): adds and updates in `next`'s order, then deletes in `previous`'s order. An object
 * whose resourceVersion is unchanged (or, without one, whose content is unchanged) gives no
 * event.
 *
 * @example
 * ```ts
 * const before = new Map([["Service/default/a", a1]]);
 * const after = new Map([["Service/default/b", b1]]);
 * relistEvents("Service", before, after); // add b, then delete a
 * ```
 */
export function relistEvents(
  kind: ObjectKind,
  previous: ReadonlyMap<string, RawObject>,
  next: ReadonlyMap<string, RawObject>,
): ObjectEvent[] {
  const events: ObjectEvent[] = [];
  for (const [key, current] of next) {
    const old = previous.get(key);
    if (old === undefined) events.push({ kind, current });
    else if (!sameVersion(old, current)) events.push({ kind, previous: old, current });
  }
  for (const [key, old] of previous) {
    if (!next.has(key)) events.push({ kind, previous: old });
  }
  return events;
}

/**
 * The part of an object the store keeps: everything downstream reads of a `previous` (kind,
 * namespace and name) and what tells versions apart (resourceVersion). The whole object is
 * converted into the proxy's model as it arrives; keeping it too would hold every Service and
 * EndpointSlice twice (~100 MB at 10k services × 10 endpoints). An object without a
 * resourceVersion is kept whole, since only its content tells whether it changed.
 */
export function remembered(object: RawObject): RawObject {
  const metadata = isRecord(object.metadata) ? object.metadata : {};
  if (typeof metadata.resourceVersion !== "string" || metadata.resourceVersion === "") {
    return object;
  }
  const { namespace, name, resourceVersion } = metadata;
  return {
    kind: object.kind,
    apiVersion: object.apiVersion,
    metadata: namespace === undefined
      ? { name, resourceVersion }
      : { namespace, name, resourceVersion },
  };
}

/** One watch event, checked for shape only. */
export interface WatchEvent {
  readonly type: unknown;
  readonly object: RawObject;
}

/** A watch sent something that is not a watch event: not JSON, or without an object. */
export class BadWatchEventError extends Error {
  /** Always `"BadWatchEventError"`. */
  override name = "BadWatchEventError";
}

/**
 * One watch event, checked for shape only; throws {@link BadWatchEventError} (quoting at most
 * 100 characters of the line) for anything else.
 */
export function parseWatchEvent(line: string): WatchEvent {
  let event: unknown;
  try {
    event = JSON.parse(line);
  } catch {
    throw new BadWatchEventError(`the watch sent a line that is not JSON: ${quote(line)}`);
  }
  if (!isRecord(event) || !isRecord(event.object)) {
    throw new BadWatchEventError(`the watch sent an event without an object: ${quote(line)}`);
  }
  return { type: event.type, object: event.object };
}

/** At most 100 characters of `line`, as JSON (so control characters stay on one line). */
function quote(line: string): string {
  return JSON.stringify(line.length > 100 ? `${line.slice(0, 100)}…` : line);
}

/** The error a watch `ERROR` event's Status stands for. */
export function watchError(object: RawObject): ApiStatusError {
  const status = typeof object.code === "number" ? object.code : 500;
  const reason = typeof object.reason === "string" ? object.reason : undefined;
  const message = typeof object.message === "string" ? object.message : "watch error";
  return new ApiStatusError(`${status} ${reason ?? ""}: ${message}`, { status, reason });
}

export function resourceVersionOf(object: RawObject): string | undefined {
  const rv = isRecord(object.metadata) ? object.metadata.resourceVersion : undefined;
  return typeof rv === "string" && rv !== "" ? rv : undefined;
}

/** The bookmark that ends a watch-list's initial events. */
export function initialEventsEnd(object: RawObject): boolean {
  const metadata = isRecord(object.metadata) ? object.metadata : {};
  const annotations = isRecord(metadata.annotations) ? metadata.annotations : {};
  return annotations["k8s.io/initial-events-end"] === "true";
}

/** Same object version: equal resourceVersions, or equal content when one has none. */
export function sameVersion(a: RawObject, b: RawObject): boolean {
  const rvA = isRecord(a.metadata) ? a.metadata.resourceVersion : undefined;
  const rvB = isRecord(b.metadata) ? b.metadata.resourceVersion : undefined;
  if (typeof rvA === "string" && rvA !== "" && typeof rvB === "string" && rvB !== "") {
    return rvA === rvB;
  }
  return canonicalJson(a) === canonicalJson(b);
}

function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => {
    if (!isRecord(v)) return v;
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, v[k]]));
  });
}
