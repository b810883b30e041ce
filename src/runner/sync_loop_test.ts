/**
 * Specs of the sync loop: when a sync is full or partial, what it reports, and how a refused
 * transaction is remembered.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { createLogger } from "../log.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { endpointSlice, service } from "../../tests/fixtures/objects.ts";
import { FakeClock } from "./clock.ts";
import { SyncLoop } from "./sync_loop.ts";

function setup() {
  const config = { ...DEFAULT_CONFIG, hostname: "node-a" };
  const state = new ProxyState({ hostname: "node-a", log: () => {} });
  const kernel = { failing: false, scripts: [] as string[] };
  const loop = new SyncLoop(state, {
    planner: new NftPlanner(config),
    apply: (script) => {
      if (kernel.failing) return Promise.reject(new Error("nft refused the transaction"));
      kernel.scripts.push(script);
      return Promise.resolve();
    },
    log: createLogger({ write: () => {} }),
    clock: new FakeClock(),
  });
  return { state, kernel, loop };
}

const web = service({ name: "web", clusterIPs: ["10.96.0.10"] });
const slice = (ip: string) => endpointSlice({ name: "web-1", service: "web", endpoints: [ip] });

Deno.test("SyncLoop.sync() reports the service ports it folded in, and a partial sync after a full one", async () => {
  const { state, loop } = setup();
  state.onEvent({ kind: "Service", current: web });
  const first = await loop.sync();
  assert.equal(first.full, true);
  assert.deepEqual([...first.changed], ["default/web:http/TCP"]);
  state.onEvent({ kind: "EndpointSlice", current: slice("10.244.1.11") });
  const second = await loop.sync();
  assert.equal(second.full, false);
  assert.equal(second.applied, true);
  assert.deepEqual([...second.changed], ["default/web:http/TCP"]);
  const idle = await loop.sync();
  assert.equal(idle.applied, false);
  assert.deepEqual([...idle.changed], []);
});

Deno.test("SyncLoop.lastAttemptFull tells whether a refused sync was full, and the retry is full", async () => {
  const { state, kernel, loop } = setup();
  state.onEvent({ kind: "Service", current: web });
  await loop.sync();
  kernel.failing = true;
  state.onEvent({ kind: "EndpointSlice", current: slice("10.244.1.11") });
  await assert.rejects(loop.sync(), /refused/);
  assert.equal(loop.lastAttemptFull, false, "the refused sync was partial");
  assert.equal(loop.consecutiveFailures, 1);
  await assert.rejects(loop.sync(), /refused/);
  assert.equal(loop.lastAttemptFull, true, "after a failure every sync is full");
  kernel.failing = false;
  const retry = await loop.sync();
  assert.equal(retry.full, true);
  assert.match(kernel.scripts.at(-1)!, /10\.244\.1\.11/, "the change taken by the failed sync");
  assert.equal(loop.consecutiveFailures, 0);
});
