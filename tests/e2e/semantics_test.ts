/**
 * The data-plane semantics suite: one table of packet-flow cases, each a real connection from
 * an off-cluster client, a local pod or the node itself, through the rules the real proxy
 * programmed into a node namespace. Every row says where the connection must land (or that it
 * is refused or dropped) and whether the pod sees the true source or the node's address.
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { type RunningProxy, startProxy, waitForLines } from "./proxy_harness.ts";
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
  withProxy(["-v=4"], async (topo, proxy) => {
    const target = `${ADDR.web}:80`;
    assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
    // Intact rules are left alone: two checks (one a second) find them, and nothing is restored.
    await proxy.waitForLog(/our rules are intact/, 2);
    assert.doesNotMatch(proxy.output(), /removed or flushed/, "no restore while intact");
    const flushed = await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]);
    assert.equal(flushed.code, 0, flushed.stderr);
    // The next check notices, and the full sync it asks for brings the service back.
    await proxy.waitForLog(/removed or flushed by someone else; restoring them now/, 1);
    const restoring = proxy.output().lastIndexOf("restoring them now");
    await waitForLines(() => proxy.output().slice(restoring), /\bsynced fully: /, 1);
    assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
  }));

/** A TCP echo server (pod side); says when it listens. */
const ECHO_SERVER = `
const listener = Deno.listen({ port: 7777 });
console.log("listening");
for await (const conn of listener) conn.readable.pipeTo(conn.writable).catch(() => {});`;

/**
 * A client (client side) holding \`n\` TCP connections to \`target\`, each echoing a ping every
 * 20 ms until the file \`stop\` exists (at most 3 minutes). It says when all are connected,
 * keeps each connection's round-trip count in the file \`trips\` (JSON), and ends with one
 * JSON line: the counts and each connection's error ("" when none). A reply more than 10 s
 * late is an error.
 */
const ECHO_CLIENT = (target: string, n: number, files: { stop: string; trips: string }) => `
const [hostname, port] = ${JSON.stringify(target)}.split(":");
const conns = await Promise.all(
  Array.from({ length: ${n} }, () => Deno.connect({ hostname, port: Number(port) })),
);
console.log("connected " + conns.length);
const trips = conns.map(() => 0);
const errors = conns.map(() => "");
const stopped = () => { try { Deno.statSync(${
  JSON.stringify(files.stop)
}); return true; } catch { return false; } };
const end = Date.now() + 180_000;
const ping = new TextEncoder().encode("ping");
await Promise.all(conns.map(async (conn, i) => {
  const reader = conn.readable.getReader();
  try {
    while (!stopped() && Date.now() < end) {
      await conn.write(ping);
      let timer;
      const late = new Promise((_, reject) => timer = setTimeout(() => reject(new Error("no reply for 10 s")), 10_000));
      const { done } = await Promise.race([reader.read(), late]);
      clearTimeout(timer);
      if (done) throw new Error("closed by the other side");
      trips[i]++;
      Deno.writeTextFileSync(${JSON.stringify(files.trips)}, JSON.stringify(trips));
      await new Promise((r) => setTimeout(r, 20));
    }
  } catch (err) {
    errors[i] = String(err);
  }
}));
console.log(JSON.stringify({ trips, errors }));`;

/**
 * An \`nft\` stand-in for the proxy: it holds a transaction (\`-f FILE\`) naming \`marker\` while
 * the file \`hold\` exists, after writing its pid to \`held\` — so a test can see a sync in
 * flight and kill the proxy then; everything else goes straight to the real nft.
 */
async function holdingNft(dir: string, marker: string): Promise<string> {
  const nft = new TextDecoder().decode(
    (await new Deno.Command("sh", { args: ["-c", "command -v nft"], stdout: "piped" }).output())
      .stdout,
  ).trim();
  const path = `${dir}/nft`;
  await Deno.writeTextFile(
    path,
    `#!/bin/sh
if [ "$1" = "-f" ] && [ -e "${dir}/hold" ] && grep -q -F "${marker}" "$2"; then
  echo $$ > "${dir}/held.tmp" && mv "${dir}/held.tmp" "${dir}/held"
  i=0
  while [ -e "${dir}/hold" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
fi
exec ${nft} "$@"
`,
  );
  await Deno.chmod(path, 0o755);
  return path;
}

/** Polls until `check` returns a value other than undefined; throws after `timeoutMs`. */
async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const exists = (path: string) => Deno.stat(path).then(() => true, () => false);

