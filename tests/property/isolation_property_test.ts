/**
 * Property: bad objects never affect good ones. A set of valid Services and EndpointSlices in
 * namespace `good` renders to exactly the same chains, rules and elements whether or not a
 * hostile cluster (refused objects, half-valid ones, other services) is listed around it; and
 * whatever later happens to the hostile objects — puts, updates, deletes, with partial syncs
 * and periodic full re-syncs — the kernel's view of the good services (their chains' rules,
 * their elements, their sets) stays exactly what it was after the first sync.
 *
 * Good objects use addresses no hostile object can hold (10.96.200.0/24, 10.250.0.0/16 and
 * their IPv6 twins), so any difference is interference, not a legitimate conflict.
 *
 * The kernel part plays many runs at once, each in its own tables (`i0`, `i1`, …): step `n` of
 * every run is one `nft -f`, then one listing gives every run's view. A step counts as checked
 * when it changed the proxy's input (or was a full re-sync) and its view was compared; fewer
 * than 90% checked fails the property.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import {
  type ClusterObject,
  clusterObject,
  clusterObjects,
  type ConfigVariant,
  configVariant,
  HOSTNAME,
} from "./arbitraries.ts";
import { applyNft } from "../../src/apply/nft.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import {
  listTables,
  type Op,
  propertyRuns,
  propertySeed,
  reportChecked,
  scriptElements,
  SimulatedProxy,
  SimulatedSource,
  summary,
  type TableView,
} from "./cluster.ts";

const GOOD_NAMESPACE = "good";

const goodPort = fc.record({
  name: fc.constantFrom("http", "dns", "metrics", "grpc"),
  port: fc.integer({ min: 1, max: 65535 }),
  protocol: fc.constantFrom<"TCP" | "UDP" | "SCTP">("TCP", "UDP", "SCTP"),
  targetPort: fc.integer({ min: 1, max: 65535 }),
});

const goodService = fc.record({
  ports: fc.uniqueArray(goodPort, {
    minLength: 1,
    maxLength: 3,
    selector: (p) => p.name,
  }).map((ports) =>
    ports.filter((p, i) =>
      ports.findIndex((q) => q.port === p.port && q.protocol === p.protocol) === i
    )
  ),
  family: fc.constantFrom("IPv4", "IPv6", "dual"),
  internalTrafficPolicy: fc.constantFrom("Cluster", "Local"),
  clientIP: fc.boolean(),
  endpoints: fc.array(
    fc.record({
      index: fc.nat(999),
      ready: fc.boolean(),
      terminating: fc.boolean(),
      local: fc.boolean(),
      slice: fc.nat(1),
    }),
    { maxLength: 6 },
  ),
});

/** Valid Services (and their slices) in namespace `good`, plus this node. */
const goodObjects: fc.Arbitrary<ClusterObject[]> = fc.array(goodService, {
  minLength: 1,
  maxLength: 3,
}).map((specs) => {
  const objects: ClusterObject[] = [{
    kind: "Node",
    object: node(HOSTNAME, { ips: ["192.168.0.10"], podCIDRs: ["10.250.0.0/24"] }),
  }];
  specs.forEach((s, i) => {
    const name = `svc-${i}`;
    const v4 = `10.96.200.${i + 1}`;
    const v6 = `fd00:96:200::${i + 1}`;
    const clusterIPs = s.family === "IPv4" ? [v4] : s.family === "IPv6" ? [v6] : [v4, v6];
    objects.push({
      kind: "Service",
      object: service({
        namespace: GOOD_NAMESPACE,
        name,
        clusterIPs,
        ports: s.ports,
        spec: {
          internalTrafficPolicy: s.internalTrafficPolicy,
          ...(s.clientIP ? { sessionAffinity: "ClientIP" } : {}),
        },
      }),
    });
    for (const addressType of ["IPv4", "IPv6"] as const) {
      for (const slice of [0, 1]) {
        const endpoints = s.endpoints.filter((e) => e.slice === slice).map((e) => ({
          ip: addressType === "IPv4"
            ? `10.250.${e.index >> 8}.${e.index & 255}`
            : `fd00:250::${e.index.toString(16)}`,
          ready: e.ready,
          terminating: e.terminating,
          nodeName: e.local ? HOSTNAME : "node-b",
        }));
        if (endpoints.length === 0) continue;
        objects.push({
          kind: "EndpointSlice",
          object: endpointSlice({
            namespace: GOOD_NAMESPACE,
            name: `${name}-${addressType.toLowerCase()}-${slice}`,
            service: name,
            addressType,
            ports: s.ports.map((p) => ({ name: p.name, port: p.targetPort, protocol: p.protocol })),
            endpoints,
          }),
        });
      }
    }
  });
  return objects;
});

