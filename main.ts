/**
 * kube-nftproxy's entry point: parses the command line, builds the stages and runs them.
 *
 * Composition only — every decision lives in the module it belongs to.
 *
 * @example
 * ```sh
 * deno run -A main.ts --mode=nft --from-file cluster.yaml --once
 * ```
 *
 * @module
 */
import { ConfigError } from "./src/config/config_error.ts";
import { helpText, parseCommandLine, toKubeProxyConfiguration } from "./src/config/flags.ts";
import { applyNft, deleteTables } from "./src/apply/nft.ts";
import { createLogger } from "./src/log.ts";
import { NftPlanner } from "./src/render/nft/planner.ts";
import { runProxy } from "./src/runner/proxy.ts";
import { FileSource } from "./src/source/file_source.ts";
import { VERSION } from "./src/version.ts";

/** Runs the proxy with command-line arguments; resolves with the exit code. */
export async function main(args: readonly string[]): Promise<number> {
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
  if (actions.cleanup) {
    await deleteTables(config.tableName);
    log.info(`removed tables ip/ip6 ${config.tableName}`);
    return 0;
  }
  if (config.mode !== "nft") {
    log.error("--mode=iptables is not available yet; use --mode=nft");
    return 2;
  }
  if (config.fromFile === "") {
    log.error("the Kubernetes API source is not available yet; use --from-file FILE");
    return 2;
  }
  log.info(`kube-nftproxy ${VERSION} starting: mode ${config.mode}, node "${config.hostname}"`);
  const controller = new AbortController();
  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    Deno.addSignalListener(signal, () => controller.abort());
  }
  const encoder = new TextEncoder();
  return await runProxy({
    config,
    log,
    source: new FileSource(config.fromFile, { log: (line) => log.warn(line) }),
    planner: new NftPlanner(config),
    apply: actions.dryRun
      ? async (script) => void await Deno.stdout.write(encoder.encode(script))
      : (script) => applyNft(script),
  }, { once: actions.once, signal: controller.signal });
}

function print(text: string): number {
  console.log(text);
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
