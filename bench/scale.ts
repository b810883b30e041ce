/**
 * The scale benchmark (issue 5): builds a synthetic cluster, drives the proxy's public pipeline
 * (`ProxyState` → `NftPlanner` → `applyNft`) against real kernels in throwaway `knp-bench-*`
 * network namespaces, and prints one line per measurement — a JSON object with `--json`.
 *
 * Per run, in a fresh namespace: convert + track, full render (no kernel), cold start (render +
 * `nft -f` of the first full sync into the empty namespace), no-op sync planning (must be empty:
 * no kernel transaction), one endpoint added to one service (render + apply, median over the
 * repetitions), full re-sync over itself, and the resident memory of a proxy-like child process
 * holding the synced state. Once per invocation: data-plane connection-setup latency to one
 * service in two identical topologies side by side, one node programmed with 10 services and
 * the other with N (short rounds alternate between them, so a drift of the machine hits both),
 * and whether connections fail while full re-syncs are applied.
 *
 * Must run as root. Everything kernel-side happens inside namespaces it creates and removes;
 * a whole invocation stops starting runs once `--max-minutes` would be exceeded.
 *
 * @example
 * ```sh
 * deno run -A bench/scale.ts --services 10000 --endpoints 10 --runs 5 --json
 * deno run -A bench/scale.ts --services 50000 --endpoints 2 --runs 3 --only render,cold
 * ```
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { Command, InvalidArgumentError } from "@commander-js/extra-typings";
import { applyNft } from "../src/apply/nft.ts";
import { dryRunNft } from "../src/dryrun/dry_run.ts";
import { NftPlanner } from "../src/render/nft/planner.ts";
import type { ObjectEvent, RawObject } from "../src/source/events.ts";
import type { ProxyState } from "../src/tracker/proxy_state.ts";
import {
  canUseNetns,
  cleanupStale,
  createNamespace,
  deleteNamespace,
  run,
  shortId,
} from "../tests/netns/netns.ts";
import { createTopology, type Topology } from "../tests/netns/topology.ts";
import { integerIn, parseMix } from "./cli.ts";
import {
  clusterEvents,
  extraEndpointIP,
  generateCluster,
  type ServiceMix,
  type SyntheticCluster,
  withExtraEndpoint,
} from "./cluster.ts";
import type { ConnectReport } from "./connect_probe.ts";
import type { MemoryReport } from "./memory_probe.ts";
import { round, summarize } from "./stats.ts";
import { connectRound, DENO_ENV, probeArgv } from "./probe_runner.ts";
import { benchConfig, loadState, targetObjects } from "./state.ts";

/** Parts of a run that can be selected with `--only`. */
export const SECTIONS = [
  "track",
  "render",
  "cold",
  "noop",
  "incremental",
  "resync",
  "memory",
  "dryrun",
  "dataplane",
] as const;

/** One part of a run. */
export type Section = typeof SECTIONS[number];

/** Options of {@link runScale}. */
export interface ScaleOptions {
  services: number;
  endpoints: number;
  runs: number;
  seed: number;
  mix: ServiceMix;
  /** Repetitions of the incremental and no-op measurements per run. */
  incrementalReps: number;
  /** Full re-syncs per run. */
  resyncReps: number;
  /** Fresh-planner full renders per run. */
  renderReps: number;
  /** Measured connections per side of the data-plane comparison (split into rounds). */
  connections: number;
  /** Stop starting runs when the whole invocation would exceed this. */
  maxMinutes: number;
  only: ReadonlySet<Section>;
  /** Receives progress lines. */
  progress: (line: string) => void;
}

/** One measurement line; `measurement` and the size come first, extra fields follow. */
export type Measurement = Record<string, string | number | boolean | null>;