/** Hostile objects that are neither in namespace `good` nor this node's Node object. */
function isBystander(o: ClusterObject): boolean {
  const metadata = o.object.metadata as Record<string, unknown> | undefined;
  const namespace = typeof metadata === "object" && metadata !== null ? metadata.namespace : null;
  const name = typeof metadata === "object" && metadata !== null ? metadata.name : null;
  if (o.kind === "Node") return name !== HOSTNAME;
  return namespace !== GOOD_NAMESPACE;
}

/**
 * What a script does to the good services: the rules it writes into each of their chains (by
 * `family chain`, in order), the other commands naming those chains, and their elements.
 */
function goodPart(script: string, goodChains: ReadonlySet<string>, goodKeys: ReadonlySet<string>) {
  const rules = new Map<string, string[]>();
  const commands: string[] = [];
  for (const line of script.split("\n")) {
    const m = /^(add rule|add chain|flush chain|delete chain) (ip6?) \S+ (\S+)(?: (.*))?$/.exec(
      line,
    );
    if (m === null || !goodChains.has(`${m[2]} ${m[3]}`)) continue;
    if (m[1] !== "add rule") commands.push(`${m[1]} ${m[2]} ${m[3]}`);
    else {
      const list = rules.get(`${m[2]} ${m[3]}`) ?? [];
      list.push(m[4] ?? "");
      rules.set(`${m[2]} ${m[3]}`, list);
    }
  }
  const elements = scriptElements(script)
    .filter((e) => goodKeys.has(`${e.family} ${e.set} ${e.key}`))
    .map((e) => `${e.family} ${e.set} ${e.key}${e.rest}`)
    .sort();
  return { rules: [...rules].sort(), commands: commands.sort(), elements };
}

/** Chain names (`family chain`) and element keys of a script rendered from good objects only. */
function goodIdentity(script: string) {
  const chains = new Set<string>();
  for (const line of script.split("\n")) {
    const m = /^add chain (ip6?) \S+ (\S+)/.exec(line);
    if (m) chains.add(`${m[1]} ${m[2]}`);
  }
  const keys = new Set(scriptElements(script).map((e) => `${e.family} ${e.set} ${e.key}`));
  return { chains, keys };
}

/** Good-only chains are those a script adds beyond the fixed skeleton of an empty cluster. */
function skeletonChains(): Set<string> {
  const proxy = new SimulatedProxy({
    masqueradeAll: false,
    masqueradeBit: 14,
    clusterCIDRs: [],
    detectLocalMode: "None",
    bridgeInterface: "cbr0",
    interfaceNamePrefix: "veth",
  }, "t");
  return goodIdentity(proxy.sync()).chains;
}

