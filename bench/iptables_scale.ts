/**
 * The iptables-mode scale benchmark (issue 6), beside nft mode: for each mode and cluster size,
 * in fresh throwaway `knp-bench-*` namespaces, the cold start (first full sync: render +
 * apply), a sync with no change, one endpoint added to one service, and a full re-sync over
 * the loaded rules; once per mode and size, data-plane connection-setup latency to one service
 * in a node programmed with N services against one programmed with 10.
 *
 * Modes: `nft` (the native nft backend: `NftPlanner` → `nft -f`), `iptables-nft` and
 * `iptables-legacy` (`IptablesPlanner` → `applyIptablesPlan`: full sections streamed to
 * `iptables-restore --noflush` with that back end as they are rendered, reconciled with the
 * kernel on the way, as the daemon runs it).
 *
 * In iptables modes, every cold start and full re-sync is paired with upstream's iptables layout
 * of the same cluster (upstream_iptables_layout.ts) restored by the same `iptables-restore` in
 * the same run (alternating which goes first), and the `daemon` section starts `main.ts
 * --from-file … --proxy-mode=iptables` in a pod cgroup: exec → first full sync, its peak RSS and
 * the pod's. Cold start and re-sync report this process's own peak RSS (`VmHWM`, reset before).
 *
 * In iptables mode a new connection walks nat KUBE-SERVICES rule by rule; the data-plane
 * target's rule is placed LAST there (its namespace sorts after every generated one), so the
 * figure is the worst case, every service rule evaluated. nft mode looks services up in a map.
 *
 * Must run as root; everything kernel-side happens inside namespaces it creates and removes.
 *
 * @example
 * ```sh
 * deno run -A bench/iptables_scale.ts --services 10,10000 --endpoints 10 --runs 5 --json
 * deno run -A bench/iptables_scale.ts --services 10000 --modes iptables-nft --only cold
 * ```
 *
 * @module
 */
import { Command } from "@commander-js/extra-typings";
import { applyIptablesPlan, type IptablesBackend } from "../src/apply/iptables.ts";
import { applyNft } from "../src/apply/nft.ts";
import { IptablesPlanner, isIptablesPlan } from "../src/render/iptables/planner.ts";
import type { Plan, Planner } from "../src/render/planner.ts";
import { NftPlanner } from "../src/render/nft/planner.ts";
import type { ObjectEvent, RawObject } from "../src/source/events.ts";
import type { ProxyState } from "../src/tracker/proxy_state.ts";
import {
  canUseNetns,
  cleanupStale,
  createNamespace,
  deleteNamespace,
  shortId,
} from "../tests/netns/netns.ts";
import { createTopology, type Topology } from "../tests/netns/topology.ts";
import { integerIn } from "./cli.ts";
import {
  clusterEvents,
  extraEndpointIP,
  generateCluster,
  type SyntheticCluster,
  withExtraEndpoint,
} from "./cluster.ts";
import { round, summarize } from "./stats.ts";
import { cacheDependencies } from "../tests/e2e/proxy_harness.ts";
import { clusterYaml } from "./daemon.ts";
import { startDaemon } from "./daemon_process.ts";
import { PodCgroup, processMemory, removeStaleCgroups } from "./pod_meter.ts";
import { renderUpstreamIptablesLayout } from "./upstream_iptables_layout.ts";
import { BENCH_POD_CIDR } from "./cluster.ts";
import { connectRound } from "./probe_runner.ts";
import { benchConfig, loadState, targetObjects } from "./state.ts";

/** How rules reach the kernel. */
export const MODES = ["nft", "iptables-nft", "iptables-legacy"] as const;
/** One of {@link MODES}. */
export type Mode = typeof MODES[number];

/** Parts of a run that can be selected with `--only`. */
export const SECTIONS = [
  "cold",
  "noop",
  "incremental",
  "resync",
  "daemon",
  "dataplane",
] as const;
/** One of {@link SECTIONS}. */
export type Section = typeof SECTIONS[number];

/** One output line. */
export type Measurement = Record<string, string | number | boolean | null>;

/** Options of {@link runIptablesScale}. */
export interface IptablesScaleOptions {
  sizes: number[];
  endpoints: number;
  runs: number;
  modes: Mode[];
  only: ReadonlySet<Section>;
  incrementalReps: number;
  /** Connections per side of the data-plane comparison (split into rounds). */
  connections: number;
  progress: (line: string) => void;
  /** Prefix of the namespaces (and cgroups) a run creates, and removes when stale. */
  netnsPrefix?: string;
}

