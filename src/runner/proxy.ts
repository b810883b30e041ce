/**
 * The proxy's lifecycle: wires a source, the proxy state, a planner and an applier into the
 * sync loop, then runs once (`--once`) or as a daemon until SIGTERM/SIGINT — with the daemon's
 * health and metrics servers, health-check node ports and the conntrack reconciler around each
 * sync.
 *
 * Around every sync of the daemon (upstream's order): a failure counts in the metrics (full or
 * partial) and leaves `/healthz` to turn unhealthy once a change has waited for `2 × syncPeriod`;
 * a success marks the proxy healthy, records latency and script size, counts Local-policy
 * ports without local endpoints, updates the health-check node ports and runs the conntrack
 * reconciler, which deletes every UDP conntrack entry not pointing at a serving endpoint of its
 * service (a failure is logged and never fails the sync).
 *
 * On shutdown the rules stay in the kernel, so traffic keeps flowing while the proxy restarts;
 * the next start reconciles them in its first (table-recreating) transaction.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import type { ReconcileResult } from "../apply/conntrack.ts";
import { type ConntrackService, conntrackServices } from "../apply/conntrack_plan.ts";
import type { Logger } from "../log.ts";
import type { IPFamily } from "../model/service_port.ts";
import type { Plan, Planner } from "../render/planner.ts";
import { ProxyHealth } from "../server/health.ts";
import {
  healthCheckBindIPs,
  healthCheckedServices,
  ServiceHealthServer,
} from "../server/health_check_ports.ts";
import { ProxyMetrics, type ServiceConnectionsSource } from "../server/metrics.ts";
import type { HttpServer } from "../server/serve.ts";
import type { Source } from "../source/events.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { BoundedFrequencyRunner } from "./bounded_runner.ts";
import { type DaemonParts, daemonParts, startServers } from "./daemon_servers.ts";
import { type Clock, realClock } from "./clock.ts";
import { countNoLocalEndpoints } from "./no_local_endpoints.ts";
import { SyncLoop, type SyncOutcome } from "./sync_loop.ts";

/** Everything {@link runProxy} needs, already built. */
export interface ProxyParts {
  readonly config: Config;
  readonly source: Source;
  readonly planner: Planner;
  /** Sends one script to the kernel (or prints it in dry-run mode). */
  readonly apply: (script: string) => Promise<void>;
  /** Sends a whole plan instead, when the back end streams its scripts (iptables). */
  readonly applyPlan?: (plan: Plan) => Promise<void>;
  readonly log: Logger;
  readonly clock?: Clock;
  /**
   * The conntrack reconciler, run after every successful sync: deletes the UDP entries not
   * pointing at a serving endpoint of their service (e.g. `reconcileConntrack`), resolving with
   * what it did per family. Absent (dry-run): not run.
   */
  readonly conntrackReconcile?: (
    services: readonly ConntrackService[],
  ) => Promise<readonly ReconcileResult[]>;
  /**
   * Deletes ClientIP affinity entries that point at endpoints gone from their service (after
   * an applied sync that changed a ClientIP service); resolves with how many. Omitted in
   * dry-run mode.
   */
  readonly affinityCleanup?: () => Promise<number>;
  /**
   * Checks that the kernel still holds our rules (the back end's `Proxier.rulesIntact`); when it
   * says no after a successful sync, the next sync recreates everything at once. Omitted: no
   * check.
   */
  readonly rulesIntact?: () => Promise<boolean>;
  /** How often {@link rulesIntact} runs, in ms. Default 1000. */
  readonly rulesCheckIntervalMs?: number;
  /**
   * This node's interface addresses (`NodeFacts.localAddresses`), read before each sync (CIDR
   * `nodePortAddresses`); the health-check ports bind with the same reading.
   */
  readonly localAddresses?: () => readonly string[] | undefined;
  /**
   * The daemon's health state. Default: a new {@link ProxyHealth} with upstream's timeout
   * (`2 × syncPeriod`) on `clock`, served on `config.healthzBindAddress`.
   */
  readonly health?: ProxyHealth;
  /** The daemon's metrics. Default: new {@link ProxyMetrics}, served on `config.metricsBindAddress`. */
  readonly metrics?: ProxyMetrics;
  /**
   * Reads per-service-port connection totals at each metrics scrape (e.g.
   * `ServiceCounters.read`); omitted: the counter has no series.
   */
  readonly serviceConnections?: ServiceConnectionsSource;
  /** Health-check node ports. Default: a {@link ServiceHealthServer} binding real sockets. */
  readonly serviceHealth?: ServiceHealthServer;
  /**
   * When the process started, on `clock` (for the first sync's timing line). Default: when
   * {@link runProxy} was called.
   */
  readonly startedAt?: number;
}