Deno.test("NftPlanner renders good services identically whatever bad objects are listed beside them", () => {
  const skeleton = skeletonChains();
  let runs = 0;
  let checked = 0;
  fc.assert(
    fc.property(
      configVariant,
      goodObjects,
      clusterObjects,
      fc.array(fc.nat(), { maxLength: 40 }),
      (config, good, hostile, positions) => {
        runs++;
        const bad = hostile.filter(isBystander);
        // Interleave the bad objects with the good ones at random positions.
        const mixed = [...good];
        bad.forEach((o, i) => mixed.splice((positions[i] ?? i) % (mixed.length + 1), 0, o));

        const alone = new SimulatedProxy(config, "t");
        good.forEach(({ kind, object }) => alone.onEvent({ kind, current: object }));
        const aloneScript = alone.sync();
        const identity = goodIdentity(aloneScript);
        const goodChains = new Set([...identity.chains].filter((c) => !skeleton.has(c)));
        const expected = goodPart(aloneScript, goodChains, identity.keys);
        assert.ok(expected.elements.length > 0, "the good services render nothing");

        const together = new SimulatedProxy(config, "t");
        mixed.forEach(({ kind, object }) => together.onEvent({ kind, current: object }));
        assert.deepEqual(goodPart(together.sync(), goodChains, identity.keys), expected);
        if (bad.length > 0) checked++;
      },
    ),
    { seed: propertySeed(), numRuns: Math.ceil(propertyRuns() / 4) },
  );
  // A run with no bad object at all checks nothing about interference.
  reportChecked("isolation property (render)", { checked, generated: runs, unit: "clusters" });
});

/** One change to the bad objects: a new one, a changed one (same identity), a deleted one. */
type BadChange =
  | { readonly op: "put"; readonly object: ClusterObject }
  | { readonly op: "update" | "delete"; readonly target: number; readonly object: ClusterObject };

const badChange: fc.Arbitrary<BadChange> = fc.oneof(
  { weight: 2, arbitrary: clusterObject.map((object): BadChange => ({ op: "put", object })) },
  {
    weight: 3,
    arbitrary: fc.record({ target: fc.nat(), object: clusterObject }).map((r): BadChange => ({
      op: "update",
      ...r,
    })),
  },
  {
    weight: 2,
    arbitrary: fc.record({ target: fc.nat(), object: clusterObject }).map((r): BadChange => ({
      op: "delete",
      ...r,
    })),
  },
);

/** A step: a few changes to bad objects, then a sync — a periodic full one now and then. */
interface Step {
  readonly changes: readonly BadChange[];
  readonly full: boolean;
}

interface Run {
  readonly config: ConfigVariant;
  readonly good: readonly ClusterObject[];
  readonly hostile: readonly ClusterObject[];
  readonly steps: readonly Step[];
}

const run: fc.Arbitrary<Run> = fc.record({
  config: configVariant,
  good: goodObjects,
  hostile: clusterObjects,
  steps: fc.array(
    fc.record({
      changes: fc.array(badChange, { minLength: 1, maxLength: 4 }),
      full: fc.oneof({ weight: 3, arbitrary: fc.constant(false) }, fc.constant(true)),
    }),
    { minLength: 1, maxLength: 5 },
  ),
});

/** What a run renders: the first sync's script, one per step, and what the good objects own. */
interface Played {
  readonly table: string;
  readonly scripts: string[];
  /** Source events each step delivered to the proxy (0: the step changed nothing). */
  readonly events: number[];
  readonly fullSteps: boolean[];
  /** Chains (`family name`) and sets (`family set NAME` / `family map NAME`) of the good ones. */
  readonly goodChains: ReadonlySet<string>;
  readonly goodSets: ReadonlySet<string>;
}