test("a proxy killed with a sync in flight leaves the last rules working; a restart converges; flows keep their endpoints", async () => {
  gate.assertUsable();
  const topo = await createTopology();
  const dir = await Deno.makeTempDir({ prefix: "knp-kill-" });
  try {
    // Three long-lived TCP connections to an echo Service with an endpoint on every pod: they
    // land where the balancer sends them, and every one of them must survive.
    const echo = [
      service({ name: "echo", clusterIPs: ["10.96.0.78"], ports: [{ name: "tcp", port: 7777 }] }),
      endpointSlice({
        name: "echo-1",
        service: "echo",
        ports: [{ name: "tcp", port: 7777 }],
        endpoints: topo.pods.map((p) => p.ip4),
      }),
    ];
    const objects = [...semanticsCluster(topo), ...echo];
    const late = service({ name: "late", clusterIPs: ["10.96.0.77"] });
    const changed = [...objects, late];
    const first = await startProxy(topo, objects, {
      env: { KUBE_NFTPROXY_NFT: await holdingNft(dir, "10.96.0.77") },
    });
    const servers = topo.pods.map((p) =>
      topo.startProcess(p.ns, [Deno.execPath(), "eval", ECHO_SERVER])
    );
    await Promise.all(servers.map((server) => server.waitForOutput("listening", 30_000)));
    const files = { stop: `${dir}/stop`, trips: `${dir}/trips.json` };
    const client = topo.startProcess(topo.client.ns, [
      Deno.execPath(),
      "eval",
      ECHO_CLIENT("10.96.0.78:7777", 3, files),
    ]);
    await client.waitForOutput("connected 3", 30_000);
    const trips = async () => JSON.parse(await Deno.readTextFile(files.trips)) as number[];
    /** Waits until every connection made more round trips than `since` says. */
    const progress = (since: number[], what: string) =>
      until(what, async () => {
        const now = await trips().catch(() => since.map(() => 0));
        return now.every((t, i) => t > since[i]) ? now : undefined;
      });
    let seen = await progress([0, 0, 0], "round trips on every connection");

    // Established UDP flows (fixed source ports): conntrack keeps each on its endpoint.
    const target = `${ADDR.web}:80`;
    const flows = [40123, 40124, 40125].map((sourcePort) => ({
      proto: "udp" as const,
      sourcePort,
      timeoutMs: 2000,
    }));
    const endpointsOf = async (count: number) =>
      await Promise.all(
        flows.map(async (flow) =>
          (await probe(topo, topo.client.ns, target, { ...flow, count }))
            .map((r) => r.outcome === "ok" ? r.body : r.outcome)
        ),
      );
    const before = (await endpointsOf(1)).map(([body]) => body);
    assert.ok(before.every((b) => b.startsWith("pod-")), before.join());

    // A change reaches the proxy; its sync is held inside nft: kill the proxy right then.
    await Deno.writeTextFile(`${dir}/hold`, "");
    await Deno.writeTextFile(first.file, stringify(changed));
    const held = Number(
      await until("the sync to reach nft", async () => {
        if (!(await exists(`${dir}/held`))) return undefined;
        return (await Deno.readTextFile(`${dir}/held`)).trim();
      }),
    );
    Deno.kill(first.process.pid, "SIGKILL");
    await first.process.status;
    // The pod is gone with its nft child: the transaction never ran.
    Deno.kill(held, "SIGKILL");
    await until(
      "the held nft to end",
      async () => await exists(`/proc/${held}`) ? undefined : true,
    );
    await first.stop();
    const table = await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kube-nftproxy"]);
    assert.equal(table.code, 0, table.stderr);
    assert.doesNotMatch(table.stdout, /10\.96\.0\.77/, "nothing of the interrupted sync");

    // Without any proxy the last rules work: flows keep their endpoints, new connections land,
    // the TCP connections carry on.
    assert.deepEqual(await endpointsOf(3), before.map((b) => [b, b, b]));
    assert.equal((await probe(topo, topo.client.ns, target))[0].outcome, "ok");
    seen = await progress(seen, "round trips on every connection after the kill");

    // A restart converges (the late Service is programmed) and nothing moves.
    const second = await startProxy(topo, changed);
    try {
      const [lateResult] = await probe(topo, topo.client.ns, "10.96.0.77:80", {
        timeoutMs: 10_000,
      });
      assert.equal(lateResult.outcome, "refused", "the late Service (no endpoints) is programmed");
      assert.deepEqual(await endpointsOf(3), before.map((b) => [b, b, b]));
      await progress(seen, "round trips on every connection after the restart");
      await Deno.writeTextFile(files.stop, "");
      await client.status;
      const result = JSON.parse(client.output().trim().split("\n").pop()!);
      assert.deepEqual(result.errors, ["", "", ""], client.output());
      console.log(`long-lived TCP connections: ${result.trips.join(", ")} round trips, none lost`);
    } finally {
      await second.stop();
    }
  } finally {
    await topo.cleanup();
    await Deno.remove(dir, { recursive: true });
  }
});
