import assert from "node:assert/strict";
import type { Endpoint } from "../model/endpoint.ts";
import type { ServicePort } from "../model/service_port.ts";
import { selectEndpoints } from "./endpoints.ts";

const NODE = { nodeName: "node-a", zone: "zone-a" };

const port: ServicePort = {
  name: { namespace: "default", name: "web", port: "http", protocol: "TCP" },
  type: "ClusterIP",
  port: 80,
  clusterIPs: ["10.96.0.10"],
  nodePort: 0,
  externalIPs: [],
  loadBalancerIPs: [],
  loadBalancerSourceRanges: [],
  sessionAffinity: null,
  externalPolicyLocal: false,
  internalPolicyLocal: false,
  healthCheckNodePort: 0,
};

function ep(ip: string, extra: Partial<Endpoint> = {}): Endpoint {
  return {
    ip,
    port: 8080,
    ready: true,
    serving: true,
    terminating: false,
    nodeName: "node-b",
    zone: "zone-b",
    isLocal: false,
    zoneHints: null,
    nodeHints: null,
    ...extra,
  };
}

const ips = (eps: readonly Endpoint[]) => eps.map((e) => e.ip);

Deno.test("selectEndpoints() narrows ready endpoints by zone hints when every one has some", () => {
  const endpoints = [
    ep("10.244.1.11", { zoneHints: ["zone-a"] }),
    ep("10.244.2.11", { zoneHints: ["zone-b"] }),
  ];
  assert.deepEqual(ips(selectEndpoints(port, endpoints, NODE).cluster), ["10.244.1.11"]);
});

Deno.test("selectEndpoints() ignores hints when a ready endpoint has an empty list, as upstream", () => {
  const endpoints = [
    ep("10.244.1.11", { zoneHints: ["zone-a"], nodeHints: ["node-a"] }),
    ep("10.244.2.11", { zoneHints: [], nodeHints: [] }),
  ];
  assert.deepEqual(ips(selectEndpoints(port, endpoints, NODE).cluster), [
    "10.244.1.11",
    "10.244.2.11",
  ]);
});

Deno.test("selectEndpoints() falls back to every serving terminating endpoint, ignoring topology", () => {
  const terminating = { ready: false, serving: true, terminating: true };
  const endpoints = [
    ep("10.244.1.11", { ...terminating, zoneHints: ["zone-a"], nodeHints: ["node-a"] }),
    ep("10.244.2.11", { ...terminating, zoneHints: ["zone-b"], nodeHints: ["node-b"] }),
    ep("10.244.3.11", { ready: false, serving: false, terminating: true }),
  ];
  assert.deepEqual(ips(selectEndpoints(port, endpoints, NODE).cluster), [
    "10.244.1.11",
    "10.244.2.11",
  ]);
});

Deno.test("selectEndpoints() decides hints among ready endpoints only", () => {
  const endpoints = [
    ep("10.244.1.11", { zoneHints: ["zone-a"] }),
    ep("10.244.2.11", { zoneHints: ["zone-b"] }),
    ep("10.244.3.11", { ready: false, serving: true, terminating: true }),
  ];
  assert.deepEqual(ips(selectEndpoints(port, endpoints, NODE).cluster), ["10.244.1.11"]);
});
