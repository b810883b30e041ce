/**
 * The `explain` command line: `main.ts explain --from ADDR --to ADDR:PORT/PROTO [--from-file F]
 * [--live] [proxy flags…] [--output text|json]`. Loads the cluster (a file, or the API server as
 * the proxy would) into a proxy state, explains the packet with {@link explainPacket} and formats
 * the answer; with `--live` it also says whether the node's kernel holds those rules for this
 * packet. I/O (reading the file, the API, the kernel, printing) is passed in, so the command
 * runs in tests without a process.
 *
 * @module
 */
import { formatBytes, InputTooLargeError } from "../bounded_read.ts";
import type { Config } from "../config/config.ts";
import { parseCommandLine } from "../config/flags.ts";
import type { DryRunDiff } from "../dryrun/table_diff.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import type { NftFamily } from "../render/nft/transaction.ts";
import type { Source } from "../source/events.ts";
import { DEFAULT_MAX_FILE_BYTES, parseClusterFile } from "../source/file_source.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { formatAgreement, type KernelAgreement, kernelAgreement } from "./live.ts";
import {
  canonicalAddress,
  type ExplainInput,
  explainPacket,
  type Explanation,
  parseTarget,
} from "./explain.ts";

/** What the command reads and writes. */
export interface ExplainIO {
  /**
   * The text of the file at `path`, refusing more than `maxBytes` with
   * {@link InputTooLargeError} (the bounded read of `../bounded_read.ts`).
   */
  readTextFile(path: string, maxBytes: number): Promise<string>;
  /** Writes one text to standard output. */
  print(text: string): void;
  /** Writes one line to standard error. */
  printError(line: string): void;
  /** The API server as a source (without `--from-file`). Absent: a cluster file is required. */
  apiSource?(config: Config): Source | Promise<Source>;
  /** Diffs the kernel's tables against a full-sync script (`--live`). */
  kernelDiff?(script: string): Promise<DryRunDiff>;
  /** This node's interface addresses (`--live`: CIDR `nodePortAddresses`, as the proxy sees). */
  localAddresses?(): readonly string[] | undefined;
  /** The nft families the kernel takes (`--live`), as the proxy programs them. Default both. */
  families?(config: Config): Promise<readonly NftFamily[]>;
}

/** How long the API server may take to list the cluster. */
const LIST_TIMEOUT_MS = 30_000;

/** What `explain --help` prints. */
export const EXPLAIN_USAGE =
  `Usage: kube-nftproxy explain --from ADDR --to ADDR:PORT[/PROTO] [options] [proxy flags]

Says where the proxy's rules send one connection, and why: the verdict (dnat, reject, drop or
no-match), the service port and entry point, the chains passed, the eligible endpoints with
their probability, and whether the source is masqueraded.

Options:
  --from ADDR             the client's address (a pod, the node, or off-cluster)
  --to ADDR:PORT[/PROTO]  where it connects; PROTO is tcp (default), udp or sctp; IPv6 in
                          brackets: [fd00::10]:80/tcp
  --output text|json      the answer's format (default text)
  --live                  also read this node's nft tables and say whether they hold these
                          rules for this packet (needs --mode=nft)
  -h, --help              print this text

Proxy flags (see kube-nftproxy --help) set what the proxy would program: the cluster comes from
--from-file FILE, else from the API server (--kubeconfig, --master or in-cluster), as seen from
--hostname-override; --config, --cluster-cidr, --detect-local-mode, --masquerade-all,
--nodeport-addresses and the others apply as they do to the proxy.

Exit status: 0 answered, 2 bad command line, unreadable cluster or unreachable API server.`;

/** The command's own flags, taken out before the proxy flags are parsed. */
interface ExplainFlags {
  from: string;
  to: string;
  output: string;
  live: boolean;
  rest: string[];
}

const OWN_FLAGS = ["--from", "--to", "--output"] as const;