/** How {@link runProxy} runs. */
export interface RunOptions {
  /** One full sync, then return. */
  readonly once: boolean;
  /**
   * Ends the run when aborted (SIGTERM, SIGINT), whatever it is waiting for: the daemon returns
   * 0; a `once` run that has not synced yet stops its source and returns 1, having applied
   * nothing.
   */
  readonly signal?: AbortSignal;
}

/**
 * Runs the proxy; resolves with the process exit code (0 on success). Errors of
 * `source.start()` (e.g. no API configuration) are thrown after everything started is stopped.
 *
 * @example
 * ```ts
 * const code = await runProxy(parts, { once: true });
 * ```
 */
export async function runProxy(parts: ProxyParts, options: RunOptions): Promise<number> {
  const { config, source, planner, log } = parts;
  const clock = parts.clock ?? realClock;
  const startup = { process: parts.startedAt ?? clock.now(), source: 0, listed: 0, logged: false };
  /** One line with where the time to the first rules in the kernel went (ms). */
  const logFirstSync = (outcome: SyncOutcome) => {
    if (startup.logged) return;
    startup.logged = true;
    const { track, render, apply } = outcome.phasesMs;
    log.info(
      `first sync timing: startup=${Math.round(startup.source - startup.process)} ` +
        `list=${startup.listed - startup.source} track=${track} render=${render} apply=${apply} ` +
        `total=${Math.round(clock.now() - startup.process)}`,
    );
  };
  const daemon = options.once ? undefined : daemonParts(parts, clock);
  const holder: { runner?: BoundedFrequencyRunner } = {};
  let synced!: () => void;
  const listed = new Promise<void>((resolve) => synced = resolve);
  const state: ProxyState = new ProxyState({
    hostname: config.hostname,
    log: (line) => log.warn(line),
    onRejected: (kind, message) => daemon?.metrics.rejected(kind, message),
    onChange: (kind) => {
      if (daemon !== undefined) {
        daemon.health.queued();
        daemon.metrics.queued(kind);
        daemon.metrics.pending(state.pending);
      }
      holder.runner?.run();
    },
    onSynced: () => {
      startup.listed = clock.now();
      synced();
    },
  });
  const loop = new SyncLoop(state, {
    planner,
    apply: parts.apply,
    applyPlan: parts.applyPlan,
    log,
    clock,
    localAddresses: parts.localAddresses,
  });

  /** Warns after the first sync (the Node is taken in with the changes) if there is none. */
  let nodeChecked = false;
  const warnIfNodeMissing = () => {
    if (nodeChecked) return;
    nodeChecked = true;
    if (state.node !== null) return;
    log.warn(
      `no Node named "${config.hostname}" was listed: node ports have no node address to ` +
        "answer on (unless nodePortAddresses lists CIDRs), externalTrafficPolicy: Local and " +
        "topology hints do not know this node, and /healthz answers 503 (as upstream's); " +
        "check --hostname-override",
    );
  };
  startup.source = clock.now();
  if (daemon === undefined) {
    // A signal ends the wait for the source (an API server that does not answer, a file being
    // parsed) at once; a sync already running finishes, it is one short transaction.
    const ready = await startSource(source, state, options.signal)
      .then((started) => started && untilAborted(listed, options.signal));
    if (!ready) {
      await source.stop();
      log.warn("interrupted before the sync; nothing was applied");
      return 1;
    }
    try {
      const outcome = await loop.sync();
      logFirstSync(outcome);
      warnIfNodeMissing();
      log.info(`synced ${state.services.size} service ports (${outcome.scriptBytes} bytes)`);
      return 0;
    } catch (err) {
      log.error(`sync failed: ${(err as Error).message}`);
      return 1;
    } finally {
      await source.stop();
    }
  }

  const servers: HttpServer[] = [];
  const stopWatch = watchRules(parts, {
    clock,
    log,
    ready: () => loop.lastSuccessAt !== undefined,
    restore: () => {
      daemon.metrics.rulesRestored();
      planner.reset();
      loop.requestFullSync();
      holder.runner?.run();
    },
  });
  const shutdown = async () => {
    stopWatch();
    await holder.runner?.stop();
    await source.stop();
    await Promise.allSettled([...servers.map((s) => s.close()), daemon.serviceHealth.close()]);
  };
  try {
    await startSource(source, state, options.signal);
  } catch (err) {
    await shutdown();
    throw err;
  }
  if (!options.signal?.aborted) servers.push(...startServers(config, daemon, log));

  const observe = syncObserver(state, loop, { ...daemon, parts, clock, synced: logFirstSync });
  const afterSync = async () => {
    await observe();
    warnIfNodeMissing();
  };
  const runner = holder.runner = new BoundedFrequencyRunner(afterSync, {
    minIntervalMs: config.minSyncPeriodMs,
    maxIntervalMs: config.syncPeriodMs,
    clock,
    onError: (err) => log.error(`sync failed, will retry: ${(err as Error).message}`),
  });
  const aborted = new Promise<void>((resolve) => {
    if (options.signal?.aborted) resolve();
    options.signal?.addEventListener("abort", () => resolve(), { once: true });
  });
  await Promise.race([listed, aborted]);
  if (!options.signal?.aborted) {
    log.info("initial state listed, starting syncs");
    daemon.health.started();
    runner.start();
    await aborted;
  }
  log.info("shutting down; rules stay in the kernel");
  await shutdown();
  return 0;
}

