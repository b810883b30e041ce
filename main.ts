/**
 * kube-nftproxy's entry point: parses the command line, picks the back end of the mode, builds
 * the source, and starts the runner and the servers.
 *
 * Composition only — every decision lives in the module it belongs to; what a mode does lives
 * behind its back end (src/backend/, docs/architecture.md). What a run does not need is not
 * loaded: `--from-file` never loads the API client, the API path never loads the YAML file
 * source, and each mode loads only its own back end. Without `--from-file` the proxy watches the
 * Kubernetes API (`--kubeconfig`, `--master`, or the in-cluster service account).
 *
 * Test hook: the environment variable `KUBE_NFTPROXY_NFT`, when set, names the `nft` program
 * used to apply and clean up rules (tests point it at a wrapper that can be told to fail). It is
 * not a configuration option and nothing else reads it.
 *
 * @example
 * ```sh
 * deno run -A main.ts --mode=nft --from-file cluster.yaml --once
 * ```
 *
 * @module
 */
import { NoIPv4Error } from "./src/apply/families.ts";
import { reconcileConntrack } from "./src/apply/conntrack.ts";
import { applyConntrackSettings, conntrackSettings } from "./src/apply/conntrack_sysctls.ts";
import { applyOomScoreAdj } from "./src/apply/oom_score_adj.ts";
import { DryRunError } from "./src/backend/backend.ts";
import { cleanUp, createBackend } from "./src/backend/backends.ts";
import type { Config } from "./src/config/config.ts";
import { ConfigError } from "./src/config/config_error.ts";
import { helpText, parseCommandLine, toKubeProxyConfiguration } from "./src/config/flags.ts";
import { createLogger, type Logger } from "./src/log.ts";
import { readNodeFacts } from "./src/node/node_facts.ts";
import { runProxy } from "./src/runner/proxy.ts";
import { ProxyMetrics } from "./src/server/metrics.ts";
import { healthTimeoutMs, ProxyHealth } from "./src/server/health.ts";
import { watchConfigFile } from "./src/source/config_file_watch.ts";
import { rateLimitedFetch, TokenBucket } from "./src/source/rate_limit.ts";
import type { Source } from "./src/source/events.ts";
import { reportUserErrors } from "./src/user_errors.ts";
import { VERSION } from "./src/version.ts";

/**
 * Runs the proxy with command-line arguments; resolves with the exit code. An error the user
 * caused (flags, config, cluster file, kubeconfig, an API server a one-shot run cannot reach)
 * is one line on stderr and exit code 2 (src/user_errors.ts).
 */
export function main(args: readonly string[]): Promise<number> {
  return reportUserErrors(() => run(args));
}

