import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../../tests/fixtures/objects.ts";
import { ProxyState } from "./proxy_state.ts";

function newState(lines: string[] = []) {
  return new ProxyState({ hostname: "node-a", log: (l) => lines.push(l) });
}

const web = service({ name: "web", clusterIPs: ["10.96.0.10"] });
const webSlice = endpointSlice({ name: "web-1", service: "web", endpoints: ["10.244.1.11"] });

Deno.test("ProxyState.takeChanges() reports the service ports whose service or endpoints changed", () => {
  const state = newState();
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({ kind: "EndpointSlice", current: webSlice });
  const first = state.takeChanges();
  assert.deepEqual([...first.changed], ["default/web:http/TCP"]);
  assert.equal(state.endpoints.get("default/web:http/TCP")?.length, 1);
  assert.deepEqual([...state.takeChanges().changed], [], "nothing pending after a take");
});

Deno.test("ProxyState forgets a change that returns an object to its applied state", () => {
  const state = newState();
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({ kind: "EndpointSlice", current: webSlice });
  state.takeChanges();
  const moved = endpointSlice({ name: "web-1", service: "web", endpoints: ["10.244.1.12"] });
  state.onEvent({ kind: "EndpointSlice", previous: webSlice, current: moved });
  state.onEvent({ kind: "EndpointSlice", previous: moved, current: webSlice });
  const changed2 = service({ name: "web", clusterIPs: ["10.96.0.10"], ports: [{ port: 81 }] });
  state.onEvent({ kind: "Service", previous: web, current: changed2 });
  state.onEvent({ kind: "Service", previous: changed2, current: web });
  assert.deepEqual(state.pending, { services: 0, endpoints: 0 });
  assert.deepEqual([...state.takeChanges().changed], []);
});

Deno.test("ProxyState keeps a good Service next to a refused one and logs one line for it", () => {
  const lines: string[] = [];
  const state = newState(lines);
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({
    kind: "Service",
    current: service({ name: "bad", clusterIPs: ["10.0.0.300"], ports: [{ port: 70000 }] }),
  });
  state.takeChanges();
  assert.deepEqual([...state.services.keys()], ["default/web:http/TCP"]);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /^cannot use Service default\/bad: spec\.clusterIPs\[0\]/);
});

Deno.test("ProxyState programs a Service's good ports and logs each part it skipped", () => {
  const lines: string[] = [];
  const state = newState(lines);
  state.onEvent({
    kind: "Service",
    current: service({
      name: "odd",
      clusterIPs: ["10.96.0.011"],
      ports: [{ name: "a", port: 70000 }, { name: "b", port: 81 }],
      spec: { externalIPs: ["bad"] },
    }),
  });
  state.takeChanges();
  assert.deepEqual([...state.services.keys()], ["default/odd:b/TCP"]);
  assert.deepEqual(state.services.get("default/odd:b/TCP")?.clusterIPs, ["10.96.0.11"]);
  assert.equal(lines.length, 2);
  assert.ok(
    lines.every((l) => l.startsWith("ignoring part of Service default/odd: ")),
    lines.join(),
  );
});

Deno.test("ProxyState moves endpoints when a slice changes its service label", () => {
  const state = newState();
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({ kind: "EndpointSlice", current: webSlice });
  state.takeChanges();
  const relabelled = endpointSlice({ name: "web-1", service: "api", endpoints: ["10.244.1.11"] });
  state.onEvent({ kind: "EndpointSlice", previous: webSlice, current: relabelled });
  const { changed } = state.takeChanges();
  assert.deepEqual([...changed].sort(), ["default/api:http/TCP", "default/web:http/TCP"]);
  assert.equal(state.endpoints.get("default/web:http/TCP"), undefined);
});

Deno.test("ProxyState marks node and ServiceCIDR changes as global", () => {
  const state = newState();
  state.onEvent({ kind: "Node", current: node("node-b", { ips: ["192.168.77.9"] }) });
  assert.equal(state.takeChanges().global, false, "another node is ignored");
  state.onEvent({ kind: "Node", current: node("node-a", { ips: ["192.168.77.1"] }) });
  assert.equal(state.takeChanges().global, true);
  assert.deepEqual(state.node?.ips, ["192.168.77.1"]);
  state.onEvent({ kind: "ServiceCIDR", current: serviceCIDR("kubernetes", ["10.96.0.0/16"]) });
  assert.equal(state.takeChanges().global, true);
  assert.deepEqual(state.serviceCIDRs, ["10.96.0.0/16"]);
});

Deno.test("ProxyState drops the endpoints of a deleted slice", () => {
  const state = newState();
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({ kind: "EndpointSlice", current: webSlice });
  state.takeChanges();
  state.onEvent({ kind: "EndpointSlice", previous: webSlice });
  assert.deepEqual([...state.takeChanges().changed], ["default/web:http/TCP"]);
  assert.equal(state.endpoints.size, 0);
});

Deno.test("ProxyState reports when the endpoint changes it folds in were triggered", () => {
  const state = newState();
  const triggered = {
    ...webSlice,
    metadata: {
      ...(webSlice.metadata as Record<string, unknown>),
      annotations: { "endpoints.kubernetes.io/last-change-trigger-time": "2026-11-22T20:00:00Z" },
    },
  };
  state.onEvent({ kind: "Service", current: web });
  state.onEvent({ kind: "EndpointSlice", current: triggered });
  assert.deepEqual(state.takeChanges().triggerTimes, [Date.parse("2026-11-22T20:00:00Z")]);
  assert.deepEqual(state.takeChanges().triggerTimes, [], "reported once");
});
