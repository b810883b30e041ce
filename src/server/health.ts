/**
 * The proxy's own health: upstream kube-proxy's `/healthz` and `/livez` (port 10256), as a
 * {@link ProxyHealth} state on the injected clock and a pure `Request → Response` handler.
 *
 * The rules are upstream's (`pkg/proxy/healthcheck/proxy_health.go`):
 * - The proxy is healthy while it is starting up: until the sync loop starts, nothing counts.
 * - Once it runs, it is unhealthy when a change has been waiting ({@link ProxyHealth.queued})
 *   for `healthTimeout` or longer without a successful sync ({@link ProxyHealth.updated}).
 *   `healthTimeout` is twice the sync period ({@link healthTimeoutMs}).
 * - `/healthz` is also 503 while the Node is being deleted (`nodeEligible: false`); `/livez`
 *   ignores the Node, so a draining node is not restarted.
 * - A healthy answer reports `lastUpdated` as the current time (upstream keeps that for
 *   compatibility with releases where it meant "the sync loop ran"); an unhealthy one reports
 *   the last successful sync.
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
}

/** A snapshot of the proxy's health, as the handler reports it. */
export interface HealthStatus {
  /** The sync rules alone (what `/livez` reports); ignores the Node. */
  readonly healthy: boolean;
  /** The Node is not being deleted; `/healthz` also requires this. */
  readonly nodeEligible: boolean;
  /** Clock time of the last successful sync (or of the loop's start), if any. */
  readonly lastUpdated: number | undefined;
  /** Clock time when the snapshot was taken. */
  readonly currentTime: number;
}

/**
 * The proxy's health state. Call {@link queued} when a change arrives that needs a sync,
 * {@link started} when the sync loop starts, {@link updated} after every successful sync and
 * {@link nodeDeleting} when the Node's state is known. Reads go through {@link status}.
 */
export class ProxyHealth {
  readonly #clock: Clock;
  readonly #timeoutMs: number;
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
   * Whether the Node is being deleted (a deletionTimestamp, or upstream's
   * `ToBeDeletedByClusterAutoscaler` taint); `/healthz` answers 503 while it is.
   */
  nodeDeleting(deleting: boolean): void {
    this.#nodeEligible = !deleting;
  }

  /** The current state; pure apart from reading the clock. */
  status(): HealthStatus {
    const currentTime = this.#clock.now();
    const late = this.#lastUpdated !== undefined && this.#oldestQueued !== undefined &&
      currentTime - this.#oldestQueued >= this.#timeoutMs;
    return {
      healthy: !late,
      nodeEligible: this.#nodeEligible,
      lastUpdated: this.#lastUpdated,
      currentTime,
    };
  }
}

/**
 * Formats a clock time like Go's `time.Time.String()` in UTC, as upstream's bodies do:
 * `2024-05-01 12:00:00.25 +0000 UTC` (trailing zeros of the fraction dropped), and Go's zero
 * time `0001-01-01 00:00:00 +0000 UTC` for "never".
 */
export function formatGoTime(ms: number | undefined): string {
  if (ms === undefined) return "0001-01-01 00:00:00 +0000 UTC";
  const iso = new Date(ms).toISOString(); // 2024-05-01T12:00:00.250Z
  const fraction = iso.slice(20, 23).replace(/0+$/, "");
  return `${iso.slice(0, 10)} ${iso.slice(11, 19)}${fraction === "" ? "" : `.${fraction}`}` +
    " +0000 UTC";
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
 * The handler of the health server: `/healthz` and `/livez` with upstream's JSON bodies and
 * 200/503 statuses; any other path is 404. Pure apart from reading the health state.
 *
 * @example
 * ```ts
 * const handle = healthHandler(health);
 * const res = handle(new Request("http://node:10256/healthz"));
 * // res.status === 200, await res.text() ===
 * // '{"lastUpdated": "…","currentTime": "…", "nodeEligible": true}'
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
    const lastUpdated = JSON.stringify(formatGoTime(healthy ? s.currentTime : s.lastUpdated));
    const currentTime = JSON.stringify(formatGoTime(s.currentTime));
    // Upstream's exact layout, spaces included.
    const body = path === "/healthz"
      ? `{"lastUpdated": ${lastUpdated},"currentTime": ${currentTime}, "nodeEligible": ${s.nodeEligible}}`
      : `{"lastUpdated": ${lastUpdated},"currentTime": ${currentTime}}`;
    options.onServed?.(path, status);
    return new Response(body, { status, headers: HEALTH_HEADERS });
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