/** Plays a run into table `table`: good and bad objects listed, then the bad ones changed. */
function play(r: Run, table: string, skeleton: { chains: Set<string>; sets: Set<string> }): Played {
  const bad = r.hostile.filter(isBystander);
  const source = new SimulatedSource([...r.good, ...bad]);
  const proxy = new SimulatedProxy(r.config, table);
  source.listEvents().forEach((e) => proxy.onEvent(e));
  const scripts = [proxy.sync()];
  const events: number[] = [];
  for (const step of r.steps) {
    let delivered = 0;
    for (const change of step.changes) {
      for (const e of applyBad(source, change)) {
        proxy.onEvent(e);
        delivered++;
      }
    }
    events.push(delivered);
    scripts.push(proxy.sync({ full: step.full }));
  }
  const alone = new SimulatedProxy(r.config, table);
  r.good.forEach(({ kind, object }) => alone.onEvent({ kind, current: object }));
  const own = definitions(alone.sync());
  return {
    table,
    scripts,
    events,
    fullSteps: r.steps.map((s) => s.full),
    goodChains: new Set([...own.chains].filter((c) => !skeleton.chains.has(c))),
    goodSets: new Set([...own.sets].filter((c) => !skeleton.sets.has(c))),
  };
}

/** Applies a change to a bad object only; returns the events the source emitted. */
function applyBad(source: SimulatedSource, change: BadChange) {
  if (change.op === "put") {
    return isBystander(change.object) ? source.apply({ op: "put", object: change.object }) : [];
  }
  const objects = source.objects;
  const bad = objects.filter(isBystander);
  if (bad.length === 0) return [];
  const target = objects.indexOf(bad[change.target % bad.length]);
  const op: Op = change.op === "update"
    ? { op: "update", target, object: change.object }
    : { op: "delete", target };
  return source.apply(op);
}

/** Chains and sets a script adds, as `family name` and `family set|map name`. */
function definitions(script: string): { chains: Set<string>; sets: Set<string> } {
  const chains = new Set<string>();
  const sets = new Set<string>();
  for (const line of script.split("\n")) {
    const m = /^add (chain|set|map) (ip6?) \S+ (\S+)/.exec(line);
    if (m === null) continue;
    if (m[1] === "chain") chains.add(`${m[2]} ${m[3]}`);
    else sets.add(`${m[2]} ${m[1]} ${m[3]}`);
  }
  return { chains, sets };
}

/** Addresses only good objects hold, as the kernel prints them in elements. */
const GOOD_ADDRESS =
  /"(10\.96\.200\.\d+|10\.250\.\d+\.\d+|fd00:96:200::[0-9a-f]+|fd00:250::[0-9a-f]+)"/;

/**
 * The kernel's view of a run's good services: the rules of their chains, their own sets'
 * definitions, and every element holding a good address, per family.
 */
function goodView(tables: Map<string, TableView>, p: Played): string {
  const view: Record<string, unknown> = {};
  for (const family of ["ip", "ip6"]) {
    const t = tables.get(`${family} ${p.table}`);
    const chains = [...p.goodChains].filter((c) => c.startsWith(`${family} `)).sort()
      .map((c) => [c, t?.chains.get(c.slice(family.length + 1))?.rules ?? "(missing)"]);
    const sets = [...p.goodSets].filter((c) => c.startsWith(`${family} `)).sort()
      .map((c) => [c, t?.sets.get(c.slice(family.length + 1)) ?? "(missing)"]);
    const elements = [...t?.sets ?? []].sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0)
      .map(([name, set]) => [
        name,
        ((set as { elem: string[] }).elem ?? []).filter((e) => GOOD_ADDRESS.test(e)),
      ])
      .filter(([, elem]) => (elem as string[]).length > 0);
    view[family] = { chains, sets, elements };
  }
  return JSON.stringify(view, null, 1);
}

/** Runs played in one batch. */
const BATCH_RUNS = 50;

/** Kernel-side differences that change nothing (see listTables). */
const QUIRKS = { ignoreProtocolDependency: true };