/** See {@link IptablesScaleOptions.netnsPrefix}. */
let nsPrefix = "knp-bench-";

/** Longest single apply before a run gives up. */
const APPLY_TIMEOUT_MS = 300_000;
const LATENCY_ROUNDS = 10;

/** A planner and the function applying its plans in a namespace, for one mode. */
function backendOf(mode: Mode, cluster: SyntheticCluster, ns: string): {
  planner: Planner;
  apply: (plan: Plan) => Promise<void>;
} {
  const config = benchConfig(cluster, { mode: mode === "nft" ? "nft" : "iptables" });
  if (mode === "nft") {
    return { planner: new NftPlanner(config), apply: (p) => applyNft(p.script, { netns: ns }) };
  }
  const backend = mode.slice("iptables-".length) as IptablesBackend;
  return {
    planner: new IptablesPlanner(config),
    apply: async (p) => {
      if (!isIptablesPlan(p)) throw new Error("not a plan of the iptables planner");
      // As the daemon does: full sections streamed to iptables-restore as they are rendered.
      await applyIptablesPlan(p, { netns: ns, backend, timeoutMs: APPLY_TIMEOUT_MS });
    },
  };
}

/** Nothing to apply (without writing a streamed plan's script). */
const isEmpty = (plan: Plan) => plan.empty ?? plan.script === "";
/** The plan's size in bytes, once applied. */
const bytesOf = (plan: Plan) => plan.bytes ?? plan.script.length;

/** This process's peak RSS (`VmHWM`), MiB, since the last {@link resetPeak}. */
async function peakMiB(): Promise<number> {
  return (await processMemory(Deno.pid)).peakRssMiB;
}

/** Resets this process's `VmHWM` to its current RSS (`/proc/self/clear_refs`, value 5). */
async function resetPeak(): Promise<void> {
  await Deno.writeTextFile("/proc/self/clear_refs", "5");
}

interface RunResult {
  cold?: {
    total: number;
    render: number;
    apply: number;
    bytes: number;
    peakMiB: number;
    upstream?: UpstreamRestore;
  };
  noop?: { median: number; nonEmpty: number };
  incremental?: { total: number; render: number; bytes: number };
  resync?: {
    total: number;
    render: number;
    bytes: number;
    peakMiB: number;
    upstream?: UpstreamRestore;
  };
  daemon?: DaemonStart;
}

/** Upstream's layout loaded by the same iptables-restore (whole tables, no `--noflush`). */
interface UpstreamRestore {
  ms: number;
  /** The restore program's peak (its own cgroup: what the tool itself needs). */
  podPeakMiB: number;
}

/** The daemon (`main.ts --from-file`) started in iptables mode, measured from outside. */
interface DaemonStart {
  /** exec → its `synced fully` line (printed once iptables-restore returned). */
  firstSyncMs: number;
  peakRssMiB: number;
  podPeakMiB: number;
  /** Upstream's layout restored in the same run, right after. */
  upstream: UpstreamRestore;
}

