/**
 * Specs of the no-local-endpoints count behind upstream's
 * `kubeproxy_sync_proxy_rules_no_local_endpoints_total`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ProxyState } from "../tracker/proxy_state.ts";
import { endpointSlice, service } from "../../tests/fixtures/objects.ts";
import { countNoLocalEndpoints } from "./no_local_endpoints.ts";

function count(objects: { kind: "Service" | "EndpointSlice"; current: Record<string, unknown> }[]) {
  const state = new ProxyState({ hostname: "node-a", log: () => {} });
  objects.forEach((e) => state.onEvent(e));
  state.takeChanges();
  return countNoLocalEndpoints(state.services, state.endpoints, "node-a");
}

const local = (
  name: string,
  ip: string | string[],
  spec: Record<string, unknown>,
  type = "NodePort",
) => ({
  kind: "Service" as const,
  current: service({
    name,
    type: type as "NodePort",
    clusterIPs: typeof ip === "string" ? [ip] : ip,
    ports: [{
      name: "http",
      port: 80,
      nodePort: type === "ClusterIP" ? undefined : 30000 + Number(`${ip}`.split(".")[3] ?? 0),
    }],
    spec,
  }),
});
const slice = (
  name: string,
  endpoints: Parameters<typeof endpointSlice>[0]["endpoints"],
  addressType: "IPv4" | "IPv6" = "IPv4",
) => ({
  kind: "EndpointSlice" as const,
  current: endpointSlice({ name: `${name}-${addressType}`, service: name, endpoints, addressType }),
});
const none = { internal: 0, external: 0 };

Deno.test("countNoLocalEndpoints() counts Local-policy ports whose endpoints all run elsewhere", () => {
  assert.deepEqual(
    count([
      local("ext", "10.96.0.10", { externalTrafficPolicy: "Local" }),
      slice("ext", [{ ip: "10.244.2.11", nodeName: "node-b" }]),
      local("int", "10.96.0.11", { internalTrafficPolicy: "Local" }, "ClusterIP"),
      slice("int", [{ ip: "10.244.2.12", nodeName: "node-b" }]),
      local("both", "10.96.0.12", {
        externalTrafficPolicy: "Local",
        internalTrafficPolicy: "Local",
      }),
    ]),
    { IPv4: { internal: 2, external: 2 }, IPv6: none },
  );
});

Deno.test("countNoLocalEndpoints() ignores Cluster-policy ports and Local ones with a usable local endpoint", () => {
  assert.deepEqual(
    count([
      local("cluster", "10.96.0.10", {}),
      local("served", "10.96.0.11", { externalTrafficPolicy: "Local" }),
      slice("served", [{ ip: "10.244.1.11", nodeName: "node-a" }]),
      // Terminating but serving: still usable when nothing is ready, as upstream.
      local("draining", "10.96.0.12", { internalTrafficPolicy: "Local" }, "ClusterIP"),
      slice("draining", [{ ip: "10.244.1.12", ready: false, serving: true, terminating: true }]),
    ]),
    { IPv4: none, IPv6: none },
  );
});

Deno.test("countNoLocalEndpoints() counts each family of a dual-stack port on its own endpoints", () => {
  assert.deepEqual(
    count([
      // A local IPv4 endpoint, the IPv6 ones elsewhere: only IPv6 lacks a local endpoint.
      local("dual", ["10.96.0.10", "fd00:96::10"], { externalTrafficPolicy: "Local" }),
      slice("dual", [{ ip: "10.244.1.11", nodeName: "node-a" }]),
      slice("dual", [{ ip: "fd00:244:2::11", nodeName: "node-b" }], "IPv6"),
      // IPv6 only: never counted as IPv4.
      local("v6", ["fd00:96::11"], { internalTrafficPolicy: "Local" }, "ClusterIP"),
    ]),
    { IPv4: none, IPv6: { internal: 1, external: 1 } },
  );
});
