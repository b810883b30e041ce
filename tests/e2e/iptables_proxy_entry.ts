/**
 * Test-only entry point running the proxy in iptables mode until main.ts is wired for it: the
 * same command line as main.ts, the file source, {@link IptablesPlanner} and
 * {@link IptablesApplier}, the nft tables removed after the first successful sync (mode
 * switch), and self-healing with {@link iptablesRulesIntact}. `KNP_IPTABLES_BACKEND` (`nft`, `legacy` or `auto`, default `auto`) picks the back end.
 *
 * @example
 * ```sh
 * deno run -A tests/e2e/iptables_proxy_entry.ts --mode=iptables --from-file cluster.yaml
 * ```
 *
 * @module
 */
import { ConfigError } from "../../src/config/config_error.ts";
import { parseCommandLine } from "../../src/config/flags.ts";
import {
  afterFirstApply,
  IptablesApplier,
  type IptablesBackend,
  readConntrackTCPLiberal,
  removeOtherMode,
} from "../../src/apply/iptables.ts";
import { iptablesRulesIntact } from "../../src/apply/iptables_watch.ts";
import { createLogger } from "../../src/log.ts";
import { IptablesPlanner } from "../../src/render/iptables/planner.ts";
import { runProxy } from "../../src/runner/proxy.ts";
import { FileSource } from "../../src/source/file_source.ts";

/** Runs the proxy in iptables mode; resolves with the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  let commandLine;
  try {
    commandLine = await parseCommandLine(args);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    console.error(`iptables_proxy_entry: ${err.message}`);
    return 2;
  }
  const { config, actions } = commandLine;
  const log = createLogger({ verbosity: config.verbosity });
  const wanted = Deno.env.get("KNP_IPTABLES_BACKEND") ?? "auto";
  if (!["nft", "legacy", "auto"].includes(wanted)) {
    log.error(`KNP_IPTABLES_BACKEND must be nft, legacy or auto, not ${wanted}`);
    return 2;
  }
  const applier = new IptablesApplier({
    backend: wanted as IptablesBackend | "auto",
    log: (line) => log.info(line),
  });
  if (actions.cleanup) {
    await applier.cleanup();
    log.info("removed the iptables rules of kube-nftproxy");
    return 0;
  }
  if (config.fromFile === "") {
    log.error("this test entry needs --from-file FILE");
    return 2;
  }
  const controller = new AbortController();
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => controller.abort());
  }
  const planner = new IptablesPlanner(config, {
    conntrackTCPLiberal: await readConntrackTCPLiberal(),
  });
  const apply = afterFirstApply(
    (script) => applier.apply(script),
    () => removeOtherMode("iptables", { tableName: config.tableName }),
    (err) => log.warn(`cannot remove the nft tables of the other mode: ${err}`),
  );
  return await runProxy({
    config,
    log,
    source: new FileSource(config.fromFile, { log: (line) => log.warn(line) }),
    planner,
    apply,
    // Self-healing: a full sync as soon as someone flushed our rules or deleted the canary.
    rulesIntact: async () =>
      iptablesRulesIntact({ backend: await applier.backend(), families: ["IPv4", "IPv6"] }),
  }, { once: actions.once, signal: controller.signal });
}

if (import.meta.main) Deno.exit(await main(Deno.args));