/** Runs every selected measurement; returns one line per measurement, mode and size. */
export async function runIptablesScale(options: IptablesScaleOptions): Promise<Measurement[]> {
  nsPrefix = options.netnsPrefix ?? "knp-bench-";
  await cleanupStale(nsPrefix);
  await removeStaleCgroups(nsPrefix);
  const lines: Measurement[] = [];
  for (const size of options.sizes) {
    const cluster = generateCluster({ services: size, endpoints: options.endpoints });
    const events = clusterEvents(cluster);
    for (const mode of options.modes) {
      const results: RunResult[] = [];
      const kernelRuns = [...options.only].some((s) => s !== "dataplane");
      let loadMax = await loadAverage();
      for (let r = 0; kernelRuns && r < options.runs; r++) {
        results.push(await oneRun(mode, cluster, events, options, r));
        loadMax = Math.max(loadMax, await loadAverage());
        const c = results.at(-1)!.cold;
        options.progress(
          `${mode} ${size}x${options.endpoints} run ${r + 1}/${options.runs}` +
            (c ? `: cold start ${Math.round(c.total)} ms (apply ${Math.round(c.apply)} ms)` : ""),
        );
      }
      const base = {
        services: size,
        endpoints: options.endpoints,
        mode,
        loadavg_1m_max: round(loadMax, 2),
        date: new Date().toISOString(),
      };
      const timed = (name: string, values: number[], extra: Measurement = {}): Measurement => {
        const s = summarize(values);
        return {
          measurement: name,
          ...base,
          runs: values.length,
          median_ms: round(s.median),
          min_ms: round(s.min),
          max_ms: round(s.max),
          ...extra,
        };
      };
      const pick = <T>(f: (r: RunResult) => T | undefined) =>
        results.map(f).filter((v): v is T => v !== undefined);
      const med = (values: number[]) => round(summarize(values).median);
      const cold = pick((r) => r.cold);
      if (cold.length > 0) {
        lines.push(timed("cold_start", cold.map((c) => c.total), {
          render_median_ms: med(cold.map((c) => c.render)),
          apply_median_ms: med(cold.map((c) => c.apply)),
          script_bytes: cold[0].bytes,
          peak_rss_median_mib: med(cold.map((c) => c.peakMiB)),
          ...upstreamFields(cold.map((c) => ({ ours: c.total, upstream: c.upstream }))),
        }));
      }
      const noop = pick((r) => r.noop);
      if (noop.length > 0) {
        lines.push(timed("noop", noop.map((n) => n.median), {
          non_empty_plans: noop.reduce((n, x) => n + x.nonEmpty, 0),
        }));
      }
      const inc = pick((r) => r.incremental);
      if (inc.length > 0) {
        lines.push(timed("incremental", inc.map((i) => i.total), {
          render_median_ms: med(inc.map((i) => i.render)),
          script_bytes: inc[0].bytes,
        }));
      }
      const resync = pick((r) => r.resync);
      if (resync.length > 0) {
        lines.push(timed("full_resync", resync.map((x) => x.total), {
          render_median_ms: med(resync.map((x) => x.render)),
          script_bytes: resync[0].bytes,
          peak_rss_median_mib: med(resync.map((x) => x.peakMiB)),
          ...upstreamFields(resync.map((x) => ({ ours: x.total, upstream: x.upstream }))),
        }));
      }
      const daemon = pick((r) => r.daemon);
      if (daemon.length > 0) {
        lines.push(timed("daemon_first_sync", daemon.map((d) => d.firstSyncMs), {
          peak_rss_median_mib: med(daemon.map((d) => d.peakRssMiB)),
          peak_rss_max_mib: Math.max(...daemon.map((d) => d.peakRssMiB)),
          pod_peak_median_mib: med(daemon.map((d) => d.podPeakMiB)),
          ...upstreamFields(daemon.map((d) => ({ ours: d.firstSyncMs, upstream: d.upstream }))),
        }));
      }
      if (options.only.has("dataplane")) {
        lines.push(...await dataPlane(mode, cluster, options));
      }
    }
  }
  return lines;
}

async function oneRun(
  mode: Mode,
  cluster: SyntheticCluster,
  events: readonly ObjectEvent[],
  options: IptablesScaleOptions,
  index: number,
): Promise<RunResult> {
  const result: RunResult = {};
  const backend = mode === "nft" ? undefined : mode.slice("iptables-".length) as IptablesBackend;
  // Ours and upstream's alternate which goes first, so a drift of the machine hits both.
  const upstreamFirst = index % 2 === 1;
  if (options.only.has("daemon") && backend !== undefined) {
    const upstream = upstreamFirst ? await upstreamRestore(backend, cluster, events) : undefined;
    const started = await daemonStart(backend, cluster);
    result.daemon = {
      ...started,
      upstream: upstream ?? await upstreamRestore(backend, cluster, events),
    };
  }
  const ns = `${nsPrefix}${shortId()}`;
  await createNamespace(ns);
  try {
    const { planner, apply } = backendOf(mode, cluster, ns);
    const state = loadState(cluster.nodeName, events);
    const changed = state.takeChanges().changed;
    const coldUpstream = backend !== undefined && upstreamFirst
      ? await upstreamRestore(backend, cluster, events)
      : undefined;
    await resetPeak();
    let t = performance.now();
    const plan = planner.plan(state, { full: true, changed });
    const render = performance.now() - t;
    await apply(plan);
    plan.commit();
    result.cold = {
      total: performance.now() - t,
      render,
      apply: performance.now() - t - render,
      bytes: bytesOf(plan),
      peakMiB: await peakMiB(),
      upstream: backend === undefined
        ? undefined
        : coldUpstream ?? await upstreamRestore(backend, cluster, events),
    };
    if (options.only.has("noop")) {
      const times: number[] = [];
      let nonEmpty = 0;
      for (let i = 0; i < options.incrementalReps; i++) {
        t = performance.now();
        const changes = state.takeChanges();
        const p = planner.plan(state, { full: changes.global, changed: changes.changed });
        p.commit();
        times.push(performance.now() - t);
        if (!isEmpty(p)) nonEmpty++;
      }
      result.noop = { median: summarize(times).median, nonEmpty };
    }
    if (options.only.has("incremental")) {
      result.incremental = await incremental(cluster, state, { planner, apply }, {
        reps: options.incrementalReps,
        offset: index * 104_729,
      });
    }
    if (options.only.has("resync")) {
      const resyncUpstream = backend !== undefined && upstreamFirst
        ? await upstreamRestore(backend, cluster, events, { again: true })
        : undefined;
      await resetPeak();
      t = performance.now();
      const p = planner.plan(state, { full: true, changed: state.takeChanges().changed });
      const r = performance.now() - t;
      await apply(p);
      p.commit();
      result.resync = {
        total: performance.now() - t,
        render: r,
        bytes: bytesOf(p),
        peakMiB: await peakMiB(),
        upstream: backend === undefined
          ? undefined
          : resyncUpstream ?? await upstreamRestore(backend, cluster, events, { again: true }),
      };
    }
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
  }
  return result;
}

