/**
 * The proxy's Prometheus metrics: upstream kube-proxy's `kubeproxy_*` names, types, help texts
 * and buckets, plus a few of our own (`kubenftproxy_*`), on a private registry; and the
 * `Request → Response` handler of the metrics server (`/metrics`, `/proxyMode`, `/healthz`).
 *
 * Which failure counters exist depends on the mode, as upstream registers them: nftables sync
 * and cleanup failures in nft mode, iptables-restore (and partial-restore) failures in iptables
 * mode. Timestamps come from the injected clock.
 *
 * The metrics upstream labels with `ip_family` carry it here too: sync latencies and timestamps,
 * network programming latency, failure counters, no-local-endpoints and the conntrack
 * reconciler's. Upstream runs one proxier per family (two on a dual-stack node), each recording
 * its own observations; ours programs every family in one sync, so each observation is recorded
 * once per programmed family ({@link ProxyMetricsOptions.families}) with the same value — except
 * where the family is known: an iptables-restore failure names its family, no-local-endpoints
 * and the reconciler count per family. Each family's series exist (at 0) from the start; Service
 * and EndpointSlice change counts and the health answers have no family, as upstream's.
 *
 * @example
 * ```ts
 * const metrics = new ProxyMetrics({ mode: "nft" });
 * metrics.syncDone({ full: true, seconds: 0.12, bytes: 4096 });
 * const server = serveMetrics("127.0.0.1:10249", metricsHandler(metrics));
 * ```
 *
 * @module
 */
import {
  Counter,
  exponentialBuckets,
  Gauge,
  Histogram,
  linearBuckets,
  Registry,
} from "prom-client";
import type { ProxyMode } from "../config/config.ts";
import type { IPFamily } from "../model/service_port.ts";
import type { ObjectKind } from "../source/events.ts";
import type { ApiProblem, ApiRequestObservation } from "../source/api_http.ts";
import { type Clock, realClock } from "../runner/clock.ts";
import { ConnectionMetrics } from "./connection_metrics.ts";
import type { HealthPath } from "./health.ts";
import { registerProcessMetrics } from "./process_metrics.ts";
import { configzBody, flagzBody, type StatusPagesInput, statuszBody } from "./status_pages.ts";
import { type HttpServer, serveHttp, type ServeOptions } from "./serve.ts";
import {
  type ServiceConnectionsSource,
  ServiceConnectionsText,
} from "./service_connections_text.ts";

/** Upstream's sync latency buckets: 1 ms doubling to about 16 s (`ExponentialBuckets(0.001, 2, 15)`). */
export const SYNC_DURATION_BUCKETS: readonly number[] = exponentialBuckets(0.001, 2, 15);

/**
 * Upstream's network programming latency buckets (`MergeBuckets`, whose leading 0 is kept):
 * 0, 0.25 s, 0.5 s, 1-59 s by 1 s, 60-115 s by 5 s, 2-5 min by 30 s.
 */
export const NETWORK_PROGRAMMING_BUCKETS: readonly number[] = [
  0,
  ...linearBuckets(0.25, 0.25, 2),
  ...linearBuckets(1, 1, 59),
  ...linearBuckets(60, 5, 12),
  ...linearBuckets(120, 30, 7),
];

/**
 * client-go's `rest_client_request_duration_seconds` buckets: 5 ms to 60 s
 * (k8s.io/component-base/metrics/prometheus/restclient).
 */
export const REST_CLIENT_DURATION_BUCKETS: readonly number[] = [
  0.005,
  0.025,
  0.1,
  0.25,
  0.5,
  1,
  2,
  4,
  8,
  15,
  30,
  60,
];

/** Sizes of scripts sent to the kernel: 256 B growing ×4 to 64 MiB. */
export const SCRIPT_BYTES_BUCKETS: readonly number[] = exponentialBuckets(256, 4, 10);

/** Most distinct `{kind, reason}` series of the rejection counter; later ones count as `other`. */
export const MAX_REJECTION_SERIES = 100;

