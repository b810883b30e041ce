/**
 * The proxy's own health: upstream kube-proxy's `/healthz` and `/livez` (port 10256), as a
 * {@link ProxyHealth} state on the injected clock and a pure `Request → Response` handler.
 *
 * The rules are upstream's (`pkg/proxy/healthcheck/proxy_health.go`):
 * - The proxy is healthy while it is starting up: until the sync loop starts, nothing counts.
 * - Once it runs, it is unhealthy when a change has been waiting ({@link ProxyHealth.queued})
 *   for `healthTimeout` or longer without a successful sync ({@link ProxyHealth.updated}).
 *   `healthTimeout` is twice the sync period ({@link healthTimeoutMs}).
 * - `/healthz` is also 503 while the Node is not eligible (`nodeEligible: false`): being deleted,
 *   tainted `ToBeDeletedByClusterAutoscaler`, or missing once the initial state is known
 *   (upstream's `NodeEligible()` answers false without a Node). While the proxy starts, before
 *   the Node's state is known, it counts as eligible. `/livez` ignores the Node, so a draining
 *   node is not restarted.
 * - The body is upstream's `ProxyHealth` as Go's `json.Marshal` writes it: `lastUpdated`,
 *   `currentTime`, `nodeEligible` (`/healthz` only), `healthy`, and `status` per IP family
 *   (omitted until the sync loop starts, and when the families are not given), times in RFC 3339 with the fraction's trailing zeros
 *   dropped. A healthy answer reports `lastUpdated` as the current time (upstream keeps that
 *   for compatibility with releases where it meant "the sync loop ran"); an unhealthy one
 *   reports the last successful sync.
 *
 * @example
 * ```ts
 * const health = new ProxyHealth({ healthTimeoutMs: healthTimeoutMs(30_000) });
 * const server = serveHealth("0.0.0.0:10256", healthHandler(health));
 * health.started(); // the sync loop starts
 * health.queued(); // a change arrived
 * health.updated(); // a sync succeeded
 * await server?.close();
 * ```
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import { type Clock, realClock } from "../runner/clock.ts";
import { type HttpServer, ServeError, serveHttp, type ServeOptions } from "./serve.ts";

export { type HttpServer, ServeError, type ServeOptions };

/** The paths {@link healthHandler} answers. */
export type HealthPath = "/healthz" | "/livez";

/** Upstream's health timeout for a sync period: twice the period. */
export function healthTimeoutMs(syncPeriodMs: number): number {
  return 2 * syncPeriodMs;
}

/** Options of a {@link ProxyHealth}. */
export interface ProxyHealthOptions {
  /**
   * How long a queued change may wait for a successful sync before the proxy is unhealthy, in
   * milliseconds. Upstream: `2 × syncPeriod` (see {@link healthTimeoutMs}).
   */
  healthTimeoutMs: number;
  /** Default {@link realClock}. */
  clock?: Clock;
  /**
   * The IP families the proxy programs (`NodeFacts.families`), each reported under `status`
   * (one sync serves them all, so they share one state). Default none: `status` is left out
   * rather than naming a family the proxy may not program.
   */
  families?: readonly IPFamily[];
}

/** A snapshot of the proxy's health, as the handler reports it. */
export interface HealthStatus {
  /** The sync rules alone (what `/livez` reports); ignores the Node. */
  readonly healthy: boolean;
  /** The Node is known and not going away; `/healthz` also requires this. */
  readonly nodeEligible: boolean;
  /** The families reported under `status`. */
  readonly families: readonly IPFamily[];
  /** Clock time of the last successful sync (or of the loop's start), if any. */
  readonly lastUpdated: number | undefined;
  /** Clock time when the snapshot was taken. */
  readonly currentTime: number;
}

/**
 * The proxy's health state. Call {@link queued} when a change arrives that needs a sync,
 * {@link started} when the sync loop starts, {@link updated} after every successful sync and
 * {@link syncNode} whenever the Node's state is known. Reads go through {@link status}.
 */
export class ProxyHealth {
  readonly #clock: Clock;
  readonly #timeoutMs: number;
  readonly #families: readonly IPFamily[];
  #lastUpdated: number | undefined;
  #oldestQueued: number | undefined;
  #nodeEligible = true;

  /** Creates the state of a proxy that is starting up: healthy, node eligible. */
  constructor(options: ProxyHealthOptions) {
    if (!(options.healthTimeoutMs > 0)) {
      throw new RangeError(
        `cannot use health timeout ${options.healthTimeoutMs} ms: must be greater than 0`,
      );
    }
    this.#clock = options.clock ?? realClock;
    this.#timeoutMs = options.healthTimeoutMs;
    this.#families = Object.freeze([...(options.families ?? [])]);
  }

  /**
   * A change arrived that needs a sync. Only the oldest unsynced change counts: later calls
   * before the next {@link updated} change nothing (upstream's `QueuedUpdate`).
   */
  queued(): void {
    this.#oldestQueued ??= this.#clock.now();
  }

  /** A sync succeeded: nothing is pending any more (upstream's `Updated`). */
  updated(): void {
    this.#oldestQueued = undefined;
    this.#lastUpdated = this.#clock.now();
  }

