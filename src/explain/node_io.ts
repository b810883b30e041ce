/**
 * The `explain` command's I/O on a real node: the cluster file or the API server, the node's
 * interface addresses, and its kernel's nft tables (`--live`). Each heavy part (the API client,
 * the dry-run differ) is loaded only when the command needs it.
 *
 * @module
 */
import { nftFamilySupport } from "../apply/nft.ts";
import { readTextFileBounded } from "../bounded_read.ts";
import { localInterfaceAddresses } from "../node/node_facts.ts";
import type { ExplainIO } from "./command.ts";

/** Options of {@link nodeExplainIO}. */
export interface NodeExplainIOOptions {
  /** The `nft` program (the `KUBE_NFTPROXY_NFT` test hook). Default `nft` on the PATH. */
  readonly nftPath?: string;
}

/**
 * Reads files with Deno within the limit asked for, prints to stdout and stderr, lists the cluster from the API server
 * when there is no `--from-file`, and reads this node's kernel for `--live`.
 *
 * @example
 * ```ts
 * const code = await explainCommand(args, nodeExplainIO({ nftPath: "nft" }));
 * ```
 */
export function nodeExplainIO(options: NodeExplainIOOptions = {}): ExplainIO {
  const { nftPath } = options;
  return {
    readTextFile: (path, maxBytes) => readTextFileBounded(path, maxBytes),
    print: (text) => console.log(text),
    printError: (line) => console.error(line),
    apiSource: async (config) => {
      const { ApiSource } = await import("../source/api_source.ts");
      return new ApiSource({
        kubeconfig: config.kubeconfig,
        master: config.master,
        hostname: config.hostname,
        log: () => {},
      });
    },
    kernelDiff: async (script) => {
      const { dryRunNft } = await import("../dryrun/dry_run.ts");
      const report = await dryRunNft(script, { nftPath });
      report.warnings.forEach((line) => console.error(`kube-nftproxy explain: ${line}`));
      return report.diff;
    },
    localAddresses: localInterfaceAddresses,
    // Probed like the daemon does; if the kernel cannot be asked, both.
    families: (config) =>
      nftFamilySupport(config.tableName, { nftPath }).then((s) => s.usable, () => ["ip", "ip6"]),
  };
}
