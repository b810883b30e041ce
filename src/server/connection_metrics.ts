/**
 * Metrics of the proxy's own HTTP servers and of its descriptors: connections held, evicted and
 * refused per server (`health`, `metrics`, `health-check`), accept errors, and Go's process
 * collector's `process_open_fds` / `process_max_fds` (which upstream kube-proxy exposes), so an
 * operator sees a flood and how close the process is to its limit (those two only where /proc
 * can be read).
 *
 * @example
 * ```ts
 * const metrics = new ConnectionMetrics(registry);
 * const pool = new ConnectionPool({ maxConnections: 384, onEvicted: (s) => metrics.evicted(s) });
 * metrics.watch(pool);
 * ```
 *
 * @module
 */
import { Counter, Gauge, type Registry } from "prom-client";
import type { ConnectionPool } from "./connection_pool.ts";
import { countOpenDescriptors, readDescriptorLimit } from "./descriptor_limit.ts";

/** The servers' connection counters and gauges, on the registry given. */
export class ConnectionMetrics {
  readonly #evicted: Counter<"server">;
  readonly #refused: Counter<"server">;
  readonly #acceptErrors: Counter<"server">;
  #pool: ConnectionPool | undefined;

  /** Registers every metric on `registry`. */
  constructor(registry: Registry) {
    const registers = [registry];
    const counter = (name: string, help: string) =>
      new Counter({ name, help, labelNames: ["server"] as const, registers });
    this.#evicted = counter(
      "kubenftproxy_server_connections_evicted_total",
      "Waiting connections (half-open or idle) closed to make room for a new one, by server",
    );
    this.#refused = counter(
      "kubenftproxy_server_connections_refused_total",
      "New connections closed at once because every held connection was being answered",
    );
    this.#acceptErrors = counter(
      "kubenftproxy_server_accept_errors_total",
      "Errors accepting a connection (e.g. EMFILE), survived with a back-off, by server",
    );
    const pool = () => this.#pool;
    new Gauge({
      name: "kubenftproxy_server_connections",
      help: "Connections the health, metrics and health-check servers hold, by server",
      labelNames: ["server"] as const,
      registers,
      collect: function () {
        this.reset();
        for (const [server, n] of pool()?.sizes() ?? []) this.set({ server }, n);
      },
    });
    // Where /proc cannot be read (the image: Deno asks --allow-all for it) both are left out:
    // a gauge never set would say 0 descriptors of 0.
    if (countOpenDescriptors() !== undefined) {
      new Gauge({
        name: "process_open_fds",
        help: "Number of open file descriptors.",
        registers,
        collect: function () {
          const open = countOpenDescriptors();
          if (open !== undefined) this.set(open);
        },
      });
    }
    if (readDescriptorLimit() !== undefined) {
      new Gauge({
        name: "process_max_fds",
        help: "Maximum number of open file descriptors.",
        registers,
        collect: function () {
          const limit = readDescriptorLimit()?.soft;
          if (limit !== undefined && Number.isFinite(limit)) this.set(limit);
        },
      });
    }
  }

  /** Where {@link ConnectionMetrics} reads the connections held, at each scrape. */
  watch(pool: ConnectionPool): void {
    this.#pool = pool;
  }

  /** A waiting connection of `server` was closed to make room. */
  evicted(server: string): void {
    this.#evicted.inc({ server });
  }

  /** A new connection to `server` was closed at once. */
  refused(server: string): void {
    this.#refused.inc({ server });
  }

  /** Accepting a connection on `server` failed. */
  acceptFailed(server: string): void {
    this.#acceptErrors.inc({ server });
  }
}