/** The issue's targets, by measurement and `servicesxendpoints`; other sizes have none. */
const TARGETS: Record<string, Record<string, number>> = {
  render_full: { "10000x10": 150 },
  cold_start: { "10000x10": 2000, "50000x2": 5000 },
  incremental: { "10000x10": 30 },
  noop: { "10000x10": 5 },
  full_resync: { "10000x10": 3000 },
  memory_rss: { "10000x10": 250 },
};

/** Longest a single `nft -f` may take before the benchmark gives up on it. */
const APPLY_TIMEOUT_MS = 180_000;
/** The data-plane target: a hand-made service in the first /24 of the service CIDR. */
const MEMORY_PROBE = fileURLToPath(new URL("./memory_probe.ts", import.meta.url));
const DENO_CONFIG = fileURLToPath(new URL("../deno.json", import.meta.url));

/** Facts about the machine stamped on every measurement. */
export interface Environment {
  date: string;
  nft: string;
  kernel: string;
  commit: string;
}

/** What one run measured (milliseconds unless named otherwise). */
interface RunResult {
  track?: number;
  render?: number;
  cold?: { total: number; render: number; apply: number; bytes: number };
  noop?: { median: number; nonEmpty: number };
  incremental?: { total: number; render: number; apply: number; baseline: number; bytes: number };
  resync?: { total: number; render: number; apply: number; bytes: number };
  memory?: MemoryReport;
  /** `--dry-run` against the loaded table: read, parse and diff (no change expected). */
  dryrun?: { total: number; commands: number };
  loadavg: number;
  durationMs: number;
}

