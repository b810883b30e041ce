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

/** Builds the daemon's health, metrics and health-check ports from what the run was given. */
export function daemonParts(
  parts: Pick<
    ProxyParts,
    "config" | "log" | "source" | "health" | "metrics" | "serviceConnections" | "serviceHealth"
  >,
  clock: Clock,
): DaemonParts {
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

/** How often a health or metrics port that could not be bound is tried again, as upstream. */
export const BIND_RETRY_MS = 5000;

/** Options of {@link startServers}. */
export interface StartServersOptions {
  /** Between two attempts to bind a port in use. Default {@link BIND_RETRY_MS}. */
  readonly retryMs?: number;
  /** The command line `/flagz` shows. Default `Deno.args`. */
  readonly argv?: readonly string[];
}

/**
 * Binds the health and metrics servers. A port that cannot be bound (the outgoing kube-proxy
 * still holds it during a node-by-node switch) is tried again every 5 s with a log line, as
 * upstream; with `config.bindAddressHardFail` it throws {@link ServeError} instead (the process
 * exits with that one line). The servers returned include those still being retried: closing
 * one stops its retries.
 */
export function startServers(
  config: Config,
  daemon: DaemonParts,
  log: Logger,
  options: StartServersOptions = {},
): HttpServer[] {
  const { health, metrics, serveOptions } = daemon;
  const retryMs = options.retryMs ?? BIND_RETRY_MS;
  // Deno's performance clock starts with the process.
  const status = {
    config,
    argv: options.argv ?? Deno.args,
    startedAt: Date.now() - performance.now(),
  };
  const servers: HttpServer[] = [];
  const onError = (err: unknown) => log.error(`request failed: ${(err as Error).message}`);
  const bind = (what: string, address: string, start: () => HttpServer | null) => {
    /** Binds once: the server, null when disabled, or undefined after a logged failure. */
    const attempt = (): HttpServer | null | undefined => {
      try {
        const server = start();
        if (server === null) log.info(`${what} server disabled (empty bind address)`);
        else log.info(`serving ${what} on ${address}`);
        return server;
      } catch (err) {
        if (!(err instanceof ServeError)) throw err;
        if (config.bindAddressHardFail) {
          throw new ServeError(`${err.message} (bindAddressHardFail is set)`, {
            address,
            cause: err,
          });
        }
        log.error(`${err.message}; trying again every ${retryMs / 1000} s`);
        return undefined;
      }
    };
    const first = attempt();
    if (first !== undefined) {
      if (first !== null) servers.push(first);
      return;
    }
    servers.push(retrying(attempt, address, retryMs));
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
      serveMetrics(config.metricsBindAddress, metricsHandler(metrics, status), {
        ...serveOptions,
        onError,
      }),
  );
  return servers;
}

/** A server not bound yet: `attempt` runs every `retryMs` until it binds or the server closes. */
function retrying(
  attempt: () => HttpServer | null | undefined,
  address: string,
  retryMs: number,
): HttpServer {
  let bound: HttpServer | null | undefined;
  let closed = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const again = () => {
    timer = undefined;
    if (closed) return;
    bound = attempt();
    if (bound === undefined) timer = setTimeout(again, retryMs);
  };
  timer = setTimeout(again, retryMs);
  const port = Number(address.slice(address.lastIndexOf(":") + 1));
  return {
    get addr() {
      return bound?.addr ?? { hostname: address.slice(0, address.lastIndexOf(":")), port };
    },
    async close() {
      closed = true;
      if (timer !== undefined) clearTimeout(timer);
      await bound?.close();
    },
  };
}
