/**
 * The data-plane semantics suite: one table of packet-flow cases, each a real connection from
 * an off-cluster client, a local pod or the node itself, through the rules the real proxy
 * programmed into a node namespace. Every row says where the connection must land (or that it
 * is refused or dropped) and whether the pod sees the true source or the node's address.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy } from "./proxy_harness.ts";
import { endpointSlice, service } from "../fixtures/objects.ts";
import { stringify } from "./yaml.ts";
import { ADDR, NODE_PORTS, semanticsCluster } from "./semantics_cluster.ts";
import { checkAll, DETECT_LOCAL_VARIANTS, flowCases, masqueradeCase } from "./semantics_cases.ts";

const gate = await netnsTestGate();

async function withProxy(
  args: string[],
  fn: (topo: Topology, proxy: RunningProxy) => Promise<void>,
): Promise<void> {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const proxy = await startProxy(topo, semanticsCluster(topo), { args });
    try {
      await fn(topo, proxy);
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
}

const test = (name: string, fn: () => Promise<void>) =>
  Deno.test({ name, ignore: gate.ignore, sanitizeOps: false, sanitizeResources: false, fn });

test("nft data plane: every service behaviour, from clients, pods and the node", () =>
  withProxy([], (topo) => checkAll(topo, flowCases(topo))));

test("masquerade: masqueradeAll masquerades pods too", () =>
  withProxy(
    ["--masquerade-all"],
    (topo) =>
      checkAll(topo, [
        masqueradeCase("pod-b", "masqueraded"),
        masqueradeCase("client", "masqueraded"),
      ]),
  ));

test("masquerade: with no local-traffic detector, off-cluster clients keep their address", () =>
  withProxy(
    ["--cluster-cidr="],
    (topo) =>
      checkAll(topo, [masqueradeCase("client", "preserved"), masqueradeCase("pod-b", "preserved")]),
  ));

for (const [mode, args] of DETECT_LOCAL_VARIANTS) {
  test(`masquerade: detect-local ${mode} tells pods from off-cluster clients`, () =>
    withProxy(
      [...args],
      (topo) =>
        checkAll(topo, [
          masqueradeCase("client", "masqueraded"),
          masqueradeCase("pod-b", "preserved"),
        ]),
    ));
}

test("masquerade: a configured mark bit is used and still masquerades", () =>
  withProxy(["--iptables-masquerade-bit=5"], async (topo) => {
    const table = await topo.exec(topo.node.ns, [
      "nft",
      "list",
      "chain",
      "ip",
      "kube-nftproxy",
      "mark-for-masquerade",
    ]);
    assert.match(table.stdout, /meta mark set meta mark \| 0x00000020/);
    await checkAll(topo, [masqueradeCase("client", "masqueraded")]);
  }));

test("NodePort on CIDR nodePortAddresses: served on the node's addresses inside the CIDR only", () =>
  withProxy(["--nodeport-addresses=10.244.1.0/24"], (topo) =>
    checkAll(topo, [
      {
        name: "a pod reaches the node port on the node's pod-network address",
        from: "pod-b",
        to: `10.244.1.1:${NODE_PORTS.nodePort}`,
        expect: { reach: ["pod-a", "pod-b"] },
      },
      {
        name: "the node's primary IP is outside the CIDR: no node port there",
        from: "client",
        to: `${topo.node.ip4}:${NODE_PORTS.nodePort}`,
        expect: { outcome: "refused" },
      },
    ])));

test("ClientIP affinity: a client stuck to a removed endpoint moves to a remaining one", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const objects = semanticsCluster(topo);
    const proxy = await startProxy(topo, objects);
    try {
      const target = `${ADDR.sticky}:80`;
      const [first] = await probe(topo, topo.client.ns, target);
      assert.equal(first.outcome, "ok");
      const stuck = first.outcome === "ok" ? first.body : "";
      const gone = topo.pods.find((p) => p.name === stuck)!;
      // The sticky service's IPv4 slice without the endpoint the client sticks to.
      await proxy.update(objects.map((o) => {
        const meta = o.metadata as { name?: string };
        if (o.kind !== "EndpointSlice" || meta.name !== "sticky-v4") return o;
        const endpoints = (o.endpoints as { addresses: string[] }[])
          .filter((e) => e.addresses[0] !== gone.ip4);
        return { ...o, endpoints };
      }));
      const after = (await probe(topo, topo.client.ns, target, { count: 10 }))
        .map((r) => r.outcome === "ok" ? r.body : r.outcome);
      assert.equal(new Set(after).size, 1, after.join());
      assert.notEqual(after[0], stuck, `still sent to the removed ${stuck}`);
      assert.ok(after[0].startsWith("pod-"), after.join());
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
});

test("self-healing: after `nft flush ruleset` on the node, the rules come back by themselves", () =>
  withProxy([], async (topo, proxy) => {
    const target = `${ADDR.web}:80`;
    assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
    // Intact rules are left alone: a few checks pass without a restore.
    await new Promise((r) => setTimeout(r, 2_500));
    assert.doesNotMatch(
      proxy.output(),
      /removed or flushed/,
      "no restore while the rules are intact",
    );
    const flushed = await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]);
    assert.equal(flushed.code, 0, flushed.stderr);
    const started = Date.now();
    let outcome = "";
    while (Date.now() - started < 8_000 && outcome !== "ok") {
      [{ outcome }] = await probe(topo, topo.client.ns, target, { timeoutMs: 300 });
    }
    assert.equal(outcome, "ok", "the service never came back");
    console.log(`rules restored ${Date.now() - started} ms after the flush`);
  }));

/** A TCP echo server (pod side) and a client that keeps one connection busy (client side). */
const ECHO_SERVER = `
const listener = Deno.listen({ port: 7777 });
for await (const conn of listener) conn.readable.pipeTo(conn.writable).catch(() => {});`;
const ECHO_CLIENT = (target: string, ms: number) => `
const [hostname, port] = ${JSON.stringify(target)}.split(":");
const conn = await Deno.connect({ hostname, port: Number(port) });
const reader = conn.readable.getReader();
const encoder = new TextEncoder();
let trips = 0;
const end = Date.now() + ${ms};
try {
  while (Date.now() < end) {
    await conn.write(encoder.encode("ping"));
    const timeout = setTimeout(() => { console.log(JSON.stringify({ trips, error: "stalled" })); Deno.exit(1); }, 2000);
    const { done } = await reader.read();
    clearTimeout(timeout);
    if (done) throw new Error("closed");
    trips++;
    await new Promise((r) => setTimeout(r, 20));
  }
  console.log(JSON.stringify({ trips }));
} catch (err) {
  console.log(JSON.stringify({ trips, error: String(err) }));
}`;