/** Runs the whole benchmark and returns its measurements (also reporting progress). */
export async function runScale(options: ScaleOptions): Promise<Measurement[]> {
  const started = performance.now();
  const deadline = started + options.maxMinutes * 60_000;
  const { progress } = options;
  await cleanupStale("knp-bench-");
  const cluster = generateCluster({
    services: options.services,
    endpoints: options.endpoints,
    seed: options.seed,
    mix: options.mix,
  });
  const events = clusterEvents(cluster);
  const env = await environment();
  progress(
    `cluster: ${options.services} services × ${options.endpoints} endpoints; nft ${env.nft}, ` +
      `kernel ${env.kernel}, commit ${env.commit}`,
  );

  const results: RunResult[] = [];
  const kernelRuns = [...options.only].some((s) => s !== "dataplane");
  // The data-plane part loads the N-service ruleset once and re-syncs it; keep room for it.
  const reserveMs = () =>
    options.only.has("dataplane") ? 60_000 + 3 * (results[0]?.cold?.total ?? 5_000) : 0;
  for (let r = 0; kernelRuns && r < options.runs; r++) {
    const last = results.at(-1)?.durationMs ?? 0;
    if (r > 0 && performance.now() + last + reserveMs() > deadline) {
      progress(`stopping after ${r} runs: another would pass --max-minutes ${options.maxMinutes}`);
      break;
    }
    const result = await oneRun(cluster, events, options, r);
    results.push(result);
    progress(`run ${r + 1}/${options.runs}: ${describeRun(result)}`);
  }

  const lines: Measurement[] = [];
  const base = (measurement: string, runs: number): Measurement => ({
    measurement,
    services: options.services,
    endpoints: options.endpoints,
    runs,
  });
  const stamp = (m: Measurement): Measurement => ({
    ...m,
    mix: formatMix(cluster.options.mix),
    loadavg_1m_max: round(Math.max(...results.map((r) => r.loadavg), Deno.loadavg()[0])),
    date: env.date,
    nft: env.nft,
    kernel: env.kernel,
    commit: env.commit,
  });
  const size = `${options.services}x${options.endpoints}`;
  const timed = (name: string, values: number[], extra: Measurement = {}): Measurement => {
    const s = summarize(values);
    const target = TARGETS[name]?.[size] ?? null;
    return stamp({
      ...base(name, values.length),
      median_ms: round(s.median),
      min_ms: round(s.min),
      max_ms: round(s.max),
      target_ms: target,
      ok: target === null ? null : s.median <= target,
      ...extra,
    });
  };
  const pick = <T>(f: (r: RunResult) => T | undefined): T[] =>
    results.map(f).filter((v): v is T => v !== undefined);
  const medianOf = (values: number[]) => round(summarize(values).median);

  const track = pick((r) => r.track);
  if (track.length > 0) lines.push(timed("track", track));
  const render = pick((r) => r.render);
  if (render.length > 0) lines.push(timed("render_full", render, { reps: options.renderReps }));
  const cold = pick((r) => r.cold);
  if (cold.length > 0) {
    lines.push(timed("cold_start", cold.map((c) => c.total), {
      render_median_ms: medianOf(cold.map((c) => c.render)),
      apply_median_ms: medianOf(cold.map((c) => c.apply)),
      script_bytes: cold[0].bytes,
    }));
  }
  const noop = pick((r) => r.noop);
  if (noop.length > 0) {
    const m = timed("noop", noop.map((n) => n.median), {
      reps: options.incrementalReps,
      non_empty_plans: noop.reduce((n, x) => n + x.nonEmpty, 0),
      kernel_transactions: 0,
    });
    // A no-op sync must send nothing: a non-empty plan fails the target whatever its speed.
    if (m.ok !== null) m.ok = m.ok === true && m.non_empty_plans === 0;
    lines.push(m);
  }
  const inc = pick((r) => r.incremental);
  if (inc.length > 0) {
    lines.push(timed("incremental", inc.map((i) => i.total), {
      reps: options.incrementalReps,
      render_median_ms: medianOf(inc.map((i) => i.render)),
      apply_median_ms: medianOf(inc.map((i) => i.apply)),
      apply_baseline_ms: medianOf(inc.map((i) => i.baseline)),
      script_bytes: inc[0].bytes,
    }));
  }
  const resync = pick((r) => r.resync);
  if (resync.length > 0) {
    lines.push(timed("full_resync", resync.map((x) => x.total), {
      reps: options.resyncReps,
      render_median_ms: medianOf(resync.map((x) => x.render)),
      apply_median_ms: medianOf(resync.map((x) => x.apply)),
      script_bytes: resync[0].bytes,
    }));
  }
  const memory = pick((r) => r.memory);
  if (memory.length > 0) {
    const s = summarize(memory.map((m) => m.rssMiB));
    const target = TARGETS.memory_rss[size] ?? null;
    lines.push(stamp({
      ...base("memory_rss", memory.length),
      median_mib: round(s.median, 1),
      min_mib: round(s.min, 1),
      max_mib: round(s.max, 1),
      target_mib: target,
      ok: target === null ? null : s.median <= target,
      peak_rss_median_mib: round(summarize(memory.map((m) => m.peakRssMiB)).median, 1),
      heap_used_median_mib: round(summarize(memory.map((m) => m.heapUsedMiB)).median, 1),
      gc_exposed: memory.every((m) => m.gcExposed),
      applied: memory.every((m) => m.applied),
    }));
  }
  const dryrun = pick((r) => r.dryrun);
  if (dryrun.length > 0) {
    lines.push(timed("dry_run", dryrun.map((d) => d.total), {
      commands: dryrun.reduce((n, d) => n + d.commands, 0),
    }));
  }
  if (options.only.has("dataplane")) {
    for (const m of await dataPlane(cluster, options)) lines.push(stamp(m));
  }
  progress(`done in ${round((performance.now() - started) / 1000, 1)} s`);
  return lines;
}