/** The 1-minute load average now. */
async function loadAverage(): Promise<number> {
  return Number((await Deno.readTextFile("/proc/loadavg")).split(" ")[0]);
}

/** `ours_over_upstream` and upstream's figures from per-run pairs. */
function upstreamFields(
  pairs: { ours: number; upstream?: UpstreamRestore }[],
): Measurement {
  const both = pairs.filter((p): p is { ours: number; upstream: UpstreamRestore } =>
    p.upstream !== undefined
  );
  if (both.length === 0) return {};
  return {
    upstream_restore_median_ms: round(summarize(both.map((p) => p.upstream.ms)).median),
    upstream_restore_pod_peak_median_mib: round(
      summarize(both.map((p) => p.upstream.podPeakMiB)).median,
    ),
    ours_over_upstream_median: round(
      summarize(both.map((p) => p.ours / p.upstream.ms)).median,
      3,
    ),
  };
}

const upstreamScripts = new Map<SyntheticCluster, string>();

/**
 * Upstream's iptables layout of the cluster loaded by `iptables-<backend>-restore` alone into a
 * fresh namespace (with `again`, a second time over the first: upstream's full re-sync), in its
 * own cgroup. Whole-table restores (no `--noflush`): with `--noflush` iptables-nft 1.8.9 keeps a
 * per-command chain list and upstream's layout at 10k×10 did not finish in minutes here.
 */
async function upstreamRestore(
  backend: IptablesBackend,
  cluster: SyntheticCluster,
  events: readonly ObjectEvent[],
  options: { again?: boolean } = {},
): Promise<UpstreamRestore> {
  let script = upstreamScripts.get(cluster);
  if (script === undefined) {
    const state = loadState(cluster.nodeName, events);
    state.takeChanges();
    script = renderUpstreamIptablesLayout(state, { clusterCIDR: BENCH_POD_CIDR, comments: true });
    upstreamScripts.set(cluster, script);
  }
  const file = await Deno.makeTempFile({ prefix: "knp-bench-upstream-" });
  const ns = `${nsPrefix}${shortId()}`;
  await createNamespace(ns);
  try {
    await Deno.writeTextFile(file, script);
    const once = async () => {
      const pod = await PodCgroup.create(`${ns}-up`);
      try {
        const t = performance.now();
        const out = await new Deno.Command("bash", {
          args: pod.wrap([
            "bash",
            "-c",
            'exec ip netns exec "$1" "$2" -w 5 < "$3" > /dev/null',
            "restore",
            ns,
            `iptables-${backend}-restore`,
            file,
          ]),
          stdout: "null",
          stderr: "piped",
        }).output();
        const ms = performance.now() - t;
        if (out.code !== 0) {
          throw new Error(`upstream layout refused: ${new TextDecoder().decode(out.stderr)}`);
        }
        return { ms, podPeakMiB: round((await pod.memory()).peakMiB, 1) };
      } finally {
        await pod.remove();
      }
    };
    const first = await once();
    return options.again ? await once() : first;
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
    await Deno.remove(file).catch(() => {});
  }
}

