/**
 * The memory benchmark's child process: holds what a proxy holds at steady state for a
 * synthetic cluster — the raw objects (as a source's store does), the tracked state and the
 * planner's record of what was applied — after one full sync and one no-op sync, then reports
 * its resident set size.
 *
 * Run by `scale.ts` as
 * `deno run -A --v8-flags=--expose-gc bench/memory_probe.ts --services N --endpoints M [--mix …]
 * [--netns NS]`.
 * With `--netns` the full sync is really applied (`nft -f`) in that namespace, so the transient
 * buffers of an apply are part of the peak. Before measuring, it collects garbage several times
 * with short pauses (when `gc` is exposed). The last stdout line is one JSON object
 * ({@link MemoryReport}).
 *
 * @module
 */
import { Command } from "@commander-js/extra-typings";
import { applyNft } from "../src/apply/nft.ts";
import { NftPlanner } from "../src/render/nft/planner.ts";
import { integerIn, parseMix } from "./cli.ts";
import { clusterEvents, generateCluster, type ServiceMix } from "./cluster.ts";
import { benchConfig, loadState } from "./state.ts";
import type { ProxyState } from "../src/tracker/proxy_state.ts";

/** What the child reports, in MiB. */
export interface MemoryReport {
  /** Resident set size at steady state (after GC). */
  rssMiB: number;
  /** Peak resident set size of the process (`VmHWM`). */
  peakRssMiB: number;
  /** V8 heap in use at steady state. */
  heapUsedMiB: number;
  /** Memory outside the V8 heap (array buffers, …) at steady state. */
  externalMiB: number;
  /** Whether `gc()` was available (else the figures include uncollected garbage). */
  gcExposed: boolean;
  /** Whether the full sync was applied to a kernel. */
  applied: boolean;
  servicePorts: number;
}

const MiB = 1024 * 1024;

async function peakRss(): Promise<number> {
  const status = await Deno.readTextFile("/proc/self/status");
  const kib = Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
  return kib / 1024;
}

async function collectGarbage(): Promise<boolean> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) return false;
  for (let i = 0; i < 4; i++) {
    gc();
    await new Promise((r) => setTimeout(r, 50));
  }
  return true;
}

/**
 * The first (full) sync, as the sync loop runs it: plan, apply, commit. Its own function, so
 * the plan and its script are garbage afterwards, as in a proxy — a local of the (async)
 * measuring function would stay reachable until it returns and count ~10 MiB too many.
 */
async function firstSync(state: ProxyState, planner: NftPlanner, netns?: string): Promise<void> {
  const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
  if (netns !== undefined) await applyNft(plan.script, { netns });
  plan.commit();
}

/** Loads, syncs and measures; see the module doc. */
export async function measureMemory(
  options: { services: number; endpoints: number; seed: number; mix?: ServiceMix; netns?: string },
): Promise<MemoryReport> {
  const cluster = generateCluster(options);
  const state = loadState(cluster.nodeName, clusterEvents(cluster));
  const planner = new NftPlanner(benchConfig(cluster));
  await firstSync(state, planner, options.netns);
  const noop = planner.plan(state, { full: false, changed: state.takeChanges().changed });
  if (noop.script !== "") throw new Error("a sync without change planned a non-empty script");
  const gcExposed = await collectGarbage();
  const usage = Deno.memoryUsage();
  const report: MemoryReport = {
    rssMiB: usage.rss / MiB,
    peakRssMiB: await peakRss(),
    heapUsedMiB: usage.heapUsed / MiB,
    externalMiB: usage.external / MiB,
    gcExposed,
    applied: options.netns !== undefined,
    servicePorts: state.services.size,
  };
  // Everything a proxy keeps must still be reachable when the figures are taken.
  if (cluster.services.length !== report.servicePorts) {
    throw new Error(
      `expected ${cluster.services.length} service ports, got ${state.services.size}`,
    );
  }
  return report;
}

if (import.meta.main) {
  const opts = new Command()
    .requiredOption("--services <n>", "number of services", integerIn(1, 1_000_000))
    .requiredOption("--endpoints <n>", "endpoints per service", integerIn(0, 1000))
    .option("--seed <n>", "generator seed", integerIn(0, 2 ** 32 - 1), 1)
    .option("--mix <list>", "service feature shares, e.g. nodePort=0.1", parseMix, {})
    .option("--netns <name>", "apply the full sync in this knp- namespace")
    .parse()
    .opts();
  try {
    console.log(JSON.stringify(await measureMemory(opts)));
  } catch (err) {
    console.error(`memory probe: ${err instanceof Error ? err.stack : err}`);
    Deno.exit(1);
  }
}