async function oneRun(
  cluster: SyntheticCluster,
  events: readonly ObjectEvent[],
  options: ScaleOptions,
  index: number,
): Promise<RunResult> {
  const started = performance.now();
  const only = options.only;
  const result: RunResult = { loadavg: Deno.loadavg()[0], durationMs: 0 };
  const ns = `knp-bench-${shortId()}`;
  await createNamespace(ns);
  try {
    const config = benchConfig(cluster);
    let t = performance.now();
    const state = loadState(cluster.nodeName, events);
    const first = state.takeChanges();
    if (only.has("track")) result.track = performance.now() - t;
    if (first.changed.size < cluster.options.services) {
      throw new Error(`expected ${cluster.options.services} changed service ports`);
    }

    if (only.has("render")) {
      const times: number[] = [];
      for (let i = 0; i < options.renderReps; i++) {
        t = performance.now();
        const plan = new NftPlanner(config).plan(state, { full: true, changed: first.changed });
        times.push(performance.now() - t);
        if (!plan.full || plan.script === "") throw new Error("a full render planned nothing");
      }
      result.render = summarize(times).median;
    }

    const needsSynced = ["cold", "noop", "incremental", "resync", "dryrun"].some((s) =>
      only.has(s as Section)
    );
    if (!needsSynced) return result;
    const planner = new NftPlanner(config);
    t = performance.now();
    const plan = planner.plan(state, { full: true, changed: first.changed });
    const renderMs = performance.now() - t;
    await apply(plan.script, ns);
    plan.commit();
    result.cold = {
      total: performance.now() - t,
      render: renderMs,
      apply: performance.now() - t - renderMs,
      bytes: plan.script.length,
    };

    if (only.has("noop")) result.noop = noopSyncs(state, planner, options.incrementalReps);
    if (only.has("incremental")) {
      result.incremental = await incrementalSyncs(cluster, state, planner, {
        ns,
        reps: options.incrementalReps,
        offset: index * 104_729,
      });
    }
    if (only.has("resync")) {
      const totals: number[] = [];
      const renders: number[] = [];
      let bytes = 0;
      for (let i = 0; i < options.resyncReps; i++) {
        t = performance.now();
        const changes = state.takeChanges();
        const resync = planner.plan(state, { full: true, changed: changes.changed });
        renders.push(performance.now() - t);
        await apply(resync.script, ns);
        resync.commit();
        totals.push(performance.now() - t);
        bytes = resync.script.length;
        if (!resync.full) throw new Error("a full re-sync was planned as partial");
      }
      const total = summarize(totals).median;
      const render = summarize(renders).median;
      result.resync = { total, render, apply: total - render, bytes };
    }
    if (only.has("dryrun")) {
      // What `--dry-run` does on a node whose table is up to date: the whole wanted script,
      // the kernel's listing of both tables, and the diff between them.
      t = performance.now();
      const wanted = new NftPlanner(config).plan(state, { full: true, changed: new Set() });
      const report = await dryRunNft(wanted.script, { netns: ns });
      const commands = report.diff.tables.reduce((n, table) => n + table.commands.length, 0);
      result.dryrun = { total: performance.now() - t, commands };
    }
    if (only.has("memory")) result.memory = await memoryChild(options, ns);
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
    result.durationMs = performance.now() - started;
  }
  return result;
}

function noopSyncs(
  state: ProxyState,
  planner: NftPlanner,
  reps: number,
): { median: number; nonEmpty: number } {
  const times: number[] = [];
  let nonEmpty = 0;
  for (let i = 0; i < reps; i++) {
    const t = performance.now();
    const changes = state.takeChanges();
    const plan = planner.plan(state, { full: changes.global, changed: changes.changed });
    plan.commit();
    times.push(performance.now() - t);
    if (plan.script !== "") nonEmpty++;
  }
  return { median: summarize(times).median, nonEmpty };
}