  /**
   * The sync loop starts (the initial state has been listed). Upstream calls `Updated` at this
   * point "in case Sync() never succeeds"; here, changes queued while listing stay pending but
   * count from now, so a proxy whose first sync never succeeds turns unhealthy `healthTimeout`
   * after the start instead of staying healthy until the next change arrives.
   */
  started(): void {
    const now = this.#clock.now();
    this.#lastUpdated = now;
    if (this.#oldestQueued !== undefined) this.#oldestQueued = now;
  }

  /**
   * The Node as the source last saw it, `null` when there is none. It is eligible unless it is
   * missing or being deleted (a deletionTimestamp, or upstream's
   * `ToBeDeletedByClusterAutoscaler` taint); `/healthz` answers 503 while it is not.
   */
  syncNode(node: { readonly deleting: boolean } | null): void {
    this.#nodeEligible = node !== null && !node.deleting;
  }

  /** The current state; pure apart from reading the clock. */
  status(): HealthStatus {
    const currentTime = this.#clock.now();
    const late = this.#lastUpdated !== undefined && this.#oldestQueued !== undefined &&
      currentTime - this.#oldestQueued >= this.#timeoutMs;
    return {
      healthy: !late,
      nodeEligible: this.#nodeEligible,
      families: this.#families,
      lastUpdated: this.#lastUpdated,
      currentTime,
    };
  }
}

/**
 * Formats a clock time as Go's `json.Marshal` writes a UTC `time.Time` (RFC 3339, the
 * fraction's trailing zeros dropped): `2024-05-01T12:00:00.25Z`, and Go's zero time
 * `0001-01-01T00:00:00Z` for "never".
 */
export function formatJsonTime(ms: number | undefined): string {
  if (ms === undefined) return "0001-01-01T00:00:00Z";
  const iso = new Date(ms).toISOString(); // 2024-05-01T12:00:00.250Z
  const fraction = iso.slice(20, 23).replace(/0+$/, "");
  return `${iso.slice(0, 19)}${fraction === "" ? "" : `.${fraction}`}Z`;
}

/**
 * The body of `/healthz` (with `nodeEligible`) or `/livez` (without), field for field and in
 * the order of upstream's `ProxyHealth`. Pure.
 */
export function healthBody(s: HealthStatus, path: HealthPath): string {
  const healthy = path === "/healthz" ? s.healthy && s.nodeEligible : s.healthy;
  const status: Record<string, { lastUpdated: string; healthy: boolean }> = {};
  if (s.lastUpdated !== undefined) {
    for (const family of [...s.families].sort()) {
      status[family] = { lastUpdated: formatJsonTime(s.lastUpdated), healthy: s.healthy };
    }
  }
  return JSON.stringify({
    lastUpdated: formatJsonTime(healthy ? s.currentTime : s.lastUpdated),
    currentTime: formatJsonTime(s.currentTime),
    ...(path === "/healthz" ? { nodeEligible: s.nodeEligible } : {}),
    healthy: s.healthy,
    ...(Object.keys(status).length > 0 ? { status } : {}),
  });
}

/** Options of {@link healthHandler}. */
export interface HealthHandlerOptions {
  /** Called with the path and status of every answered probe (for upstream's counters). */
  onServed?: (path: HealthPath, status: number) => void;
}

const HEALTH_HEADERS = {
  "content-type": "application/json",
  "x-content-type-options": "nosniff",
};

/**
 * The handler of the health server: `/healthz` and `/livez` with upstream's JSON bodies
 * ({@link healthBody}) and 200/503 statuses; any other path is 404. Pure apart from reading
 * the health state.
 *
 * @example
 * ```ts
 * const handle = healthHandler(health);
 * const res = handle(new Request("http://node:10256/healthz"));
 * // res.status === 200, await res.text() ===
 * // '{"lastUpdated":"…","currentTime":"…","nodeEligible":true,"healthy":true,"status":{…}}'
 * ```
 */
export function healthHandler(
  health: ProxyHealth,
  options: HealthHandlerOptions = {},
): (req: Request) => Response {
  return (req: Request): Response => {
    const path = new URL(req.url).pathname;
    if (path !== "/healthz" && path !== "/livez") {
      return new Response("404 page not found\n", {
        status: 404,
        headers: { "content-type": "text/plain; charset=utf-8" },
      });
    }
    const s = health.status();
    const healthy = path === "/healthz" ? s.healthy && s.nodeEligible : s.healthy;
    const status = healthy ? 200 : 503;
    options.onServed?.(path, status);
    return new Response(healthBody(s, path), { status, headers: HEALTH_HEADERS });
  };
}

/**
 * Serves a handler (usually {@link healthHandler}) on a bind address like `0.0.0.0:10256` or
 * `[::]:10256`; an empty address means disabled and returns null. Throws {@link ServeError}
 * when the address is malformed or cannot be bound.
 */
export function serveHealth(
  address: string,
  handler: (req: Request) => Response | Promise<Response>,
  options: ServeOptions = {},
): HttpServer | null {
  return serveHttp(address, handler, { name: "health", ...options });
}
