/**
 * The daemon's servers: health and metrics (Request → Response handlers from src/server),
 * the health-check node ports, and the one connection budget they share, sized from the
 * descriptor limit in force (logged at start, with a warning when low).
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import type { Logger } from "../log.ts";
import { healthHandler, healthTimeoutMs, ProxyHealth, serveHealth } from "../server/health.ts";
import { ServiceHealthServer } from "../server/health_check_ports.ts";
import { metricsHandler, ProxyMetrics, serveMetrics } from "../server/metrics.ts";
import { ConnectionPool } from "../server/connection_pool.ts";
import {
  connectionBudget,
  LOW_DESCRIPTOR_LIMIT,
  readDescriptorLimit,
} from "../server/descriptor_limit.ts";
import { type HttpServer, ServeError, type ServeOptions } from "../server/serve.ts";
import { observeApiProblems, observeApiRequests } from "../source/api_http.ts";
import { healthCheckEvents } from "../source/event_recorder.ts";
import type { Clock } from "./clock.ts";
import type { ProxyParts } from "./proxy.ts";

/** The daemon's health, metrics and health-check ports. */
export interface DaemonParts {
  readonly health: ProxyHealth;
  readonly metrics: ProxyMetrics;
  readonly serviceHealth: ServiceHealthServer;
  /** What every server is bound with: the shared connection budget, accept-error reports. */
  readonly serveOptions: ServeOptions;
}

export function daemonParts(parts: ProxyParts, clock: Clock): DaemonParts {
  const { config, log } = parts;
  const health = parts.health ??
    new ProxyHealth({ healthTimeoutMs: healthTimeoutMs(config.syncPeriodMs), clock });
  const metrics = parts.metrics ?? new ProxyMetrics({ mode: config.mode, clock });
  observeApiRequests((request) => metrics.apiRequest(request));
  observeApiProblems((problem) => metrics.apiProblem(problem));
  if (parts.serviceConnections !== undefined) {
    metrics.serviceConnectionsFrom(parts.serviceConnections);
  }
  const serveOptions: ServeOptions = {
    pool: connectionPool(metrics, log),
    log: (line) => log.warn(line),
    onAcceptError: (_err, server) => metrics.connections.acceptFailed(server),
  };
  return {
    health,
    metrics,
    serveOptions,
    serviceHealth: parts.serviceHealth ?? new ServiceHealthServer({
      proxyHealthy: () => health.status().healthy,
      log: (line) => log.info(line),
      serveOptions,
      ...healthCheckEvents(parts.source, config.hostname),
    }),
  };
}

/**
 * The connection budget every server shares, sized from the descriptor limit in force (logged
 * here, with a warning when low): see `server/descriptor_limit.ts`.
 */
function connectionPool(metrics: ProxyMetrics, log: Logger): ConnectionPool {
  const limit = readDescriptorLimit();
  const budget = connectionBudget(limit?.soft);
  const pool = new ConnectionPool({
    maxConnections: budget,
    onEvicted: (server) => metrics.connections.evicted(server),
    onRefused: (server) => metrics.connections.refused(server),
  });
  metrics.connections.watch(pool);
  const held = `the health, metrics and health-check ports hold at most ${budget} connections`;
  if (limit === undefined) {
    log.info(`open files limit unknown (no /proc/self/limits); ${held}`);
  } else {
    log.info(`open files limit ${limit.soft} (hard ${limit.hard}); ${held}`);
    if (limit.soft < LOW_DESCRIPTOR_LIMIT) {
      log.warn(
        `open files limit ${limit.soft} is low (under ${LOW_DESCRIPTOR_LIMIT}): a busy node can ` +
          "run out of descriptors for nft pipes and API watches; raise the hard limit " +
          "(e.g. --ulimit nofile=1048576:1048576, systemd LimitNOFILE=1048576)",
      );
    }
  }
  return pool;
}

/** Binds the health and metrics servers; one that cannot be bound is logged and skipped. */
export function startServers(config: Config, daemon: DaemonParts, log: Logger): HttpServer[] {
  const { health, metrics, serveOptions } = daemon;
  const servers: HttpServer[] = [];
  const onError = (err: unknown) => log.error(`request failed: ${(err as Error).message}`);
  const bind = (what: string, address: string, start: () => HttpServer | null) => {
    try {
      const server = start();
      if (server === null) log.info(`${what} server disabled (empty bind address)`);
      else {
        servers.push(server);
        log.info(`serving ${what} on ${address}`);
      }
    } catch (err) {
      if (!(err instanceof ServeError)) throw err;
      log.error(`${err.message}; running without the ${what} server`);
    }
  };
  bind("health", config.healthzBindAddress, () =>
    serveHealth(
      config.healthzBindAddress,
      healthHandler(health, { onServed: (path, status) => metrics.healthServed(path, status) }),
      { ...serveOptions, onError },
    ));
  bind(
    "metrics",
    config.metricsBindAddress,
    () =>
      serveMetrics(config.metricsBindAddress, metricsHandler(metrics), {
        ...serveOptions,
        onError,
      }),
  );
  return servers;
}