async function incrementalSyncs(
  cluster: SyntheticCluster,
  state: ProxyState,
  planner: NftPlanner,
  options: { ns: string; reps: number; offset: number },
): Promise<NonNullable<RunResult["incremental"]>> {
  const baseline: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t = performance.now();
    await apply("", options.ns);
    baseline.push(performance.now() - t);
  }
  const current = new Map<number, RawObject>();
  const totals: number[] = [];
  const renders: number[] = [];
  let bytes = 0;
  for (let i = 0; i < options.reps; i++) {
    const index = (options.offset + i * 7919) % cluster.options.services;
    const before = current.get(index) ?? cluster.slices[index][0];
    const ip = extraEndpointIP(i);
    const after = withExtraEndpoint(before, ip);
    current.set(index, after);
    state.onEvent({ kind: "EndpointSlice", previous: before, current: after });
    const t = performance.now();
    const changes = state.takeChanges();
    const plan = planner.plan(state, { full: changes.global, changed: changes.changed });
    renders.push(performance.now() - t);
    await apply(plan.script, options.ns);
    plan.commit();
    totals.push(performance.now() - t);
    bytes = plan.script.length;
    if (plan.full || !plan.script.includes(ip)) {
      throw new Error(`the partial sync after adding ${ip} did not add it:\n${plan.script}`);
    }
  }
  const total = summarize(totals).median;
  const render = summarize(renders).median;
  return { total, render, apply: total - render, baseline: summarize(baseline).median, bytes };
}