const yamlFiles = new Map<SyntheticCluster, string>();

/**
 * The daemon (`deno run main.ts --from-file … --proxy-mode iptables`) in a fresh namespace and
 * pod cgroup: exec → its `synced fully` line, its `VmHWM` then, the pod's peak (with the
 * iptables programs it ran).
 */
async function daemonStart(
  backend: IptablesBackend,
  cluster: SyntheticCluster,
): Promise<Omit<DaemonStart, "upstream">> {
  let file = yamlFiles.get(cluster);
  if (file === undefined) {
    file = await Deno.makeTempFile({ prefix: "knp-bench-cluster-", suffix: ".yaml" });
    await Deno.writeTextFile(file, clusterYaml(cluster));
    yamlFiles.set(cluster, file);
    await cacheDependencies(new URL("../main.ts", import.meta.url).pathname);
  }
  const ns = `${nsPrefix}${shortId()}`;
  await createNamespace(ns);
  const pod = await PodCgroup.create(`${ns}-d`);
  let daemon;
  try {
    daemon = await startDaemon(ns, [
      `--from-file=${file}`,
      `--hostname-override=${cluster.nodeName}`,
      `--cluster-cidr=${BENCH_POD_CIDR}`,
      "--proxy-mode=iptables",
      `--iptables-backend=${backend}`,
      "-v=2",
    ], pod);
    const sync = await daemon.waitForSync(0, APPLY_TIMEOUT_MS);
    if (!sync.full) throw new Error("the daemon's first sync was not full");
    const memory = await processMemory(daemon.pid);
    return {
      firstSyncMs: sync.at - daemon.startedAt,
      peakRssMiB: round(memory.peakRssMiB, 1),
      podPeakMiB: round((await pod.memory()).peakMiB, 1),
    };
  } finally {
    await daemon?.stop();
    await deleteNamespace(ns, { killProcesses: true });
    await pod.remove();
  }
}

async function incremental(
  cluster: SyntheticCluster,
  state: ProxyState,
  proxy: { planner: Planner; apply: (plan: Plan) => Promise<void> },
  options: { reps: number; offset: number },
): Promise<NonNullable<RunResult["incremental"]>> {
  const current = new Map<number, RawObject>();
  const totals: number[] = [];
  const renders: number[] = [];
  let bytes = 0;
  for (let i = 0; i < options.reps; i++) {
    const index = (options.offset + i * 7919) % cluster.options.services;
    const before = current.get(index) ?? cluster.slices[index][0];
    const after = withExtraEndpoint(before, extraEndpointIP(i));
    current.set(index, after);
    state.onEvent({ kind: "EndpointSlice", previous: before, current: after });
    const t = performance.now();
    const changes = state.takeChanges();
    const plan = proxy.planner.plan(state, { full: changes.global, changed: changes.changed });
    renders.push(performance.now() - t);
    await proxy.apply(plan);
    plan.commit();
    totals.push(performance.now() - t);
    bytes = bytesOf(plan);
    if (plan.full || isEmpty(plan)) throw new Error("an endpoint change was not partial");
  }
  return { total: summarize(totals).median, render: summarize(renders).median, bytes };
}