/** Top-level fields of Services and EndpointSlices a rejection reason may start with. */
const REASON_ROOTS = ["metadata", "spec", "status", "addressType", "ports", "endpoints"];
const REASON_PATH = new RegExp(`^(?:${REASON_ROOTS.join("|")})(?:\\.[A-Za-z]{1,40}){0,4}$`);

/**
 * The bounded-cardinality `reason` label of a refused object: the field path its message
 * names, without indices or keys, or `other`. Accepts a bare reason
 * (`spec.ports[1].port is 70000, …`) or a whole log line (`cannot use Service ns/name: …`);
 * object names never end up in the label.
 *
 * @example
 * ```ts
 * rejectionReason("cannot use Service default/web: spec.ports[1].port is 70000, must be 1-65535");
 * // "spec.ports.port"
 * ```
 */
export function rejectionReason(message: string): string {
  let text = message;
  if (text.startsWith("cannot use ")) {
    const colon = text.indexOf(": ");
    text = colon < 0 ? "" : text.slice(colon + 2);
  }
  const field = (text.trim().split(/\s/)[0] ?? "").replace(/\[[^\]]*\]/g, "");
  return REASON_PATH.test(field) ? field : "other";
}

/** Options of {@link ProxyMetrics}. */
export interface ProxyMetricsOptions {
  /** Which backend's failure counters to register. Default `nft`. */
  mode?: ProxyMode;
  /** Source of the `*_timestamp_seconds` gauges. Default {@link realClock}. */
  clock?: Clock;
  /**
   * The families the proxy programs (`NodeFacts.families`): the `ip_family` values of the
   * metrics that carry it. Default `["IPv4"]`, a single-stack IPv4 node (the proxy does not
   * start without IPv4).
   */
  families?: readonly IPFamily[];
}

export type {
  ServiceConnectionsSource,
  ServiceConnectionsTotal,
} from "./service_connections_text.ts";

/** What one successful sync did, for {@link ProxyMetrics.syncDone}. */
export interface SyncDone {
  /** A full sync (else partial). */
  full: boolean;
  /** How long the sync took, in seconds. */
  seconds: number;
  /** Bytes sent to the kernel; 0 when there was nothing to send (not observed then). */
  bytes: number;
}

/** A failed sync, for {@link ProxyMetrics.syncFailed}. */
export interface SyncFailed {
  /** Whether the failed sync was a full one. Default true. */
  full?: boolean;
  /** How long it took, in seconds; upstream observes failed syncs' latency too. */
  seconds?: number;
  /**
   * The one family whose rules were refused (an iptables-restore failure names it), counted
   * only in that family's failure series; omitted: every programmed family's (an nft
   * transaction holds them all).
   */
  family?: IPFamily;
}

/**
 * The proxy's metrics on their own `Registry` (never prom-client's global one), updated
 * through typed methods; {@link metricsHandler} serves them.
 */
export class ProxyMetrics {
  /** The private registry holding every metric below. */
  readonly registry: Registry;
  /** `nftables` or `iptables`, as upstream's `/proxyMode` answers. */
  readonly proxyMode: string;
  /** The health, metrics and health-check servers' connections, and the descriptors. */
  readonly connections: ConnectionMetrics;
  /** The `ip_family` values: the families the proxy programs. */
  readonly families: readonly IPFamily[];
  readonly #mode: ProxyMode;
  readonly #clock: Clock;
  readonly #syncDuration: Histogram<"ip_family">;
  readonly #syncFullDuration: Histogram<"ip_family">;
  readonly #syncPartialDuration: Histogram<"ip_family">;
  readonly #lastSync: Gauge<"ip_family">;
  readonly #lastQueued: Gauge<"ip_family">;
  /** When a sync was last queued, s since the epoch; the gauge takes it when scraped. */
  #lastQueuedAt: number | undefined;
  readonly #programming: Histogram<"ip_family">;
  readonly #endpointPending: Gauge;
  readonly #endpointTotal: Counter;
  readonly #servicePending: Gauge;
  readonly #serviceTotal: Counter;
  readonly #noLocal: Gauge<"ip_family" | "traffic_policy">;
  readonly #syncFailures: Counter<"ip_family">;
  readonly #partialFailures: Counter<"ip_family"> | undefined;
  readonly #cleanupFailures: Counter<"ip_family"> | undefined;
  readonly #healthz: Counter<"code">;
  readonly #livez: Counter<"code">;
  readonly #rejected: Counter<"kind" | "reason">;
  readonly #rejectionSeries = new Set<string>();
  readonly #conntrackReconcileDuration: Histogram<"ip_family">;
  readonly #conntrackDeleted: Counter<"ip_family">;
  readonly #rulesRestored: Counter;
  readonly #scriptBytes: Histogram;
  /** `kubenftproxy_service_connections_total`, written apart from the registry. */
  readonly #serviceConnections = new ServiceConnectionsText();
  readonly #restRequests: Counter<"code" | "host" | "method">;
  readonly #restDuration: Histogram<"host" | "verb">;
  readonly #apiProblems: Counter<"kind" | "reason">;