test("a proxy killed mid-sync leaves working rules; a restart converges and keeps flows", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  try {
    const echo = [
      service({ name: "echo", clusterIPs: ["10.96.0.78"], ports: [{ name: "tcp", port: 7777 }] }),
      endpointSlice({
        name: "echo-1",
        service: "echo",
        ports: [{ name: "tcp", port: 7777 }],
        endpoints: [topo.pods[0].ip4],
      }),
    ];
    const objects = [...semanticsCluster(topo), ...echo];
    const first = await startProxy(topo, objects);
    const target = `${ADDR.web}:80`;
    // A long-lived TCP connection through a Service, busy for the whole crash and restart.
    topo.startProcess(topo.pods[0].ns, [Deno.execPath(), "eval", ECHO_SERVER]);
    await new Promise((r) => setTimeout(r, 500));
    const client = topo.startProcess(topo.client.ns, [
      Deno.execPath(),
      "eval",
      ECHO_CLIENT("10.96.0.78:7777", 4000),
    ]);
    // An established UDP flow (fixed source port): conntrack keeps its endpoint.
    const flow = { proto: "udp" as const, sourcePort: 40123, timeoutMs: 1000 };
    const [before] = await probe(topo, topo.client.ns, target, flow);
    assert.equal(before.outcome, "ok");
    // Start a sync (a changed file) and kill the proxy without warning while it runs.
    const changed = [...objects, service({ name: "late", clusterIPs: ["10.96.0.77"] })];
    await Deno.writeTextFile(first.file, stringify(changed));
    // The file source notices within ~100 ms (debounce) and syncs: kill around that moment.
    await new Promise((r) => setTimeout(r, 110));
    Deno.kill(first.process.pid, "SIGKILL");
    await first.stop();
    // Rules still work without any proxy: the flow keeps its endpoint, new connections land.
    const during = await probe(topo, topo.client.ns, target, { ...flow, count: 5 });
    assert.deepEqual(
      during.map((r) => r.outcome === "ok" ? r.body : r.outcome),
      Array(5).fill(
        before.outcome === "ok" ? before.body : "",
      ),
    );
    assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
    // A restart converges (the late Service is served) and the flow is still on its endpoint.
    const second = await startProxy(topo, changed);
    try {
      const [late] = await probe(topo, topo.client.ns, "10.96.0.77:80", { timeoutMs: 2000 });
      assert.equal(late.outcome, "refused", "the late Service (no endpoints) is programmed");
      const after = await probe(topo, topo.client.ns, target, { ...flow, count: 5 });
      assert.deepEqual(
        after.map((r) => r.outcome === "ok" ? r.body : r.outcome),
        Array(5).fill(
          before.outcome === "ok" ? before.body : "",
        ),
      );
      await client.status;
      const result = JSON.parse(client.output().trim().split("\n").pop()!);
      assert.equal(result.error, undefined, client.output());
      assert.ok(result.trips > 20, client.output());
      console.log(`long-lived TCP connection: ${result.trips} round trips, none lost`);
    } finally {
      await second.stop();
    }
  } finally {
    await topo.cleanup();
  }
});
