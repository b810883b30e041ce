/**
 * kube-nftproxy's entry point: parses the command line, builds the stages and runs them.
 *
 * Composition only — every decision lives in the module it belongs to. Without `--from-file` the
 * proxy watches the Kubernetes API (`--kubeconfig`, `--master`, or the in-cluster service
 * account).
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
import { ConfigError } from "./src/config/config_error.ts";
import { explainCommand } from "./src/explain/command.ts";
import { helpText, parseCommandLine, toKubeProxyConfiguration } from "./src/config/flags.ts";
import { runConntrackCleanup } from "./src/apply/conntrack.ts";
import { applyConntrackSettings, conntrackSettings } from "./src/apply/conntrack_sysctls.ts";
import { applyNft, deleteTables } from "./src/apply/nft.ts";
import { createLogger } from "./src/log.ts";
import {
  dryRunIptables,
  dryRunNft,
  formatDryRun,
  formatIptablesDryRun,
} from "./src/dryrun/dry_run.ts";
import { TableTextError } from "./src/dryrun/table_image.ts";
import { NftPlanner } from "./src/render/nft/planner.ts";
import { IptablesPlanner } from "./src/render/iptables/planner.ts";
import {
  afterFirstApply,
  cleanupIptables,
  IptablesApplier,
  readConntrackTCPLiberal,
  removeOtherMode,
} from "./src/apply/iptables.ts";
import { cleanStaleAffinity } from "./src/apply/affinity.ts";
import { nftRulesIntact } from "./src/apply/nft_watch.ts";
import { iptablesRulesIntact } from "./src/apply/iptables_watch.ts";
import {
  iptablesFamilySupport,
  nftFamilySupport,
  NoIPv4Error,
  refusedWarning,
} from "./src/apply/families.ts";
import type { Config } from "./src/config/config.ts";
import type { IPFamily } from "./src/model/service_port.ts";
import type { NftFamily } from "./src/render/nft/transaction.ts";
import {
  nftServiceCounterReader,
  type ServiceConnections,
  ServiceCounters,
} from "./src/apply/service_counters.ts";
import { localInterfaceAddresses } from "./src/server/health_check_ports.ts";
import { runProxy } from "./src/runner/proxy.ts";
import { ApiConfigError, ApiSource } from "./src/source/api_source.ts";
import { FileSource } from "./src/source/file_source.ts";
import { VERSION } from "./src/version.ts";

/** Runs the proxy with command-line arguments; resolves with the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  if (args[0] === "explain") {
    const nftPath = Deno.env.get("KUBE_NFTPROXY_NFT") || undefined;
    return await explainCommand(args.slice(1), {
      readTextFile: (path) => Deno.readTextFile(path),
      print: (text) => console.log(text),
      printError: (line) => console.error(line),
      apiSource: (config) =>
        new ApiSource({
          kubeconfig: config.kubeconfig,
          master: config.master,
          hostname: config.hostname,
          log: () => {},
        }),
      kernelDiff: async (script) => {
        const report = await dryRunNft(script, { nftPath });
        report.warnings.forEach((line) => console.error(`kube-nftproxy explain: ${line}`));
        return report.diff;
      },
      localAddresses: localInterfaceAddresses,
      // Probed like the daemon does; if the kernel cannot be asked, both.
      families: (config) =>
        nftFamilySupport(config.tableName, { nftPath }).then((s) => s.usable, () => ["ip", "ip6"]),
    });
  }
  let commandLine;
  try {
    commandLine = await parseCommandLine(args);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`kube-nftproxy: ${err.message}`);
    return 2;
  }
  const { config, actions } = commandLine;
  if (actions.showHelp) return print(helpText());
  if (actions.showVersion) return print(`kube-nftproxy ${VERSION}`);
  if (actions.writeConfigTo !== "") {
    await Deno.writeTextFile(actions.writeConfigTo, toKubeProxyConfiguration(config));
    return 0;
  }
  const log = createLogger({ verbosity: config.verbosity });
  const nft = { nftPath: Deno.env.get("KUBE_NFTPROXY_NFT") || undefined };
  if (actions.cleanup) {
    await deleteTables(config.tableName, nft);
    log.info(`removed tables ip/ip6 ${config.tableName}`);
  }
  if (actions.cleanupIptables || (actions.cleanup && config.mode === "iptables")) {
    await cleanupIptables();
    log.info("removed the KUBE-* chains and their jump rules (iptables-nft and iptables-legacy)");
  }
  if (actions.cleanup || actions.cleanupIptables) return 0;
  log.info(`kube-nftproxy ${VERSION} starting: mode ${config.mode}, node "${config.hostname}"`);
  const controller = new AbortController();
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => controller.abort());
  }
  const encoder = new TextEncoder();
  const warn = (line: string) => log.warn(line);
  const iptables = new IptablesApplier({
    backend: config.iptablesBackend,
    log: (line) => log.info(line),
  });
  let families: Families = { nft: undefined, iptables: undefined };
  if (actions.dryRun && config.mode === "nft") {
    // The families this node's kernel takes; away from a node (no root) both are planned.
    families = await familiesToProgram(config, nft, iptables, (line) => log.warn(line))
      .catch(() => families);
  } else if (!actions.dryRun) {
    try {
      families = await familiesToProgram(config, nft, iptables, (line) => log.warn(line));
    } catch (err) {
      if (!(err instanceof NoIPv4Error)) throw err;
      log.error(err.message);
      return 1;
    }
    const conntrack = await applyConntrackSettings(
      conntrackSettings(config, navigator.hardwareConcurrency),
    );
    conntrack.changed.forEach((line) => log.info(`conntrack: set ${line}`));
    conntrack.refused.forEach((line) => log.warn(`conntrack: ${line}`));
  }
  const iptablesBackend = config.mode === "iptables" && !actions.dryRun
    ? await iptables.backend()
    : undefined;
  const nftPlanner = config.mode === "nft"
    ? new NftPlanner(config, { families: families.nft })
    : undefined;
  const planner = nftPlanner ?? new IptablesPlanner(config, {
    conntrackTCPLiberal: await readConntrackTCPLiberal(),
    families: families.iptables,
  });
  const nftFamilies = { ...nft, families: families.nft };
  // The first successful sync also removes the other mode's rules (switching modes).
  const applyRules = afterFirstApply(
    config.mode === "nft" ? (script) => applyNft(script, nft) : (script) => iptables.apply(script),
    () => removeOtherMode(config.mode, { tableName: config.tableName, nftPath: nft.nftPath }),
    (err) => log.warn(`cannot remove the other mode's rules: ${(err as Error).message}`),
  );
  /** In a dry run, the script the sync would have sent. */
  let planned = "";
  const dryRunApply = (script: string) => {
    planned += script;
    return Promise.resolve();
  };
  try {
    const code = await runProxy({
      config,
      log,
      // Deno's performance clock starts with the process.
      startedAt: Date.now() - performance.now(),
      source: config.fromFile !== ""
        ? new FileSource(config.fromFile, { log: warn })
        : new ApiSource({
          kubeconfig: config.kubeconfig,
          master: config.master,
          hostname: config.hostname,
          log: (line) => log.info(line),
        }),
      planner,
      apply: actions.dryRun ? dryRunApply : applyRules,
      conntrackCleanup: actions.dryRun ? undefined : (commands) => runConntrackCleanup(commands),
      affinityCleanup: actions.dryRun || nftPlanner === undefined
        ? undefined
        : () => cleanStaleAffinity(nftPlanner, { table: config.tableName, ...nft }),
      localAddresses: localInterfaceAddresses,
      rulesIntact: actions.dryRun
        ? undefined
        : nftPlanner !== undefined
        ? () => nftRulesIntact(config.tableName, nftFamilies)
        : async () =>
          iptablesRulesIntact({
            backend: await iptables.backend(),
            families: families.iptables ?? ["IPv4", "IPv6"],
          }),
      // iptables-legacy reads a whole nat table per check (~0.5 s at 10k services).
      rulesCheckIntervalMs: iptablesBackend === "legacy" ? 10_000 : undefined,
      serviceConnections: actions.dryRun || nftPlanner === undefined
        ? undefined
        : serviceConnections(config.tableName, nftFamilies),
    }, { once: actions.once || actions.dryRun, signal: controller.signal });
    if (code !== 0 || !actions.dryRun) return code;
    if (nftPlanner === undefined) {
      const report = await dryRunIptables(planned, { backend: await iptables.backend() });
      report.warnings.forEach((line) => log.warn(`${line}; diffing against empty tables`));
      await Deno.stdout.write(encoder.encode(formatIptablesDryRun(report, actions.output)));
      return 0;
    }
    let report;
    try {
      report = await dryRunNft(planned, nft);
    } catch (err) {
      if (!(err instanceof TableTextError)) throw err;
      log.error(`cannot read the kernel's tables for a dry run: ${err.message}`);
      return 1;
    }
    report.warnings.forEach((line) => log.warn(`${line}; diffing against an empty table`));
    await Deno.stdout.write(encoder.encode(formatDryRun(report.diff, actions.output)));
    return 0;
  } catch (err) {
    if (!(err instanceof ApiConfigError)) throw err;
    log.error(`cannot load the Kubernetes API configuration: ${err.message}`);
    return 2;
  }
}