async function run(args: readonly string[]): Promise<number> {
  const nftPath = Deno.env.get("KUBE_NFTPROXY_NFT") || undefined;
  if (args[0] === "explain") {
    const { explainCommand } = await import("./src/explain/command.ts");
    const { nodeExplainIO } = await import("./src/explain/node_io.ts");
    return await explainCommand(args.slice(1), nodeExplainIO({ nftPath }));
  }
  if (args[0] === "trace") {
    const { traceCommand } = await import("./src/trace/command.ts");
    const { nodeTraceIO } = await import("./src/trace/node_io.ts");
    return await traceCommand(args.slice(1), nodeTraceIO({ nftPath }));
  }
  const { config, actions, warnings, configFile } = await parseCommandLine(args);
  if (actions.showHelp) return print(helpText());
  if (actions.showVersion) return print(`kube-nftproxy ${VERSION}`);
  if (actions.writeConfigTo !== "") {
    await writeConfig(actions.writeConfigTo, toKubeProxyConfiguration(config));
    return 0;
  }
  const log = createLogger({ verbosity: config.verbosity, format: config.loggingFormat });
  warnings.forEach((line) => log.warn(line));
  // The metrics are made once the node's families (their `ip_family` labels) are known;
  // clean-up failures before that (`--cleanup`, which serves no metrics) are only logged.
  const made: { metrics?: ProxyMetrics } = {};
  const context = {
    log,
    nftPath,
    cleanupFailed: (what: string, err: unknown) => made.metrics?.cleanupFailed(what, err),
  };
  if (actions.cleanup || actions.cleanupIptables) {
    await cleanUp(config, context, actions);
    return 0;
  }
  if (actions.initOnly) {
    // The start-up work that needs more than CAP_NET_ADMIN, as upstream's --init-only.
    await tuneConntrack(config, log);
    log.info("--init-only: initialization done, exiting");
    return 0;
  }
  log.info(`kube-nftproxy ${VERSION} starting: mode ${config.mode}, node "${config.hostname}"`);
  const controller = new AbortController();
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => controller.abort());
  }
  const backend = await createBackend(config, context);
  let node;
  try {
    // Away from a node (a dry run without root) both families are planned.
    node = await readNodeFacts({
      probe: () => backend.probeFamilies(),
      warn: (line) => log.warn(line),
      allFamiliesOnError: actions.dryRun,
    });
  } catch (err) {
    if (!(err instanceof NoIPv4Error)) throw err;
    log.error(err.message);
    return 1;
  }
  const metrics = made.metrics = new ProxyMetrics({ mode: backend.mode, families: node.families });
  if (!actions.dryRun) {
    const oom = await applyOomScoreAdj(config.oomScoreAdj);
    if (oom.changed !== undefined) log.info(`set ${oom.changed}`);
    if (oom.refused !== undefined) log.debug(2, oom.refused);
    await tuneConntrack(config, log);
  }
  const once = actions.once || actions.dryRun;
  let configChanged = false;
  if (configFile !== undefined && !once) {
    watchConfigFile(configFile.path, {
      loaded: configFile.text,
      signal: controller.signal,
      warn: (line) => log.warn(line),
      onChange: (line) => {
        // As upstream: end cleanly, non-zero, so the pod restarts with the new ConfigMap.
        log.error(line);
        configChanged = true;
        controller.abort();
      },
    });
  }
  const proxier = await backend.proxier(node.families);
  /** What changes the kernel; absent in a dry run, which only collects the script. */
  const kernel = actions.dryRun ? undefined : proxier;
  let planned = "";
  const collect = (script: string) => {
    planned += script;
    return Promise.resolve();
  };
  const code = await runProxy({
    config,
    log,
    metrics,
    // Deno's performance clock starts with the process.
    startedAt: Date.now() - performance.now(),
    source: await createSource(config, log, { once }),
    planner: proxier.planner,
    apply: kernel?.apply ?? collect,
    applyPlan: kernel?.applyPlan,
    conntrackReconcile: kernel
      ? (services) => reconcileConntrack(services, { families: node.families })
      : undefined,
    affinityCleanup: kernel?.cleanStaleAffinity,
    localAddresses: node.localAddresses,
    rulesIntact: kernel?.rulesIntact,
    rulesCheckIntervalMs: proxier.rulesCheckIntervalMs,
    serviceConnections: kernel?.serviceConnections,
    health: new ProxyHealth({
      healthTimeoutMs: healthTimeoutMs(config.syncPeriodMs),
      families: node.families,
    }),
  }, { once, signal: controller.signal });
  if (configChanged) return 1;
  if (code !== 0 || !actions.dryRun) return code;
  let report;
  try {
    report = await backend.dryRun(planned, actions.output);
  } catch (err) {
    if (!(err instanceof DryRunError)) throw err;
    log.error(err.message);
    return 1;
  }
  report.warnings.forEach((line) => log.warn(line));
  await Deno.stdout.write(new TextEncoder().encode(report.text));
  return 0;
}

/**
 * The configured source, loading only its own module (the API client is heavy). A one-shot run
 * waits for the API server at most one sync period.
 */
async function createSource(
  config: Config,
  log: Logger,
  options: { once: boolean },
): Promise<Source> {
  if (config.fromFile !== "") {
    const { FileSource } = await import("./src/source/file_source.ts");
    return new FileSource(config.fromFile, {
      log: (line) => log.warn(line),
      maxBytes: config.maxClusterFileBytes,
    });
  }
  const { ApiSource } = await import("./src/source/api_source.ts");
  return new ApiSource({
    kubeconfig: config.kubeconfig,
    master: config.master,
    hostname: config.hostname,
    log: (line) => log.info(line),
    syncTimeoutMs: options.once ? config.syncPeriodMs : undefined,
    recordEvents: !options.once,
    maxListBytes: config.maxListBytes,
    maxEventBytes: config.maxWatchEventBytes,
    fetch: rateLimitedFetch(
      fetch,
      new TokenBucket({
        qps: config.kubeApiQps,
        burst: config.kubeApiBurst,
      }),
    ),
  });
}

/** Sets the kernel's conntrack settings; what the kernel refuses is a warning. */
async function tuneConntrack(config: Config, log: Logger): Promise<void> {
  const conntrack = await applyConntrackSettings(
    conntrackSettings(config, navigator.hardwareConcurrency),
  );
  conntrack.changed.forEach((line) => log.info(`conntrack: set ${line}`));
  conntrack.refused.forEach((line) => log.warn(`conntrack: ${line}`));
}

/** Writes `--write-config-to`; a file that cannot be written is the user's error. */
async function writeConfig(path: string, text: string): Promise<void> {
  try {
    await Deno.writeTextFile(path, text);
  } catch (err) {
    const message = `flag --write-config-to: cannot write ${path}: ${(err as Error).message}`;
    throw new ConfigError(message, { cause: err });
  }
}

function print(text: string): number {
  console.log(text);
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