Deno.test({
  name:
    "NftPlanner's syncs never change the kernel's view of good services when only bad objects change, full re-syncs included",
  ignore: kernelGate.ignore,
  fn: async () => {
    const count = Math.max(1, Math.ceil(propertyRuns() / 20));
    const seed = propertySeed();
    const started = performance.now();
    const runs = fc.sample(run, { seed, numRuns: count });
    const empty = new SimulatedProxy(runs[0].config, "t");
    const skeletonDefinitions = definitions(empty.sync());
    const failed: { index: number; error: string }[] = [];
    let generated = 0;
    let checked = 0;
    let nonEmpty = 0;
    let fullSteps = 0;
    await withScratch(async (k) => {
      for (let from = 0; from < count; from += BATCH_RUNS) {
        const batch: { index: number; played: Played }[] = [];
        for (let index = from; index < Math.min(from + BATCH_RUNS, count); index++) {
          generated += runs[index].steps.length;
          try {
            batch.push({ index, played: play(runs[index], `i${index}`, skeletonDefinitions) });
          } catch (err) {
            failed.push({ index, error: `render: ${(err as Error).message}` });
          }
        }
        const alive = new Set(batch.map((b) => b.index));
        const before = new Map<number, string>();
        const steps = Math.max(0, ...batch.map((b) => b.played.scripts.length));
        for (let step = 0; step < steps; step++) {
          const now = batch.filter((b) => alive.has(b.index) && step < b.played.scripts.length);
          // Bisect a rejected step: the halves that load stay, single culprits drop out.
          const load = async (items: typeof now): Promise<void> => {
            try {
              await applyNft(items.map((b) => b.played.scripts[step]).join(""), { netns: k.ns });
            } catch (err) {
              if (items.length === 1) {
                alive.delete(items[0].index);
                failed.push({
                  index: items[0].index,
                  error: `step ${step}: ${(err as Error).message}`,
                });
                return;
              }
              const half = Math.ceil(items.length / 2);
              await load(items.slice(0, half));
              await load(items.slice(half));
            }
          };
          await load(now);
          const tables = await listTables(k.ns, QUIRKS);
          for (const { index, played } of now) {
            if (!alive.has(index)) continue;
            const view = goodView(tables, played);
            if (step === 0) {
              before.set(index, view);
              continue;
            }
            const script = played.scripts[step];
            if (script !== "") nonEmpty++;
            const full = played.fullSteps[step - 1];
            if (full) fullSteps++;
            if (view !== before.get(index)) {
              failed.push({
                index,
                error: `step ${step}${full ? " (full re-sync)" : ""} changed the good services:\n` +
                  `${firstLines(before.get(index)!, view)}\nscript:\n${script.slice(0, 2000)}`,
              });
              alive.delete(index);
              continue;
            }
            if (played.events[step - 1] > 0 || full) checked++;
          }
          // Runs that are done leave the listing: it is most of what a step costs.
          const done = now.filter((b) => b.played.scripts.length === step + 1);
          const drop = done.flatMap((b) =>
            ["ip", "ip6"].filter((f) => tables.has(`${f} ${b.played.table}`))
              .map((f) => `delete table ${f} ${b.played.table}\n`)
          );
          if (drop.length > 0) await applyNft(drop.join(""), { netns: k.ns });
        }
        await applyNft("flush ruleset\n", { netns: k.ns });
      }
    });
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    assert.equal(
      failed.length,
      0,
      `${failed.length} of ${count} runs failed (PROPERTY_SEED=${seed}):\n${summary(failed)}`,
    );
    reportChecked(
      `isolation property (kernel, PROPERTY_SEED=${seed})`,
      { checked, generated },
      `${count} runs, ${nonEmpty} non-empty scripts, ${fullSteps} full re-syncs, ${seconds} s`,
    );
  },
});

/** The first differing lines of two views. */
function firstLines(a: string, b: string): string {
  const x = a.split("\n");
  const y = b.split("\n");
  const at = x.findIndex((line, i) => line !== y[i]);
  return [
    `before: ${x.slice(Math.max(0, at - 2), at + 4).join(" ")}`,
    `after:  ${y.slice(Math.max(0, at - 2), at + 4).join(" ")}`,
  ].join("\n");
}