/** Applies a script in `ns`, giving up (and failing the run) after {@link APPLY_TIMEOUT_MS}. */
async function apply(script: string, ns: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`nft -f took over ${APPLY_TIMEOUT_MS} ms in ${ns}`)),
      APPLY_TIMEOUT_MS,
    );
  });
  try {
    await Promise.race([applyNft(script, { netns: ns }), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function memoryChild(options: ScaleOptions, ns: string): Promise<MemoryReport> {
  const args = [
    "run",
    "-A",
    `--config=${DENO_CONFIG}`,
    "--v8-flags=--expose-gc",
    MEMORY_PROBE,
    `--services=${options.services}`,
    `--endpoints=${options.endpoints}`,
    `--seed=${options.seed}`,
    `--netns=${ns}`,
  ];
  const mix = Object.entries(options.mix).filter(([, share]) => share > 0);
  if (mix.length > 0) args.push(`--mix=${mix.map(([k, v]) => `${k}=${v}`).join(",")}`);
  // The child runs in the machine's namespace (it only reaches the kernel through `ip netns
  // exec`), so `run` needs no namespace; its time limit bounds a stuck child.
  const result = await run([Deno.execPath(), ...args], {
    timeoutMs: APPLY_TIMEOUT_MS + 60_000,
    env: { ...DENO_ENV },
  });
  const last = result.stdout.trim().split("\n").at(-1) ?? "";
  if (result.code !== 0 || !last.startsWith("{")) {
    throw new Error(`the memory probe failed (exit ${result.code}): ${result.stderr.trim()}`);
  }
  return JSON.parse(last) as MemoryReport;
}

/** A proxy's state and planner for a cluster plus the data-plane target. */
function dataPlaneProxy(cluster: SyntheticCluster, topo: Topology) {
  const state = loadState(cluster.nodeName, [...clusterEvents(cluster), ...targetObjects(topo)]);
  const planner = new NftPlanner(benchConfig(cluster));
  return {
    /** First full sync: recreates the table (so switching between proxies is clean). */
    async load(): Promise<number> {
      planner.reset();
      const t = performance.now();
      const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
      await apply(plan.script, topo.node.ns);
      plan.commit();
      return performance.now() - t;
    },
    /** A periodic full sync over what is loaded. */
    async resync(): Promise<number> {
      const t = performance.now();
      const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
      await apply(plan.script, topo.node.ns);
      plan.commit();
      return performance.now() - t;
    },
  };
}

/** Rounds of connections per side; alternating rounds spread the machine's drift evenly. */
const LATENCY_ROUNDS = 20;

async function dataPlane(cluster: SyntheticCluster, options: ScaleOptions): Promise<Measurement[]> {
  const { progress } = options;
  const small = generateCluster({ ...cluster.options, services: 10 });
  const topologies: Topology[] = [];
  try {
    // Two identical one-node clusters side by side: one node programmed with 10 services, the
    // other with N. Rounds alternate between them without reloading any rules.
    for (let i = 0; i < 2; i++) topologies.push(await createTopology({ ipv6: false }));
    const sides = await Promise.all([small, cluster].map(async (c, i) => {
      const topo = topologies[i];
      // Many short connections from one client: let it reuse ports in TIME_WAIT.
      const sysctl = await topo.exec(topo.client.ns, [
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.tcp_tw_reuse=1",
        "net.ipv4.ip_local_port_range=1024 65535",
      ]);
      if (sysctl.code !== 0) throw new Error(`cannot tune the client: ${sysctl.stderr}`);
      return { topo, services: c.options.services, proxy: dataPlaneProxy(c, topo) };
    }));
    for (const side of sides) {
      const loadMs = await side.proxy.load();
      progress(`data plane: ${side.services} services loaded in ${Math.round(loadMs)} ms`);
    }
    const samples = sides.map(() => [] as number[]);
    const failures = sides.map(() => 0);
    /** Per round: median with N services ÷ median with 10, a paired comparison. */
    const pairedRatios: number[] = [];
    const perRound = Math.max(10, Math.ceil(options.connections / LATENCY_ROUNDS));
    for (let r = 0; r < LATENCY_ROUNDS; r++) {
      // AB, then BA, …: neither side always goes first.
      const order = r % 2 === 0 ? [0, 1] : [1, 0];
      const medians = [NaN, NaN];
      for (const i of order) {
        const report = await connectRound(sides[i].topo, perRound);
        samples[i].push(...report.samplesUs);
        failures[i] += report.attempts - report.samplesUs.length;
        if (report.samplesUs.length > 0) medians[i] = summarize(report.samplesUs).median;
      }
      pairedRatios.push(medians[1] / medians[0]);
    }
    const big = sides[1];
    const gap = await connectDuringResyncs(big.topo, big.proxy, options.resyncReps);
    progress(`data plane: ${gap.report.attempts} connections during full re-syncs`);

    const size = { endpoints: options.endpoints };
    const summaries = samples.map((values) => summarize(values.length > 0 ? values : [NaN]));
    const lines: Measurement[] = sides.map((side, i) => ({
      measurement: "dataplane_connect",
      services: side.services,
      ...size,
      runs: LATENCY_ROUNDS,
      median_ms: round(summaries[i].median / 1000, 3),
      p90_ms: round(summaries[i].p90 / 1000, 3),
      min_ms: round(summaries[i].min / 1000, 3),
      max_ms: round(summaries[i].max / 1000, 3),
      connections: samples[i].length,
      failures: failures[i],
      target_ms: null,
      ok: null,
    }));
    const paired = summarize(pairedRatios.map((r) => Number.isNaN(r) ? Infinity : r));
    const ratio = paired.median;
    lines.push({
      measurement: "dataplane_connect_ratio",
      services: options.services,
      ...size,
      runs: LATENCY_ROUNDS,
      ratio_median: round(ratio, 3),
      ratio_min: round(paired.min, 3),
      ratio_max: round(paired.max, 3),
      pooled_ratio_median: round(summaries[1].median / summaries[0].median, 3),
      pooled_ratio_p90: round(summaries[1].p90 / summaries[0].p90, 3),
      target_ratio: "1 ± 0.10",
      ok: Math.abs(ratio - 1) <= 0.1 && failures[0] + failures[1] === 0,
      iptables_mode: "measured by bench/iptables_scale.ts",
    });
    const failed = gap.report.failures.refused + gap.report.failures.timeout +
      gap.report.failures.error;
    const during = summarize(gap.report.samplesUs.length > 0 ? gap.report.samplesUs : [NaN]);
    lines.push({
      measurement: "resync_traffic_gap",
      services: options.services,
      ...size,
      runs: gap.resyncs.length,
      resync_median_ms: round(summarize(gap.resyncs).median),
      connections: gap.report.attempts,
      failures: failed,
      connect_p90_ms: round(during.p90 / 1000, 3),
      connect_max_ms: round(during.max / 1000, 3),
      target_failures: 0,
      ok: failed === 0 && gap.report.attempts > 0,
    });
    return lines;
  } finally {
    await Promise.allSettled(topologies.map((t) => t.cleanup()));
  }
}

/** Connects continuously (every 2 ms) while `reps` full re-syncs are applied. */
async function connectDuringResyncs(
  topo: Topology,
  proxy: { resync(): Promise<number> },
  reps: number,
): Promise<{ report: ConnectReport; resyncs: number[] }> {
  const argv = probeArgv(topo, [
    "--until-stop",
    "--warmup",
    "20",
    "--interval-ms",
    "2",
    "--max-ms",
    "110000",
  ]);
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    env: { ...DENO_ENV },
  }).spawn();
  const killer = setTimeout(() => child.kill("SIGKILL"), 120_000);
  let started: () => void = () => {};
  const ready = new Promise<void>((resolve) => started = resolve);
  const done = (async () => {
    let text = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      if (text.includes("#started")) started();
    }
    started();
    return text;
  })();
  const writer = child.stdin.getWriter();
  const stderr = new Response(child.stderr).text();
  try {
    await ready;
    const resyncs: number[] = [];
    for (let i = 0; i < reps; i++) resyncs.push(await proxy.resync());
    await writer.write(new TextEncoder().encode("stop\n")).catch(() => {});
    await writer.close().catch(() => {});
    const text = await done;
    const status = await child.status;
    const last = text.trim().split("\n").at(-1) ?? "";
    if (!status.success || !last.startsWith("{")) {
      throw new Error(`the connect probe failed (exit ${status.code}): ${await stderr}`);
    }
    return { report: JSON.parse(last) as ConnectReport, resyncs };
  } finally {
    clearTimeout(killer);
    await writer.close().catch(() => {});
    await stderr.catch(() => "");
  }
}

