/**
 * What a reflector watches and how it behaves: its options, and the bounds on what it reads
 * from the API server.
 *
 * @module
 */
import type { ObjectEvent, ObjectKind } from "./events.ts";

/**
 * The largest watch event read by default: 16 MiB, ten times the largest object etcd stores
 * (1.5 MiB). A larger one ends the watch, which lists again.
 */
export const DEFAULT_MAX_EVENT_BYTES = 16 * 2 ** 20;

/**
 * The largest LIST answer read by default: 256 MiB, several times the Services or the
 * EndpointSlices of the largest cluster Kubernetes supports (10k Services, 150k Pods).
 */
export const DEFAULT_MAX_LIST_BYTES = 256 * 2 ** 20;

/** What a reflector watches and how it behaves. */
export interface ReflectorOptions {
  /** The kind of object listed and watched. */
  kind: ObjectKind;
  /** `apiVersion` put on list items, which the API sends without one. */
  apiVersion: string;
  /** The collection path, e.g. `/api/v1/services`. */
  path: string;
  /** `labelSelector` sent with every LIST and WATCH. Default none. */
  labelSelector?: string;
  /** `fieldSelector` sent with every LIST and WATCH. Default none. */
  fieldSelector?: string;
  /**
   * The resource may not exist on the server (ServiceCIDR on clusters before 1.33): a 404 or
   * 403 on LIST then means "no such objects"; the LIST is retried every `absentRetryMs`. A LIST
   * of an optional resource that fails otherwise still calls `onListed()` (so it never holds
   * up the initial sync) and is retried with backoff. Default false.
   */
  optional?: boolean;
  /**
   * The resource as older servers serve it, listed when a LIST of `path` answers 404
   * (ServiceCIDR: `networking.k8s.io/v1beta1` on 1.31/1.32 clusters, which upstream's
   * kube-proxy of those releases watches). Every fresh LIST asks for `path` first, so an
   * upgraded cluster is read at the newer version. Default none.
   */
  fallback?: { readonly apiVersion: string; readonly path: string };
  /** Sends a GET for a path with query; the reflector aborts `signal` to cancel it. */
  get(path: string, signal: AbortSignal): Promise<Response>;
  /** Receives every change, in order. */
  onEvent(event: ObjectEvent): void;
  /**
   * Called after every completed LIST (the first one completes the initial sync), and for an
   * optional resource after a failed one too.
   */
  onListed(): void;
  /** Where log lines go. */
  log(line: string): void;
  /** Told why, each time a request failed and will be retried (the line also logged). */
  onRetry?(problem: string): void;
  /** A request or watch with no byte (LIST) or event (WATCH) for this long is aborted. */
  idleTimeoutMs: number;
  /** Retry delays: first `initialMs`, doubling up to `maxMs`, jittered. */
  backoff: { initialMs: number; maxMs: number };
  /** Shortest server-side watch length; each watch asks for 1-2 times this. */
  watchTimeoutSeconds: number;
  /** How often an absent optional resource is listed again, ms. */
  absentRetryMs: number;
  /** LIST page size (`limit`). */
  pageSize: number;
  /** Try the streaming watch-list for the initial state first. Default true. */
  watchList?: boolean;
  /** The largest watch event read, bytes. Default {@link DEFAULT_MAX_EVENT_BYTES}. */
  maxEventBytes?: number;
  /** The largest LIST answer read, bytes. Default {@link DEFAULT_MAX_LIST_BYTES}. */
  maxListBytes?: number;
  /** Aborting it stops the reflector. */
  signal: AbortSignal;
}