  /** Creates and registers every metric of `options.mode` on a new registry. */
  constructor(options: ProxyMetricsOptions = {}) {
    const registry = this.registry = new Registry();
    this.#mode = options.mode ?? "nft";
    this.proxyMode = this.#mode === "nft" ? "nftables" : "iptables";
    this.#clock = options.clock ?? realClock;
    this.families = Object.freeze([...(options.families ?? ["IPv4"])]);
    this.connections = new ConnectionMetrics(registry);
    const registers = [registry];
    const histogram = (name: string, help: string, buckets: readonly number[]) =>
      new Histogram({ name, help, buckets: [...buckets], registers });
    const gauge = (name: string, help: string) => new Gauge({ name, help, registers });
    const counter = (name: string, help: string) => new Counter({ name, help, registers });
    // Upstream's `ip_family` metrics, each family's series present (at 0) from the start.
    const labelNames = ["ip_family"] as const;
    const perFamily = (init: (labels: { ip_family: IPFamily }) => void) =>
      this.families.forEach((family) => init({ ip_family: family }));
    const familyHistogram = (name: string, help: string, buckets: readonly number[]) => {
      const metric = new Histogram({ name, help, labelNames, buckets: [...buckets], registers });
      perFamily((labels) => metric.zero(labels));
      return metric;
    };
    const familyGauge = (name: string, help: string, collect?: () => void) => {
      const metric = new Gauge({ name, help, labelNames, registers, collect });
      perFamily((labels) => metric.set(labels, 0));
      return metric;
    };
    const familyCounter = (name: string, help: string) => {
      const metric = new Counter({ name, help, labelNames, registers });
      perFamily((labels) => metric.inc(labels, 0));
      return metric;
    };

    this.#syncDuration = familyHistogram(
      "kubeproxy_sync_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds",
      SYNC_DURATION_BUCKETS,
    );
    this.#syncFullDuration = familyHistogram(
      "kubeproxy_sync_full_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for full resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.#syncPartialDuration = familyHistogram(
      "kubeproxy_sync_partial_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for partial resyncs",
      SYNC_DURATION_BUCKETS,
    );
    this.#lastSync = familyGauge(
      "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      "The last time proxy rules were successfully synced",
    );
    // Set when scraped, from the time `queued` noted: a watch-list queues 100,000 changes,
    // and setting a labelled gauge per change (its labels hashed each time) cost ~50 ms.
    this.#lastQueued = familyGauge(
      "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
      "The last time a sync of proxy rules was queued",
      () => {
        const at = this.#lastQueuedAt;
        if (at === undefined) return;
        for (const ip_family of this.families) this.#lastQueued.set({ ip_family }, at);
      },
    );
    this.#programming = familyHistogram(
      "kubeproxy_network_programming_duration_seconds",
      "In Cluster Network Programming Latency in seconds",
      NETWORK_PROGRAMMING_BUCKETS,
    );
    this.#endpointPending = gauge(
      "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      "Pending proxy rules Endpoint changes",
    );
    this.#endpointTotal = counter(
      "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      "Cumulative proxy rules Endpoint changes",
    );
    this.#servicePending = gauge(
      "kubeproxy_sync_proxy_rules_service_changes_pending",
      "Pending proxy rules Service changes",
    );
    this.#serviceTotal = counter(
      "kubeproxy_sync_proxy_rules_service_changes_total",
      "Cumulative proxy rules Service changes",
    );
    this.#noLocal = new Gauge({
      name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      help: "Number of services with a Local traffic policy and no endpoints",
      labelNames: ["ip_family", "traffic_policy"] as const,
      registers,
    });
    for (const traffic_policy of ["internal", "external"]) {
      perFamily(({ ip_family }) => this.#noLocal.set({ ip_family, traffic_policy }, 0));
    }
    if (this.#mode === "nft") {
      this.#syncFailures = familyCounter(
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "Cumulative proxy nftables sync failures",
      );
      this.#cleanupFailures = familyCounter(
        "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        "Cumulative proxy nftables cleanup failures",
      );
    } else {
      this.#syncFailures = familyCounter(
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "Cumulative proxy iptables restore failures",
      );
      this.#partialFailures = familyCounter(
        "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
        "Cumulative proxy iptables partial restore failures",
      );
    }
    this.#healthz = new Counter({
      name: "kubeproxy_proxy_healthz_total",
      help: "Cumulative proxy healthz HTTP status",
      labelNames: ["code"] as const,
      registers,
    });
    this.#livez = new Counter({
      name: "kubeproxy_proxy_livez_total",
      help: "Cumulative proxy livez HTTP status",
      labelNames: ["code"] as const,
      registers,
    });
    this.#rejected = new Counter({
      name: "kubenftproxy_objects_rejected_total",
      help: "API objects refused as invalid, by kind and the field that was wrong",
      labelNames: ["kind", "reason"] as const,
      registers,
    });
    this.#conntrackReconcileDuration = new Histogram({
      name: "kubeproxy_conntrack_reconciler_sync_duration_seconds",
      help: "ReconcileConntrackFlowsLatency latency in seconds",
      labelNames: ["ip_family"] as const,
      buckets: [...SYNC_DURATION_BUCKETS],
      registers,
    });
    this.#conntrackDeleted = new Counter({
      name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
      help: "Cumulative conntrack flows deleted by conntrack reconciler",
      labelNames: ["ip_family"] as const,
      registers,
    });
    this.#rulesRestored = counter(
      "kubenftproxy_rules_restored_total",
      "Times our rules were found removed or flushed by someone else and restored",
    );
    this.#scriptBytes = histogram(
      "kubenftproxy_sync_script_bytes",
      "Size in bytes of each script sent to the kernel",
      SCRIPT_BYTES_BUCKETS,
    );
    this.#restRequests = new Counter({
      name: "rest_client_requests_total",
      help: "Number of HTTP requests, partitioned by status code, method, and host.",
      labelNames: ["code", "host", "method"] as const,
      registers,
    });
    this.#restDuration = new Histogram({
      name: "rest_client_request_duration_seconds",
      help: "Request latency in seconds. Broken down by verb, and host.",
      labelNames: ["host", "verb"] as const,
      buckets: [...REST_CLIENT_DURATION_BUCKETS],
      registers,
    });
    this.#apiProblems = new Counter({
      name: "kubenftproxy_api_source_problems_total",
      help:
        "Lists and watches of the API server given up (and retried with backoff), and objects " +
        "skipped, by kind and reason",
      labelNames: ["kind", "reason"] as const,
      registers,
    });
    registerProcessMetrics(registry);
  }

  /**
   * The API client made a request (client-go's `rest_client_requests_total` and
   * `rest_client_request_duration_seconds`, the latency to the response headers).
   */
  apiRequest(request: ApiRequestObservation): void {
    this.#restRequests.inc({ code: request.code, host: request.host, method: request.method });
    this.#restDuration.observe({ host: request.host, verb: request.method }, request.seconds);
  }

  /**
   * The API source gave up on a list or watch (a page or event too large, not JSON, a bad
   * event, an idle stream, an error status, an expired version…) or skipped an object of the
   * wrong kind; the log line says which.
   */
  apiProblem(problem: ApiProblem): void {
    this.#apiProblems.inc({ kind: problem.kind, reason: problem.reason });
  }

  /**
   * Where {@link text} reads per-service connection totals at scrape time (e.g.
   * `ServiceCounters.read`); totals must be monotonic. A failing source leaves the last values.
   */
  serviceConnectionsFrom(source: ServiceConnectionsSource): void {
    this.#serviceConnections.from(source);
  }

  /**
   * A sync succeeded: observes its latency (all syncs, and full or partial) and sets the
   * last-sync timestamp, once per family; observes the script size when something was sent.
   */
  syncDone(sync: SyncDone): void {
    this.#observeLatency(sync.full, sync.seconds);
    if (sync.bytes > 0) this.#scriptBytes.observe(sync.bytes);
    const now = this.#clock.now() / 1000;
    for (const ip_family of this.families) this.#lastSync.set({ ip_family }, now);
  }

  /**
   * A sync failed (the kernel refused the transaction): counts it as upstream does (nftables
   * sync failures; iptables-restore failures, plus partial-restore failures for partial syncs)
   * for `failure.family`, else every family, and observes its latency (every family's) when
   * given.
   */
  syncFailed(failure: SyncFailed = {}): void {
    const full = failure.full ?? true;
    for (const ip_family of failure.family ? [failure.family] : this.families) {
      this.#syncFailures.inc({ ip_family });
      if (!full) this.#partialFailures?.inc({ ip_family });
    }
    if (failure.seconds !== undefined) this.#observeLatency(full, failure.seconds);
  }

  /**
   * Removing stale chains, sets, maps or tables failed (nft mode only; ignored in iptables
   * mode): upstream's `kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total`, once per
   * family (what failed is not one family's). Fits the back end's `cleanupFailed(what, err)`
   * hook; the hook's caller logs the failure.
   */
  cleanupFailed(_what?: string, _err?: unknown): void {
    for (const ip_family of this.families) this.#cleanupFailures?.inc({ ip_family });
  }

  /**
   * A change of `kind` arrived and a sync was requested: counts Service and EndpointSlice
   * changes (upstream's `*_changes_total`, without a family) and sets every family's
   * last-queued timestamp.
   */
  queued(kind: ObjectKind): void {
    if (kind === "Service") this.#serviceTotal.inc();
    else if (kind === "EndpointSlice") this.#endpointTotal.inc();
    this.#lastQueuedAt = this.#clock.now() / 1000;
  }

  /**
   * An object of `kind` was refused; `message` is its log line or reason, from which only the
   * field path is kept (see {@link rejectionReason}). After {@link MAX_REJECTION_SERIES}
   * distinct series, new ones count as `other`.
   */
  rejected(kind: ObjectKind, message: string): void {
    let reason = rejectionReason(message);
    const series = `${kind}\n${reason}`;
    if (!this.#rejectionSeries.has(series)) {
      if (this.#rejectionSeries.size >= MAX_REJECTION_SERIES) reason = "other";
      this.#rejectionSeries.add(`${kind}\n${reason}`);
    }
    this.#rejected.inc({ kind, reason });
  }

  /** Pending (not yet synced) changes, after each event and each sync. */
  pending(counts: { services: number; endpoints: number }): void {
    this.#servicePending.set(counts.services);
    this.#endpointPending.set(counts.endpoints);
  }

  /**
   * Service ports with a Local traffic policy and no local endpoints, by family and policy
   * (`internalTrafficPolicy` / `externalTrafficPolicy`), after each sync (see
   * `countNoLocalEndpoints`); only the programmed families' counts are kept.
   */
  noLocalEndpoints(
    counts: Readonly<Record<IPFamily, { internal: number; external: number }>>,
  ): void {
    for (const ip_family of this.families) {
      this.#noLocal.set({ ip_family, traffic_policy: "internal" }, counts[ip_family].internal);
      this.#noLocal.set({ ip_family, traffic_policy: "external" }, counts[ip_family].external);
    }
  }

  /** Our rules were found removed or flushed by someone else; a restoring sync follows. */
  rulesRestored(): void {
    this.#rulesRestored.inc();
  }

  /**
   * The conntrack reconciler ran for one family after a sync (upstream's
   * `kubeproxy_conntrack_reconciler_*`): its duration, and the stale entries it deleted.
   */
  conntrackReconciled(run: { family: IPFamily; seconds: number; deleted: number }): void {
    this.#conntrackReconcileDuration.observe({ ip_family: run.family }, run.seconds);
    if (run.deleted > 0) this.#conntrackDeleted.inc({ ip_family: run.family }, run.deleted);
  }

  /**
   * The time from an endpoint change (its EndpointSlice's
   * `endpoints.kubernetes.io/last-change-trigger-time`) to the sync that programmed it; once
   * per family.
   */
  networkProgrammed(seconds: number): void {
    if (seconds < 0) return;
    for (const ip_family of this.families) this.#programming.observe({ ip_family }, seconds);
  }

  /** The health server answered a probe (upstream's `kubeproxy_proxy_{healthz,livez}_total`). */
  healthServed(path: HealthPath, status: number): void {
    (path === "/healthz" ? this.#healthz : this.#livez).inc({ code: `${status}` });
  }

  /** The Prometheus text exposition of every metric. */
  async text(): Promise<string> {
    const [registered, connections] = await Promise.all([
      this.registry.metrics(),
      this.#serviceConnections.render(),
    ]);
    return connections === "" ? registered : `${registered}\n${connections}`;
  }

  /** The content type of {@link text}. */
  get contentType(): string {
    return this.registry.contentType;
  }

  #observeLatency(full: boolean, seconds: number): void {
    const byKind = full ? this.#syncFullDuration : this.#syncPartialDuration;
    for (const ip_family of this.families) {
      this.#syncDuration.observe({ ip_family }, seconds);
      byKind.observe({ ip_family }, seconds);
    }
  }
}