/** The date, nft version, kernel and commit every measurement line is stamped with. */
export async function environment(): Promise<Environment> {
  const ns = `knp-bench-${shortId()}`;
  await createNamespace(ns);
  let nft = "unknown";
  try {
    const r = await run(["nft", "--version"], { ns });
    nft = /v(\d+\.\d+\.\d+)/.exec(r.stdout)?.[1] ?? r.stdout.trim();
  } finally {
    await deleteNamespace(ns);
  }
  const root = fileURLToPath(new URL("..", import.meta.url));
  const head = await run(["git", "-C", root, "rev-parse", "--short", "HEAD"]);
  const dirty = await run(["git", "-C", root, "status", "--porcelain", "--", "src"]);
  const commit = head.code === 0
    ? `${head.stdout.trim()}${dirty.stdout.trim() !== "" ? "+dirty-src" : ""}`
    : "unknown";
  return { date: new Date().toISOString(), nft, kernel: Deno.osRelease(), commit };
}

function describeRun(r: RunResult): string {
  const parts: string[] = [];
  const ms = (v: number) => `${round(v, 1)} ms`;
  if (r.track !== undefined) parts.push(`track ${ms(r.track)}`);
  if (r.render !== undefined) parts.push(`render ${ms(r.render)}`);
  if (r.cold) parts.push(`cold ${ms(r.cold.total)} (apply ${ms(r.cold.apply)})`);
  if (r.noop) parts.push(`noop ${ms(r.noop.median)}`);
  if (r.incremental) parts.push(`incremental ${ms(r.incremental.total)}`);
  if (r.resync) parts.push(`resync ${ms(r.resync.total)}`);
  if (r.memory) parts.push(`rss ${round(r.memory.rssMiB, 1)} MiB`);
  parts.push(`load ${round(r.loadavg)}, ${round(r.durationMs / 1000, 1)} s`);
  return parts.join(", ");
}

