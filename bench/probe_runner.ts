/**
 * Running the data-plane connect probe (connect_probe.ts) in a topology's client namespace, as
 * both scale benchmarks do.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { commandLine, run } from "../tests/netns/netns.ts";
import type { Topology } from "../tests/netns/topology.ts";
import type { ConnectReport } from "./connect_probe.ts";
import { TARGET_IP, TARGET_PORT } from "./state.ts";

const CONNECT_PROBE = fileURLToPath(new URL("./connect_probe.ts", import.meta.url));

/** The environment of every Deno child a benchmark starts. */
export const DENO_ENV: Readonly<Record<string, string>> = {
  DENO_NO_UPDATE_CHECK: "1",
  NO_COLOR: "1",
};

/**
 * The connect probe's command line in the topology's client namespace, aimed at the target
 * service. It runs at a raised priority (nice -15): on a shared machine other processes' CPU
 * use otherwise dominates a setup time of tens of microseconds. The SYN and SYN-ACK are
 * processed in the kernel in the probe's own context (veth), so the priority covers the whole
 * path being compared.
 */
export function probeArgv(topo: Topology, extra: string[]): string[] {
  return commandLine([
    "nice",
    "-n",
    "-15",
    Deno.execPath(),
    "run",
    "--no-config",
    "--no-lock",
    "--allow-net",
    CONNECT_PROBE,
    `${TARGET_IP}:${TARGET_PORT}`,
    ...extra,
  ], topo.client.ns);
}

/** One round of `connections` measured connection setups (after 20 of warm-up). */
export async function connectRound(topo: Topology, connections: number): Promise<ConnectReport> {
  const argv = probeArgv(topo, ["--count", `${connections}`, "--warmup", "20"]);
  const result = await run(argv, { timeoutMs: 120_000, env: { ...DENO_ENV } });
  const last = result.stdout.trim().split("\n").at(-1) ?? "";
  if (result.code !== 0 || !last.startsWith("{")) {
    throw new Error(`the connect probe failed (exit ${result.code}): ${result.stderr.trim()}`);
  }
  return JSON.parse(last) as ConnectReport;
}
