/**
 * The `trace` command's I/O on a real node: `nft` and `conntrack` as child processes (one
 * long-lived `nft monitor trace`), /proc for who owns the trace table, the process's signals.
 *
 * @module
 */
import { applyNft, runNft } from "../apply/nft.ts";
import { runProgram } from "../apply/program.ts";
import type { TraceIO } from "./command.ts";
import { parseConntrackEntry } from "./kernel_text.ts";
import { removeLeftoverTrace } from "./leftover.ts";
import { pidNamespace, processStartTime } from "./table.ts";

/** Options of {@link nodeTraceIO}. */
export interface NodeTraceIOOptions {
  /** The `nft` program (the `KUBE_NFTPROXY_NFT` test hook). Default `nft` on the PATH. */
  readonly nftPath?: string;
}

/**
 * Runs nft and conntrack on this node, prints to stdout and stderr.
 *
 * @example
 * ```ts
 * const code = await traceCommand(args, nodeTraceIO({ nftPath: "nft" }));
 * ```
 */
export function nodeTraceIO(options: NodeTraceIOOptions = {}): TraceIO {
  const nft = { nftPath: options.nftPath };
  return {
    nft: async (args) => {
      const result = await runNft(args, { ...nft, timeoutMs: 10_000 });
      if (result.code !== 0) throw new Error(`nft ${args.join(" ")}: ${result.stderr.trim()}`);
      return result.stdout;
    },
    applyNft: (script) => applyNft(script, nft),
    removeLeftover: (table) => removeLeftoverTrace(table, nft),
    monitor: () => {
      const child = new Deno.Command(options.nftPath ?? "nft", {
        args: ["monitor", "trace"],
        stdin: "null",
        stdout: "piped",
        stderr: "null",
      }).spawn();
      return {
        lines: lines(child.stdout),
        ready: subscribed(child.pid),
        stop: async () => {
          try {
            child.kill("SIGTERM");
          } catch {
            // it exited already
          }
          await child.status;
        },
      };
    },
    conntrack: async (flow) => {
      // `-G` takes the family from the addresses (it refuses `-f`) and needs both ports.
      if (flow.sourcePort === null || flow.destinationPort === null) return null;
      const result = await runProgram([
        "conntrack",
        "-G",
        "-p",
        flow.protocol,
        "-s",
        flow.source,
        "-d",
        flow.destination,
        "--sport",
        `${flow.sourcePort}`,
        "--dport",
        `${flow.destinationPort}`,
      ], { timeoutMs: 5_000 });
      return result.code === 0 ? parseConntrackEntry(result.stdout) : null;
    },
    owner: async () => ({
      pid: Deno.pid,
      start: (await processStartTime(Deno.pid)) ?? "0",
      pidns: await pidNamespace(),
    }),
    signalled: () => {
      let fire!: () => void;
      const promise = new Promise<void>((r) => fire = r);
      const signals = ["SIGINT", "SIGTERM"] as const;
      signals.forEach((s) => Deno.addSignalListener(s, fire));
      return { promise, dispose: () => signals.forEach((s) => Deno.removeSignalListener(s, fire)) };
    },
    print: (text) => console.log(text),
    printError: (line) => console.error(line),
  };
}

async function* lines(stream: ReadableStream<Uint8Array>): AsyncIterable<string> {
  let pending = "";
  for await (const text of stream.pipeThrough(new TextDecoderStream())) {
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, nl);
      pending = pending.slice(nl + 1);
    }
  }
  if (pending !== "") yield pending;
}

/** NETLINK_NETFILTER, and the bit of its trace group (NFNLGRP_NFTRACE = 9) in /proc's mask. */
const NETLINK_NETFILTER = 12;
const NFTRACE_GROUP_BIT = 1 << (9 - 1);

/**
 * Resolves once process `pid` has joined the netfilter trace group (its socket in
 * /proc/PID/net/netlink, whose port id is its pid), or after 2 s at most: a trace armed before
 * would lose its first packets' events.
 */
async function subscribed(pid: number): Promise<void> {
  const deadline = Date.now() + 2_000;
  while (Date.now() < deadline) {
    const table = await Deno.readTextFile(`/proc/${pid}/net/netlink`).catch(() => "");
    const joined = table.split("\n").some((line) => {
      const [, eth, port, groups] = line.trim().split(/\s+/);
      return Number(eth) === NETLINK_NETFILTER && Number(port) === pid &&
        (parseInt(groups, 16) & NFTRACE_GROUP_BIT) !== 0;
    });
    if (joined) return;
    await new Promise((r) => setTimeout(r, 20));
  }
}