/** The families to program in each mode; undefined: both. */
interface Families {
  readonly nft: readonly NftFamily[] | undefined;
  readonly iptables: readonly IPFamily[] | undefined;
}

/**
 * Asks the kernel which families it accepts in the configured mode, warning about a refused
 * one; throws {@link NoIPv4Error} when IPv4 is refused.
 */
async function familiesToProgram(
  config: Config,
  nft: { nftPath?: string },
  iptables: IptablesApplier,
  warn: (line: string) => void,
): Promise<Families> {
  if (config.mode === "nft") {
    const support = await nftFamilySupport(config.tableName, nft);
    support.refused.forEach((r) => warn(refusedWarning(r.family, r.reason)));
    return { nft: support.usable, iptables: undefined };
  }
  const support = await iptablesFamilySupport({ backend: await iptables.backend() });
  support.refused.forEach((r) => warn(refusedWarning(r.family, r.reason)));
  return { nft: undefined, iptables: support.usable };
}

/** Per-service connection totals from the kernel's dispatch-map counters, read at each scrape. */
function serviceConnections(
  table: string,
  nft: { nftPath?: string; families?: readonly NftFamily[] },
): () => Promise<ServiceConnections[]> {
  const counters = new ServiceCounters(nftServiceCounterReader(table, nft));
  return () => counters.read();
}

function print(text: string): number {
  console.log(text);
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