function splitFlags(args: readonly string[]): ExplainFlags {
  const own = new Map<string, string>();
  const rest: string[] = [];
  let live = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const flag = OWN_FLAGS.find((f) => arg === f || arg.startsWith(`${f}=`));
    if (arg === "--live" || arg === "--live=true") live = true;
    else if (arg === "--live=false") live = false;
    else if (flag === undefined) {
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
    live,
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
  return inputOf(state, config, options.localAddresses);
}

/**
 * Builds an {@link ExplainInput} from a source's first complete listing (e.g. the API server),
 * then stops the source. Throws when the listing takes longer than `timeoutMs`.
 */
export async function explainInputFromSource(
  source: Source,
  config: Config,
  options: { timeoutMs?: number; localAddresses?: readonly string[] } = {},
): Promise<ExplainInput> {
  let listed!: () => void;
  const done = new Promise<void>((resolve) => listed = resolve);
  const state = new ProxyState({
    hostname: config.hostname,
    log: () => {},
    onSynced: () => listed(),
  });
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    const ms = options.timeoutMs ?? LIST_TIMEOUT_MS;
    timer = setTimeout(() => reject(new Error(`the cluster was not listed within ${ms} ms`)), ms);
  });
  try {
    await source.start(state);
    await Promise.race([done, timeout]);
  } finally {
    clearTimeout(timer);
    await source.stop();
  }
  return inputOf(state, config, options.localAddresses);
}

function inputOf(
  state: ProxyState,
  config: Config,
  localAddresses: readonly string[] | undefined,
): ExplainInput {
  state.takeChanges();
  return {
    config,
    services: state.services,
    endpoints: state.endpoints,
    node: state.node,
    serviceCIDRs: state.serviceCIDRs,
    localAddresses,
  };
}

/**
 * Runs `explain` with the arguments after the word `explain`; resolves with the exit code
 * (0 answered or `--help`, 2 bad command line or unreadable file). `-h`/`--help` prints
 * {@link EXPLAIN_USAGE}. The cluster file is read with the file source's size limit.
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
  if (args.some((arg) => arg === "--help" || arg === "-h")) {
    io.print(EXPLAIN_USAGE);
    return 0;
  }
  let explanation: Explanation;
  let kernel: KernelAgreement | undefined;
  let output: string;
  try {
    const flags = splitFlags(args);
    output = flags.output;
    if (output !== "text" && output !== "json") {
      throw new Error(`--output ${output}: want text or json`);
    }
    if (flags.from === "" || flags.to === "") throw new Error("explain needs --from and --to");
    const { config } = await parseCommandLine(flags.rest);
    let input: ExplainInput;
    let origin: string;
    const localAddresses = flags.live ? io.localAddresses?.() : undefined;
    if (config.fromFile !== "") {
      input = explainInputFromClusterFile(await readClusterFile(io, config.fromFile), config, {
        source: config.fromFile,
        localAddresses,
      });
      origin = config.fromFile;
    } else if (io.apiSource !== undefined) {
      input = await explainInputFromSource(await io.apiSource(config), config, { localAddresses });
      origin = "the cluster";
    } else {
      throw new Error("explain needs --from-file");
    }
    if (input.node === null) {
      io.printError(
        `kube-nftproxy explain: warning: no Node "${config.hostname}" in ${origin} ` +
          "(set --hostname-override): node addresses and node ports are unknown",
      );
    }
    const query = { from: canonicalAddress(flags.from, "--from"), to: parseTarget(flags.to) };
    explanation = explainPacket(input, query);
    if (flags.live) {
      if (io.kernelDiff === undefined) throw new Error("--live cannot read the kernel here");
      if (config.mode !== "nft") throw new Error("--live reads nft tables: use --mode=nft");
      const families = await io.families?.(config);
      const plan = new NftPlanner(config, { families }).plan(input, {
        full: true,
        changed: new Set(),
      });
      kernel = kernelAgreement(await io.kernelDiff(plan.script), query, explanation);
    }
  } catch (err) {
    io.printError(`kube-nftproxy explain: ${(err as Error).message}`);
    return 2;
  }
  if (output === "json") {
    io.print(JSON.stringify(kernel ? { ...explanation, kernel } : explanation, null, 2));
  } else {
    const text = formatExplanation(explanation);
    io.print(kernel ? `${text}\n${formatAgreement(kernel)}` : text);
  }
  return 0;
}

/**
 * The cluster file's text, read with the file source's limit; its problems as one line naming
 * the file, as the proxy words them.
 */
async function readClusterFile(io: ExplainIO, path: string): Promise<string> {
  try {
    return await io.readTextFile(path, DEFAULT_MAX_FILE_BYTES);
  } catch (err) {
    const problem = err instanceof InputTooLargeError
      ? `larger than ${formatBytes(err.limit)}, the most a cluster file may hold`
      : err instanceof Deno.errors.NotFound
      ? "no such file"
      : (err as Error).message;
    throw new Error(`cannot read cluster file ${path}: ${problem}`);
  }
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
