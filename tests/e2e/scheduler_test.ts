/**
 * The schedulers in a real kernel (issue 21's "done when"): `source-hash` keeps a client on one
 * endpoint and spreads clients over endpoints, `round-robin` deals sequential connections
 * evenly, and ClientIP affinity still sticks with either. Clients are extra addresses of the
 * client namespace, each probe bound to one.
 *
 * @module
 */
import assert from "node:assert/strict";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { startProxy } from "./proxy_harness.ts";
import { ADDR, semanticsCluster } from "./semantics_cluster.ts";

const gate = await netnsTestGate();

/** The pod names `count` new connections from `source` to `target` reached, in order. */
async function reached(
  topo: Topology,
  target: string,
  count: number,
  sourceAddress?: string,
): Promise<string[]> {
  const results = await probe(topo, topo.client.ns, target, {
    count,
    timeoutMs: 5000,
    sourceAddress,
  });
  return results.map((r) => r.outcome === "ok" ? r.body : r.outcome);
}

/** How many times each pod name occurs. */
function tally(names: readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const name of names) counts.set(name, (counts.get(name) ?? 0) + 1);
  return counts;
}

/** Adds `count` client addresses 192.168.77.100… to the client namespace. */
async function addClients(topo: Topology, count: number): Promise<string[]> {
  const addresses = Array.from({ length: count }, (_, i) => `192.168.77.${100 + i}`);
  for (const address of addresses) {
    const r = await topo.exec(topo.client.ns, [
      "ip",
      "addr",
      "add",
      `${address}/24`,
      "dev",
      "eth0",
    ]);
    assert.equal(r.code, 0, r.stderr);
  }
  return addresses;
}

/** Runs `body` with the semantics cluster programmed by a proxy started with `args`. */
async function withProxy(args: string[], body: (topo: Topology) => Promise<void>): Promise<void> {
  const topo = await createTopology();
  try {
    const proxy = await startProxy(topo, semanticsCluster(topo), { args });
    try {
      await body(topo);
    } finally {
      await proxy.stop();
    }
  } finally {
    await topo.cleanup();
  }
}

Deno.test({
  name: "--scheduler=source-hash: one client always reaches one endpoint; 20 clients reach several",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withProxy(["--scheduler=source-hash"], async (topo) => {
      const target = `${ADDR.web}:80`;
      const one = await reached(topo, target, 50);
      assert.equal(one.length, 50);
      assert.deepEqual([...tally(one).keys()].length, 1, `one client: ${[...tally(one)]}`);
      assert.ok(topo.pods.some((p) => p.name === one[0]), one[0]);
      const clients = await addClients(topo, 20);
      const firsts: string[] = [];
      for (const client of clients) {
        const names = await reached(topo, target, 3, client);
        assert.equal(new Set(names).size, 1, `${client} moved: ${names}`);
        firsts.push(names[0]);
      }
      const spread = tally(firsts);
      assert.ok(
        spread.size >= 2 && firsts.every((n) => topo.pods.some((p) => p.name === n)),
        `20 clients: ${[...spread]}`,
      );
    });
  },
});

Deno.test({
  name: "--scheduler=round-robin: 30 sequential connections give each of 3 endpoints 10 ± 1",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    await withProxy(["--scheduler=round-robin"], async (topo) => {
      const names = await reached(topo, `${ADDR.web}:80`, 30);
      const counts = tally(names);
      assert.deepEqual([...counts.keys()].sort(), topo.pods.map((p) => p.name).sort());
      for (const [pod, count] of counts) {
        assert.ok(Math.abs(count - 10) <= 1, `${pod}: ${count} of 30 (${[...counts]})`);
      }
    });
  },
});

Deno.test({
  name: "ClientIP affinity sticks with every scheduler",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const topo = await createTopology();
    try {
      const clients = await addClients(topo, 3);
      for (const scheduler of ["random", "round-robin", "source-hash"]) {
        const proxy = await startProxy(topo, semanticsCluster(topo), {
          args: [`--scheduler=${scheduler}`],
        });
        try {
          for (const client of clients) {
            const names = await reached(topo, `${ADDR.sticky}:80`, 10, client);
            assert.equal(new Set(names).size, 1, `${scheduler}, ${client}: ${names}`);
            assert.ok(topo.pods.some((p) => p.name === names[0]), names[0]);
          }
          // IPv6 picks among per-endpoint chains (one vmap for round-robin and source-hash).
          const names6 = await reached(topo, `[${ADDR.sticky6}]:80`, 10);
          assert.equal(new Set(names6).size, 1, `${scheduler}, IPv6: ${names6}`);
          assert.ok(topo.pods.some((p) => p.name === names6[0]), names6[0]);
        } finally {
          await proxy.stop();
        }
      }
    } finally {
      await topo.cleanup();
    }
  },
});