/**
 * The handler of the metrics server, like upstream's: `/metrics` (Prometheus text format),
 * `/proxyMode` (`nftables` or `iptables`) and `/healthz` (`ok`); other paths are 404.
 *
 * @example
 * ```ts
 * const res = await metricsHandler(metrics)(new Request("http://node:10249/metrics"));
 * // res.headers.get("content-type") === "text/plain; version=0.0.4; charset=utf-8"
 * ```
 */
export function metricsHandler(
  metrics: ProxyMetrics,
  status?: StatusPagesInput,
): (req: Request) => Promise<Response> {
  const text = (body: string, status = 200) =>
    new Response(body, {
      status,
      headers: {
        "content-type": "text/plain; charset=utf-8",
        "x-content-type-options": "nosniff",
      },
    });
  return async (req: Request): Promise<Response> => {
    switch (new URL(req.url).pathname) {
      case "/metrics":
        return new Response(await metrics.text(), {
          headers: { "content-type": metrics.contentType },
        });
      case "/proxyMode":
        return text(metrics.proxyMode);
      case "/healthz":
      case "/healthz/ping":
        return text("ok");
      case "/configz":
        if (status === undefined) break;
        return new Response(configzBody(status.config), {
          headers: { "content-type": "application/json", "x-content-type-options": "nosniff" },
        });
      case "/flagz":
        if (status === undefined) break;
        return text(flagzBody(status.argv));
      case "/statusz":
        if (status === undefined) break;
        return text(statuszBody(status, Date.now()));
    }
    return text("404 page not found\n", 404);
  };
}

/**
 * Serves a handler (usually {@link metricsHandler}) on a bind address like `127.0.0.1:10249`;
 * an empty address means disabled and returns null. Throws `ServeError` when the address is
 * malformed or cannot be bound.
 */
export function serveMetrics(
  address: string,
  handler: (req: Request) => Response | Promise<Response>,
  options: ServeOptions = {},
): HttpServer | null {
  return serveHttp(address, handler, { name: "metrics", ...options });
}