/**
 * Starts `source`, unless `signal` aborts first: then the source is stopped (which ends its
 * start) and false returned. Errors of `start()` are thrown.
 */
async function startSource(
  source: Source,
  state: ProxyState,
  signal: AbortSignal | undefined,
): Promise<boolean> {
  const starting = source.start(state);
  if (await untilAborted(starting, signal)) return true;
  await source.stop();
  await starting.catch(() => {});
  return false;
}

/** Waits for `promise`: true once it resolves, false if `signal` aborts first. */
async function untilAborted(promise: Promise<void>, signal?: AbortSignal): Promise<boolean> {
  if (signal === undefined) {
    await promise;
    return true;
  }
  if (signal.aborted) return false;
  let stop!: () => void;
  const aborted = new Promise<false>((resolve) => stop = () => resolve(false));
  signal.addEventListener("abort", stop, { once: true });
  try {
    return await Promise.race([promise.then(() => true), aborted]);
  } finally {
    signal.removeEventListener("abort", stop);
  }
}

/**
 * Runs `parts.rulesIntact` every `rulesCheckIntervalMs` once a sync has succeeded; calls
 * `restore` when the rules are gone (self-healing after `nft flush ruleset` and the like).
 * Returns a function that stops it.
 */
function watchRules(
  parts: ProxyParts,
  context: { clock: Clock; log: Logger; ready: () => boolean; restore: () => void },
): () => void {
  const check = parts.rulesIntact;
  if (check === undefined) return () => {};
  const { clock, log } = context;
  const interval = parts.rulesCheckIntervalMs ?? 1000;
  let timer: number | undefined;
  let stopped = false;
  const tick = async () => {
    if (stopped) return;
    try {
      if (context.ready()) {
        if (await check()) log.debug(4, "our rules are intact");
        else {
          log.warn("our rules were removed or flushed by someone else; restoring them now");
          context.restore();
        }
      }
    } catch (err) {
      log.warn(`cannot check our rules: ${(err as Error).message}`);
    }
    if (!stopped) timer = clock.setTimeout(tick, interval);
  };
  timer = clock.setTimeout(tick, interval);
  return () => {
    stopped = true;
    if (timer !== undefined) clock.clearTimeout(timer);
  };
}