/** The non-zero shares of a mix as `key=share,…`, or `clusterIP-only`. */
function formatMix(mix: Readonly<Required<ServiceMix>>): string {
  const parts = Object.entries(mix).filter(([, share]) => share > 0);
  return parts.length === 0 ? "clusterIP-only" : parts.map(([k, v]) => `${k}=${v}`).join(",");
}

/** A measurement as one aligned, human-readable line. */
export function formatMeasurement(m: Measurement): string {
  const value = m.median_ms !== undefined
    ? `${m.median_ms} ms`
    : m.median_mib !== undefined
    ? `${m.median_mib} MiB`
    : m.ratio_median !== undefined
    ? `×${m.ratio_median}`
    : `${m.failures} failures`;
  const target = m.target_ms ?? m.target_mib ?? m.target_ratio ?? m.target_failures ?? "-";
  const verdict = m.ok === null ? "" : m.ok ? "ok" : "MISSED";
  return `${String(m.measurement).padEnd(24)} ${`${m.services}×${m.endpoints}`.padEnd(10)} ` +
    `${value.padStart(14)}  target ${String(target).padEnd(9)} ${verdict}`;
}

function parseOnly(value: string): Set<Section> {
  const parts = value.split(",").map((s) => s.trim()).filter((s) => s !== "");
  for (const part of parts) {
    if (!SECTIONS.includes(part as Section)) {
      throw new InvalidArgumentError(`cannot use ${part}: must be one of ${SECTIONS.join(", ")}`);
    }
  }
  return new Set(parts as Section[]);
}

async function main(): Promise<number> {
  const opts = new Command()
    .name("scale.ts")
    .description("Scale benchmark of kube-nftproxy (run as root; uses knp-bench-* namespaces)")
    .option("--services <n>", "services in the synthetic cluster", integerIn(1, 1_000_000), 10_000)
    .option("--endpoints <n>", "endpoints per service", integerIn(0, 1000), 10)
    .option("--runs <n>", "runs (each in a fresh namespace)", integerIn(1, 100), 5)
    .option("--seed <n>", "generator seed", integerIn(0, 2 ** 32 - 1), 1)
    .option("--mix <list>", "service feature shares, e.g. nodePort=0.1,udp=0.2", parseMix, {})
    .option("--incremental-reps <n>", "incremental and no-op syncs per run", integerIn(1, 1000), 20)
    .option("--resync-reps <n>", "full re-syncs per run", integerIn(1, 20), 2)
    .option("--render-reps <n>", "full renders per run", integerIn(1, 50), 3)
    .option("--connections <n>", "data-plane connections per side", integerIn(100, 20_000), 10_000)
    .option("--max-minutes <n>", "stop starting runs after this long", integerIn(1, 600), 5)
    .option("--only <list>", `sections to run: ${SECTIONS.join(",")}`, parseOnly)
    .option("--json", "print one JSON object per measurement", false)
    .parse()
    .opts();
  if (Deno.uid() !== 0) {
    console.error("scale.ts: must run as root (it creates network namespaces)");
    return 2;
  }
  const support = await canUseNetns();
  if (!support.ok) {
    console.error(`scale.ts: cannot use network namespaces here: ${support.reason}`);
    return 2;
  }
  let lines: Measurement[];
  try {
    lines = await runScale({
      ...opts,
      only: opts.only ?? new Set(SECTIONS),
      progress: (line) => console.error(`# ${line}`),
    });
  } catch (err) {
    // Namespaces are already removed (every run cleans up in `finally`).
    console.error(`scale.ts: the benchmark failed: ${err instanceof Error ? err.stack : err}`);
    return 1;
  }
  for (const line of lines) console.log(opts.json ? JSON.stringify(line) : formatMeasurement(line));
  return 0;
}

if (import.meta.main) Deno.exit(await main());
