/**
 * Load specs: an event storm is coalesced by the runner into a bounded number of syncs, nothing
 * of it stays behind (no pending change, no endpoint of an older generation), and the final
 * table is exactly what a fresh full sync of the final state renders. Time is a fake clock; the
 * kernel is a throwaway namespace loading every script sent. (Memory is measured by bench/,
 * not asserted here: heap figures depend on the garbage collector's timing.)
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../src/config/config.ts";
import { NftPlanner } from "../../src/render/nft/planner.ts";
import { BoundedFrequencyRunner } from "../../src/runner/bounded_runner.ts";
import { FakeClock } from "../../src/runner/clock.ts";
import { SyncLoop } from "../../src/runner/sync_loop.ts";
import { createLogger } from "../../src/log.ts";
import { ProxyState } from "../../src/tracker/proxy_state.ts";
import { endpointSlice, service } from "../fixtures/objects.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import { listTables, tableText } from "../property/cluster.ts";

const SERVICES = 100;
const UPDATES = 50_000;
const STORM_MS = 10_000;
const config = { ...DEFAULT_CONFIG, hostname: "node-a", clusterCIDRs: ["10.244.0.0/16"] };

function slice(i: number, generation: number) {
  const endpoints = Array.from(
    { length: 1 + (generation % 4) },
    (_, e) => `10.244.${i}.${e + 1 + generation % 7}`,
  );
  return endpointSlice({ name: `svc-${i}-1`, service: `svc-${i}`, endpoints });
}

/** Waits while a sync is loading a script into the kernel (real time: nft runs for real). */
async function settle(runner: BoundedFrequencyRunner): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (runner.running) {
    if (Date.now() > deadline) throw new Error("a sync has been loading for 60 s");
    await new Promise((r) => setTimeout(r, 2));
  }
}

Deno.test({
  name:
    "an event storm of 50,000 endpoint updates in 10 s is coalesced into few syncs, leaves nothing behind and ends exact",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (kernel) => {
      const clock = new FakeClock();
      const scripts: string[] = [];
      const state = new ProxyState({ hostname: "node-a", log: () => {} });
      const planner = new NftPlanner(config);
      const loop = new SyncLoop(state, {
        planner,
        clock,
        log: createLogger({ write: () => {} }),
        apply: async (script) => {
          scripts.push(script);
          await kernel.load(script);
        },
      });
      const runner = new BoundedFrequencyRunner(async () => void await loop.sync(), {
        minIntervalMs: 1000,
        maxIntervalMs: 30_000,
        clock,
      });
      const current = new Map<number, number>();
      for (let i = 0; i < SERVICES; i++) {
        state.onEvent({
          kind: "Service",
          current: service({ name: `svc-${i}`, clusterIPs: [`10.96.1.${i + 1}`] }),
        });
        state.onEvent({ kind: "EndpointSlice", current: slice(i, 0) });
        current.set(i, 0);
      }
      runner.start();
      await clock.advanceAsync(0);
      await settle(runner);
      const heapBefore = Deno.memoryUsage().heapUsed;
      // 50,000 updates spread over 10 s of (fake) time, each one requesting a sync.
      const perTick = UPDATES / (STORM_MS / 10);
      for (let t = 0; t < STORM_MS; t += 10) {
        for (let k = 0; k < perTick; k++) {
          const i = (t * 7 + k * 13) % SERVICES;
          const generation = current.get(i)! + 1;
          state.onEvent({
            kind: "EndpointSlice",
            previous: slice(i, generation - 1),
            current: slice(i, generation),
          });
          current.set(i, generation);
          runner.run();
        }
        await clock.advanceAsync(10);
        await settle(runner);
      }
      for (let i = 0; i < 3; i++) {
        await clock.advanceAsync(1000);
        await settle(runner);
      }
      await runner.stop();
      const heapAfter = Deno.memoryUsage().heapUsed;
      const syncs = scripts.length;
      console.log(
        `${UPDATES} updates in ${STORM_MS / 1000} s → ${syncs} transactions; heap ${
          (heapBefore / 2 ** 20).toFixed(1)
        } → ${(heapAfter / 2 ** 20).toFixed(1)} MiB`,
      );
      // minSyncPeriod 1 s: at most one sync per second of storm, plus the first and the last.
      assert.ok(syncs <= STORM_MS / 1000 + 3, `${syncs} syncs`);
      // Nothing of the storm is held back: no pending change, and per service exactly the
      // endpoints of its last slice.
      assert.deepEqual(state.pending, { services: 0, endpoints: 0 });
      assert.equal(state.services.size, SERVICES);
      for (const [i, generation] of current) {
        const want = (slice(i, generation).endpoints as { addresses: string[] }[])
          .map((e) => e.addresses[0]).sort();
        const have = state.endpoints.get(`default/svc-${i}:http/TCP`)?.map((e) => e.ip).sort();
        assert.deepEqual(have, want, `svc-${i}`);
      }
      // The table the partial syncs built equals a fresh full sync of the final state.
      await withScratch(async (fresh) => {
        const { changed } = state.takeChanges();
        await fresh.load(new NftPlanner(config).plan(state, { full: true, changed }).script);
        const options = { ignoreProtocolDependency: true };
        assert.equal(
          tableText((await listTables(kernel.ns, options)).get("ip kube-nftproxy")),
          tableText((await listTables(fresh.ns, options)).get("ip kube-nftproxy")),
        );
      });
    }),
});
