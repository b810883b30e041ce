import assert from "node:assert/strict";
import { ProxyState } from "../src/tracker/proxy_state.ts";
import {
  BENCH_SERVICE_CIDR,
  clusterEvents,
  extraEndpointIP,
  generateCluster,
  withExtraEndpoint,
} from "./cluster.ts";
import { cidrContains } from "../src/model/ip.ts";

function load(events: ReturnType<typeof clusterEvents>, hostname: string) {
  const refused: string[] = [];
  const state = new ProxyState({ hostname, log: (line) => refused.push(line) });
  events.forEach((e) => state.onEvent(e));
  const changes = state.takeChanges();
  return { state, changes, refused };
}

Deno.test("generateCluster() builds N services with M endpoints each that the proxy accepts", () => {
  const cluster = generateCluster({ services: 300, endpoints: 4 });
  const { state, changes, refused } = load(clusterEvents(cluster), cluster.nodeName);
  assert.deepEqual(refused, []);
  assert.equal(changes.changed.size, 300);
  assert.equal(state.services.size, 300);
  for (const endpoints of state.endpoints.values()) assert.equal(endpoints.length, 4);
  assert.deepEqual(state.serviceCIDRs, [BENCH_SERVICE_CIDR]);
});

Deno.test("generateCluster() is deterministic for a seed and differs across seeds", () => {
  const a = generateCluster({ services: 50, endpoints: 2, seed: 7 });
  const b = generateCluster({ services: 50, endpoints: 2, seed: 7 });
  const c = generateCluster({ services: 50, endpoints: 2, seed: 8 });
  assert.deepEqual(clusterEvents(a), clusterEvents(b));
  assert.notDeepEqual(a.services, c.services);
});

Deno.test("generateCluster() gives unique cluster IPs inside the service CIDR, outside its first /24", () => {
  const cluster = generateCluster({ services: 5000, endpoints: 1 });
  const ips = cluster.services.map((_, i) => cluster.clusterIP(i));
  assert.equal(new Set(ips).size, 5000);
  for (const ip of ips) {
    assert.ok(cidrContains(BENCH_SERVICE_CIDR, ip), ip);
    assert.ok(!ip.startsWith("10.96.0."), ip);
  }
});

Deno.test("generateCluster() gives every endpoint its own pod IP, some on the proxy's node", () => {
  const cluster = generateCluster({ services: 1000, endpoints: 10 });
  const { state } = load(clusterEvents(cluster), cluster.nodeName);
  const all = [...state.endpoints.values()].flat();
  assert.equal(new Set(all.map((e) => e.ip)).size, 10_000);
  const local = all.filter((e) => e.isLocal).length;
  assert.ok(local > 0 && local < all.length / 10, `${local} local endpoints`);
});

Deno.test("generateCluster() splits more than 100 endpoints into several slices", () => {
  const cluster = generateCluster({ services: 2, endpoints: 250 });
  assert.deepEqual(cluster.slices.map((s) => s.length), [3, 3]);
  const { state } = load(clusterEvents(cluster), cluster.nodeName);
  for (const endpoints of state.endpoints.values()) assert.equal(endpoints.length, 250);
});

Deno.test("generateCluster() applies the feature mix in the requested shares", () => {
  const cluster = generateCluster({
    services: 2000,
    endpoints: 1,
    mix: { nodePort: 0.2, loadBalancer: 0.1, clientIPAffinity: 0.5, udp: 0.25 },
  });
  const { state, refused } = load(clusterEvents(cluster), cluster.nodeName);
  assert.deepEqual(refused, []);
  const ports = [...state.services.values()];
  const share = (pred: (p: typeof ports[number]) => boolean) =>
    ports.filter(pred).length / ports.length;
  assert.ok(Math.abs(share((p) => p.type === "NodePort") - 0.2) < 0.04);
  assert.ok(Math.abs(share((p) => p.type === "LoadBalancer") - 0.1) < 0.04);
  assert.ok(Math.abs(share((p) => p.sessionAffinity !== null) - 0.5) < 0.05);
  assert.ok(Math.abs(share((p) => p.name.protocol === "UDP") - 0.25) < 0.05);
  assert.ok(ports.filter((p) => p.type !== "ClusterIP").every((p) => p.nodePort >= 30000));
  assert.ok(ports.filter((p) => p.type === "LoadBalancer").every((p) => p.loadBalancerIPs.length));
});

Deno.test("generateCluster() refuses sizes that do not fit its ranges", () => {
  assert.throws(() => generateCluster({ services: 0, endpoints: 1 }), RangeError);
  assert.throws(() => generateCluster({ services: 10, endpoints: 1, mix: { udp: 2 } }), RangeError);
  assert.throws(
    () => generateCluster({ services: 5000, endpoints: 1, mix: { nodePort: 1 } }),
    /node ports/,
  );
});

Deno.test("withExtraEndpoint() adds one ready endpoint that the tracker reports as a change", () => {
  const cluster = generateCluster({ services: 3, endpoints: 2 });
  const { state } = load(clusterEvents(cluster), cluster.nodeName);
  const before = cluster.slices[1][0];
  state.onEvent({
    kind: "EndpointSlice",
    previous: before,
    current: withExtraEndpoint(before, extraEndpointIP(0)),
  });
  const changes = state.takeChanges();
  assert.equal(changes.changed.size, 1);
  const [key] = changes.changed;
  assert.deepEqual(state.endpoints.get(key)?.map((e) => e.ip).at(-1), "10.255.0.0");
});