/** The daemon's sync function: one sync plus everything that follows it (see module doc). */
function syncObserver(
  state: ProxyState,
  loop: SyncLoop,
  context: DaemonParts & {
    parts: ProxyParts;
    clock: Clock;
    /** Called after each successful sync, before anything that follows it. */
    synced: (outcome: SyncOutcome) => void;
  },
): () => Promise<void> {
  const { health, metrics, serviceHealth, parts, clock } = context;
  const { config, log } = parts;
  return async () => {
    const started = clock.now();
    let outcome: SyncOutcome;
    try {
      outcome = await loop.sync();
      context.synced(outcome);
    } catch (err) {
      metrics.syncFailed({
        full: loop.lastAttemptFull,
        seconds: (clock.now() - started) / 1000,
        family: refusedFamily(err),
      });
      throw err;
    } finally {
      metrics.pending(state.pending);
      health.syncNode(state.node);
    }
    health.updated();
    // Upstream's network programming latency: from each endpoint change to rules in force.
    for (const t of outcome.triggerTimes) metrics.networkProgrammed((clock.now() - t) / 1000);
    metrics.syncDone({
      full: outcome.full,
      seconds: outcome.durationMs / 1000,
      bytes: outcome.scriptBytes,
    });
    metrics.noLocalEndpoints(
      countNoLocalEndpoints(state.services, state.endpoints, config.hostname),
    );
    const checked = healthCheckedServices(state.services, state.endpoints);
    await serviceHealth.sync(checked, {
      bindIPs: checked.size === 0 ? [] : healthCheckBindIPs({
        nodePortAddresses: config.nodePortAddresses,
        nodeIPs: state.node?.ips ?? [],
        bindAddress: config.bindAddress,
        localAddresses: outcome.localAddresses,
      }),
    });
    if (parts.affinityCleanup !== undefined && outcome.applied) {
      const keys = outcome.full ? state.services.keys() : outcome.changed;
      if ([...keys].some((key) => state.services.get(key)?.sessionAffinity)) {
        try {
          const deleted = await parts.affinityCleanup();
          if (deleted > 0) log.debug(2, `deleted ${deleted} stale ClientIP affinity entries`);
        } catch (err) {
          log.warn(`cannot clean stale ClientIP affinity entries: ${(err as Error).message}`);
        }
      }
    }
    if (parts.conntrackReconcile !== undefined) {
      await reconcileConntrack(state, { run: parts.conntrackReconcile, metrics, log });
    }
  };
}

/**
 * The one family an apply error says was refused (`IptablesApplyError.family`: iptables mode
 * restores each family on its own), or undefined when the error names none (an nft transaction
 * holds every family). Read by shape, so that nft mode never loads the iptables modules.
 */
function refusedFamily(err: unknown): IPFamily | undefined {
  const family = (err as { family?: unknown } | null | undefined)?.family;
  return family === "IPv4" || family === "IPv6" ? family : undefined;
}

/** Runs the conntrack reconciler after a sync; a failure is logged and never fails the sync. */
async function reconcileConntrack(
  state: ProxyState,
  context: {
    run: (services: readonly ConntrackService[]) => Promise<readonly ReconcileResult[]>;
    metrics: ProxyMetrics;
    log: Logger;
  },
): Promise<void> {
  const { run, metrics, log } = context;
  let results: readonly ReconcileResult[];
  try {
    results = await run(conntrackServices(state.services, state.endpoints));
  } catch (err) {
    log.error(`conntrack reconciler failed: ${(err as Error).message}`);
    return;
  }
  for (const result of results) {
    metrics.conntrackReconciled(result);
    if (result.error !== undefined) {
      log.error(`conntrack reconciler (${result.family}) failed: ${result.error.message}`);
    } else if (result.deleted > 0) {
      log.debug(2, `deleted ${result.deleted} stale ${result.family} UDP conntrack entries`);
    }
  }
}
