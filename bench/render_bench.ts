/**
 * Pure microbenchmarks of the proxy's core (no kernel): converting and tracking a cluster's
 * objects, rendering a full sync, planning a partial sync after one endpoint change, and
 * planning a sync with no change. Run with `deno bench bench/`.
 *
 * Inputs are built once at load time, outside every timed part; every benchmark asserts on its
 * result so nothing can be optimised away. Sizes follow clusters: 1k, 10k and 50k services.
 *
 * @module
 */
import assert from "node:assert/strict";
import { NftPlanner } from "../src/render/nft/planner.ts";
import type { ObjectEvent } from "../src/source/events.ts";
import {
  clusterEvents,
  extraEndpointIP,
  generateCluster,
  type SyntheticCluster,
  withExtraEndpoint,
} from "./cluster.ts";
import { benchConfig, loadState } from "./state.ts";

interface Sized {
  readonly label: string;
  readonly cluster: SyntheticCluster;
  readonly events: readonly ObjectEvent[];
}

function sized(services: number, endpoints: number): Sized {
  const cluster = generateCluster({ services, endpoints });
  const label = `${services / 1000}k×${endpoints}`;
  return { label, cluster, events: clusterEvents(cluster) };
}

const SIZES = [sized(1_000, 10), sized(10_000, 10), sized(50_000, 2)];
const TEN_K = SIZES[1];

for (const { label, cluster, events } of SIZES) {
  Deno.bench({
    name: `convert + track ${label}`,
    group: "convert + track",
    n: 10,
    warmup: 2,
    fn() {
      const state = loadState(cluster.nodeName, events);
      const { changed } = state.takeChanges();
      assert.equal(changed.size, cluster.options.services);
    },
  });
}

for (const { label, cluster, events } of SIZES) {
  const state = loadState(cluster.nodeName, events);
  const { changed } = state.takeChanges();
  const config = benchConfig(cluster);
  Deno.bench({
    name: `full render ${label}${label === "10k×10" ? " (target ≤ 150 ms)" : ""}`,
    group: "full render",
    baseline: label === "10k×10",
    n: 10,
    warmup: 2,
    fn() {
      const plan = new NftPlanner(config).plan(state, { full: true, changed });
      assert.ok(plan.full && plan.servicePortsChanged === cluster.options.services);
    },
  });
}

// One 10k state and planner, synced once, shared by the partial and no-op benchmarks: each
// leaves them synced, as a real sync loop would.
const synced = (() => {
  const { cluster, events } = TEN_K;
  const state = loadState(cluster.nodeName, events);
  const planner = new NftPlanner(benchConfig(cluster));
  planner.plan(state, { full: true, changed: state.takeChanges().changed }).commit();
  return { state, planner, cluster };
})();

let toggles = 0;
Deno.bench({
  name: "partial sync plan after one endpoint change in 10k×10",
  group: "incremental",
  n: 200,
  warmup: 20,
  fn(b) {
    const { state, planner, cluster } = synced;
    // Outside the timed part: one slice gains an endpoint, then loses it on the next iteration.
    const index = (Math.floor(toggles / 2) * 7919) % cluster.options.services;
    const base = cluster.slices[index][0];
    const bigger = withExtraEndpoint(base, extraEndpointIP(index % 65536));
    const adding = toggles++ % 2 === 0;
    state.onEvent({
      kind: "EndpointSlice",
      previous: adding ? base : bigger,
      current: adding ? bigger : base,
    });
    b.start();
    const changes = state.takeChanges();
    const plan = planner.plan(state, { full: changes.global, changed: changes.changed });
    plan.commit();
    b.end();
    // An added endpoint must appear in the script; a removal deletes elements by key.
    assert.ok(!plan.full && plan.script !== "");
    if (adding) assert.ok(plan.script.includes(extraEndpointIP(index % 65536)));
  },
});

Deno.bench({
  name: "no-op sync plan in 10k×10 (target ≤ 5 ms, empty)",
  group: "incremental",
  n: 200,
  warmup: 20,
  fn() {
    const { state, planner } = synced;
    const changes = state.takeChanges();
    const plan = planner.plan(state, { full: false, changed: changes.changed });
    plan.commit();
    assert.equal(plan.script, "");
  },
});
