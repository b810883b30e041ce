/**
 * The `explain` command line: `main.ts explain --from ADDR --to ADDR:PORT/PROTO --from-file F
 * [proxy flags…] [--output text|json]`. Loads the cluster file into a proxy state, explains the
 * packet with {@link explainPacket} and formats the answer. I/O (reading the file, printing) is
 * passed in, so the command runs in tests without a process.
 *
 * @module
 */
import type { Config } from "../config/config.ts";
import { parseCommandLine } from "../config/flags.ts";
import { parseClusterFile } from "../source/file_source.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import {
  canonicalAddress,
  type ExplainInput,
  explainPacket,
  type Explanation,
  parseTarget,
} from "./explain.ts";

/** What the command reads and writes. */
export interface ExplainIO {
  readTextFile(path: string): Promise<string>;
  /** Writes one text to standard output. */
  print(text: string): void;
  /** Writes one line to standard error. */
  printError(line: string): void;
}

/** The command's own flags, taken out before the proxy flags are parsed. */
interface ExplainFlags {
  from: string;
  to: string;
  output: string;
  rest: string[];
}

const OWN_FLAGS = ["--from", "--to", "--output"] as const;

function splitFlags(args: readonly string[]): ExplainFlags {
  const own = new Map<string, string>();
  const rest: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const flag = OWN_FLAGS.find((f) => arg === f || arg.startsWith(`${f}=`));
    if (flag === undefined) {
      rest.push(arg);
    } else if (arg === flag) {
      if (i + 1 >= args.length) throw new Error(`${flag} needs a value`);
      own.set(flag, args[++i]);
    } else {
      own.set(flag, arg.slice(flag.length + 1));
    }
  }
  return {
    from: own.get("--from") ?? "",
    to: own.get("--to") ?? "",
    output: own.get("--output") ?? "text",
    rest,
  };
}

/**
 * Builds an {@link ExplainInput} from the text of a cluster file, as the proxy would see it on
 * the node `config.hostname`.
 */
export function explainInputFromClusterFile(
  text: string,
  config: Config,
  options: { source?: string; localAddresses?: readonly string[] } = {},
): ExplainInput {
  const { objects } = parseClusterFile(text, { source: options.source });
  const state = new ProxyState({ hostname: config.hostname, log: () => {} });
  for (const { kind, object } of objects.values()) state.onEvent({ kind, current: object });
  state.onSynced();
  state.takeChanges();
  return {
    config,
    services: state.services,
    endpoints: state.endpoints,
    node: state.node,
    serviceCIDRs: state.serviceCIDRs,
    localAddresses: options.localAddresses,
  };
}

/**
 * Runs `explain` with the arguments after the word `explain`; resolves with the exit code
 * (0 answered, 2 bad command line or unreadable file).
 *
 * @example
 * ```ts
 * await explainCommand(
 *   ["--from", "192.168.77.2", "--to", "10.96.0.10:80/tcp", "--from-file", "cluster.yaml"],
 *   { readTextFile: Deno.readTextFile, print: console.log, printError: console.error },
 * );
 * ```
 */
export async function explainCommand(args: readonly string[], io: ExplainIO): Promise<number> {
  let explanation: Explanation;
  let output: string;
  try {
    const flags = splitFlags(args);
    output = flags.output;
    if (output !== "text" && output !== "json") {
      throw new Error(`--output ${output}: want text or json`);
    }
    if (flags.from === "" || flags.to === "") throw new Error("explain needs --from and --to");
    const { config } = await parseCommandLine(flags.rest);
    if (config.fromFile === "") {
      throw new Error("explain needs --from-file (reading the live ruleset is not supported)");
    }
    const input = explainInputFromClusterFile(await io.readTextFile(config.fromFile), config, {
      source: config.fromFile,
    });
    if (input.node === null) {
      io.printError(
        `kube-nftproxy explain: warning: no Node "${config.hostname}" in ${config.fromFile} ` +
          "(set --hostname-override): node addresses and node ports are unknown",
      );
    }
    explanation = explainPacket(input, {
      from: canonicalAddress(flags.from, "--from"),
      to: parseTarget(flags.to),
    });
  } catch (err) {
    io.printError(`kube-nftproxy explain: ${(err as Error).message}`);
    return 2;
  }
  io.print(
    output === "json" ? JSON.stringify(explanation, null, 2) : formatExplanation(explanation),
  );
  return 0;
}

/** The human-readable form of an explanation. */
export function formatExplanation(e: Explanation): string {
  const lines = [
    `verdict:     ${e.verdict}`,
    `source:      ${e.source}`,
    `service:     ${e.servicePort ?? "-"}`,
    `entry:       ${e.entry ?? "-"}`,
    `path:        ${e.path.join(" → ")}`,
  ];
  if (e.endpoints.length > 0) {
    lines.push("endpoints:");
    for (const ep of e.endpoints) {
      const addr = ep.ip.includes(":") ? `[${ep.ip}]:${ep.port}` : `${ep.ip}:${ep.port}`;
      lines.push(`  ${addr}  ${(ep.probability * 100).toFixed(1)}%`);
    }
    lines.push(
      `masquerade:  ${e.masquerade ? "yes" : "no"}${e.sticky ? " (ClientIP affinity)" : ""}`,
    );
  }
  lines.push(`reason:      ${e.reason}`);
  return lines.join("\n");
}