async function dataPlane(
  mode: Mode,
  cluster: SyntheticCluster,
  options: IptablesScaleOptions,
): Promise<Measurement[]> {
  const small = generateCluster({ ...cluster.options, services: 10 });
  const topologies: Topology[] = [];
  try {
    for (let i = 0; i < 2; i++) topologies.push(await createTopology({ ipv6: false }));
    for (const [i, c] of [small, cluster].entries()) {
      const topo = topologies[i];
      const tune = await topo.exec(topo.client.ns, [
        "sysctl",
        "-q",
        "-w",
        "net.ipv4.tcp_tw_reuse=1",
        "net.ipv4.ip_local_port_range=1024 65535",
      ]);
      if (tune.code !== 0) throw new Error(`cannot tune the client: ${tune.stderr}`);
      const state = loadState(c.nodeName, [
        ...clusterEvents(c),
        ...targetObjects(topo, "zz-bench"),
      ]);
      const { planner, apply } = backendOf(mode, c, topo.node.ns);
      const t = performance.now();
      const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
      await apply(plan);
      plan.commit();
      options.progress(
        `${mode} data plane: ${c.options.services} services loaded in ${
          Math.round(performance.now() - t)
        } ms`,
      );
    }
    const samples: number[][] = [[], []];
    const failures = [0, 0];
    const ratios: number[] = [];
    const perRound = Math.max(10, Math.ceil(options.connections / LATENCY_ROUNDS));
    for (let r = 0; r < LATENCY_ROUNDS; r++) {
      const medians = [NaN, NaN];
      for (const i of r % 2 === 0 ? [0, 1] : [1, 0]) {
        const report = await connectRound(topologies[i], perRound);
        samples[i].push(...report.samplesUs);
        failures[i] += report.attempts - report.samplesUs.length;
        if (report.samplesUs.length > 0) medians[i] = summarize(report.samplesUs).median;
      }
      ratios.push(medians[1] / medians[0]);
    }
    const lines: Measurement[] = [small, cluster].map((c, i) => {
      const s = summarize(samples[i].length > 0 ? samples[i] : [NaN]);
      return {
        measurement: "dataplane_connect",
        services: c.options.services,
        endpoints: options.endpoints,
        mode,
        runs: LATENCY_ROUNDS,
        median_ms: round(s.median / 1000, 3),
        p90_ms: round(s.p90 / 1000, 3),
        connections: samples[i].length,
        failures: failures[i],
      };
    });
    const paired = summarize(ratios.map((r) => Number.isNaN(r) ? Infinity : r));
    lines.push({
      measurement: "dataplane_connect_ratio",
      services: cluster.options.services,
      endpoints: options.endpoints,
      mode,
      runs: LATENCY_ROUNDS,
      ratio_median: round(paired.median, 3),
      ratio_min: round(paired.min, 3),
      ratio_max: round(paired.max, 3),
      target_position: mode === "nft" ? "map lookup" : "last rule of KUBE-SERVICES",
    });
    return lines;
  } finally {
    await Promise.allSettled(topologies.map((t) => t.cleanup()));
  }
}

/** One line of text for a measurement (`--json` prints the object instead). */
export function formatMeasurement(m: Measurement): string {
  return Object.entries(m).map(([k, v]) => `${k}=${v}`).join(" ");
}

function listOf<T extends string>(allowed: readonly T[], what: string) {
  return (value: string): T[] => {
    const items = value.split(",").map((s) => s.trim()).filter((s) => s !== "");
    for (const item of items) {
      if (!allowed.includes(item as T)) {
        throw new Error(`unknown ${what} ${item}: must be one of ${allowed.join(", ")}`);
      }
    }
    return items as T[];
  };
}

if (import.meta.main) {
  const program = new Command()
    .name("iptables_scale")
    .description("iptables-mode scale benchmark beside nft mode (as root)")
    .option("--services <list>", "cluster sizes, comma-separated", "10,10000")
    .option("--endpoints <n>", "endpoints per service", integerIn(0, 1000), 10)
    .option("--runs <n>", "runs per mode and size, each in a fresh namespace", integerIn(1, 50), 5)
    .option("--modes <list>", `modes: ${MODES.join(",")}`, MODES.join(","))
    .option("--only <list>", `sections: ${SECTIONS.join(",")}`, SECTIONS.join(","))
    .option(
      "--incremental-reps <n>",
      "endpoint changes and no-op syncs per run",
      integerIn(1, 500),
      10,
    )
    .option("--connections <n>", "data-plane connections per side", integerIn(100, 20_000), 4000)
    .option("--netns-prefix <prefix>", "namespace and cgroup prefix (knp-…)", "knp-bench-")
    .option("--json", "one JSON object per line");
  program.parse();
  const flags = program.opts();
  const support = await canUseNetns();
  if (!support.ok) {
    console.error(`iptables_scale: ${support.reason}`);
    Deno.exit(2);
  }
  const lines = await runIptablesScale({
    sizes: flags.services.split(",").map((s) => integerIn(1, 100_000)(s.trim())),
    endpoints: flags.endpoints,
    runs: flags.runs,
    modes: listOf(MODES, "mode")(flags.modes),
    only: new Set(listOf(SECTIONS, "section")(flags.only)),
    incrementalReps: flags.incrementalReps,
    connections: flags.connections,
    progress: (line) => console.error(line),
    netnsPrefix: flags.netnsPrefix,
  });
  for (const m of lines) console.log(flags.json ? JSON.stringify(m) : formatMeasurement(m));
}
