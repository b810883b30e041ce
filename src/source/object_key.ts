/**
 * The identity of a raw object inside a source: `Kind/namespace/name`, or `Kind/name` for
 * cluster-scoped kinds.
 *
 * Sources use the key to tell an update of an object from the add of another one, and to find
 * the previous version of an object when it changes or disappears.
 *
 * @module
 */

import type { ObjectKind, RawObject } from "./events.ts";

/** The kinds that live outside namespaces; their keys have no namespace part. */
const CLUSTER_SCOPED: ReadonlySet<ObjectKind> = new Set<ObjectKind>(["Node", "ServiceCIDR"]);

/**
 * Whether objects of `kind` are cluster-scoped (Node, ServiceCIDR) rather than namespaced
 * (Service, EndpointSlice).
 *
 * @example
 * ```ts
 * isClusterScoped("Node"); // true
 * isClusterScoped("Service"); // false
 * ```
 */
export function isClusterScoped(kind: ObjectKind): boolean {
  return CLUSTER_SCOPED.has(kind);
}

/**
 * The key of `obj` as an object of `kind`: `Kind/namespace/name` for namespaced kinds,
 * `Kind/name` for cluster-scoped ones (a namespace on a cluster-scoped object is ignored).
 *
 * Returns `undefined` when the object has no usable identity: `metadata.name` missing, empty or
 * not a string, or a namespaced kind without a non-empty string `metadata.namespace`. Names are
 * not validated further; that is the model's job.
 *
 * @example
 * ```ts
 * objectKey("Service", { metadata: { namespace: "default", name: "web" } });
 * // "Service/default/web"
 * objectKey("Node", { metadata: { name: "node-a" } }); // "Node/node-a"
 * objectKey("Service", { metadata: {} }); // undefined
 * ```
 */
export function objectKey(kind: ObjectKind, obj: RawObject): string | undefined {
  const metadata = obj.metadata;
  if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) {
    return undefined;
  }
  const { name, namespace } = metadata as Record<string, unknown>;
  if (typeof name !== "string" || name === "") return undefined;
  // Percent-encoded: names holding "/" (a file allows them) must not collide.
  if (isClusterScoped(kind)) return `${kind}/${encodeURIComponent(name)}`;
  if (typeof namespace !== "string" || namespace === "") return undefined;
  return `${kind}/${encodeURIComponent(namespace)}/${encodeURIComponent(name)}`;
}
