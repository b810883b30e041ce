/**
 * `trace` on a node running the proxy: real connections from the client namespace (and a pod)
 * are traced by `main.ts trace` running in the node namespace, and each traced connection must
 * name what the kernel really did — the endpoint that answered, masquerading, the rule that
 * rejected or dropped, another table that dropped first — and agree with `explain` for the
 * same flow. After every trace no trace table is left, also after `trace` was SIGKILLed and the
 * daemon did one full sync; and a full sync during a live trace leaves that trace working.
 */
import assert from "node:assert/strict";
import { explainCommand } from "../../src/explain/command.ts";
import type { Explanation } from "../../src/explain/explain.ts";
import type { RawObject } from "../../src/source/events.ts";
import type { TracedConnection } from "../../src/trace/command.ts";
import { NODE_NAME, POD_CIDR_V4, POD_CIDR_V6 } from "../fixtures/ip_plan.ts";
import { node } from "../fixtures/objects.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type Topology } from "../netns/topology.ts";
import { cacheProxyDependencies, MAIN, type RunningProxy, startProxy } from "./proxy_harness.ts";
import { ADDR, NODE_PORTS, semanticsCluster } from "./semantics_cluster.ts";
import { stringify } from "./yaml.ts";

const gate = await netnsTestGate();

/** A `trace` process in the node namespace, its JSON lines collected. */
interface RunningTrace {
  readonly pid: number;
  readonly connections: TracedConnection[];
  /** Resolves with the exit code once it ended. */
  readonly finished: Promise<number>;
  output(): string;
}

async function startTrace(topo: Topology, args: string[]): Promise<RunningTrace> {
  await cacheProxyDependencies();
  const connections: TracedConnection[] = [];
  const process = topo.startProcess(
    topo.node.ns,
    [Deno.execPath(), "run", "--cached-only", "-A", MAIN, "trace", "--output=json", ...args],
    {
      env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
      onLine: (line) => {
        if (line.startsWith("{")) connections.push(JSON.parse(line));
      },
    },
  );
  await process.waitForOutput("tracing new connections", 60_000);
  return {
    pid: process.pid,
    connections,
    finished: process.status.then((s) => s.code),
    output: () => process.output(),
  };
}

/** Traces `count` connections while `traffic` runs; asserts the trace ended cleanly. */
async function traceWhile(
  topo: Topology,
  args: string[],
  traffic: () => Promise<void>,
): Promise<TracedConnection[]> {
  const trace = await startTrace(topo, [...args, "--timeout=60s"]);
  await traffic();
  assert.equal(await trace.finished, 0, trace.output());
  await assertNoTraceTable(topo);
  return trace.connections;
}

async function traceTables(topo: Topology): Promise<string[]> {
  const r = await topo.exec(topo.node.ns, ["nft", "list", "tables"]);
  return r.stdout.split("\n").filter((l) => l.includes("-trace"));
}

async function assertNoTraceTable(topo: Topology): Promise<void> {
  assert.deepEqual(await traceTables(topo), [], "a trace table was left behind");
}

async function explain(yaml: string, from: string, to: string) {
  const out: string[] = [];
  const code = await explainCommand([
    `--from=${from}`,
    `--to=${to}`,
    "--output=json",
    "--from-file=cluster.yaml",
    `--hostname-override=${NODE_NAME}`,
    `--cluster-cidr=${POD_CIDR_V4},${POD_CIDR_V6}`,
  ], {
    readTextFile: () => Promise.resolve(yaml),
    print: (text) => out.push(text),
    printError: () => {},
  });
  assert.equal(code, 0);
  return JSON.parse(out.join("")) as Explanation;
}

/** `trace` and `explain` agree on the verdict, the Service port, masquerading, endpoints. */
function assertAgree(c: TracedConnection, e: Explanation): void {
  const said = `trace ${JSON.stringify(c)}\nexplain ${JSON.stringify(e)}`;
  const verdict = { dnat: "accepted", reject: "rejected", drop: "dropped", "no-match": "?" };
  assert.equal(c.verdict, verdict[e.verdict], said);
  assert.equal(c.servicePort, e.servicePort, said);
  if (e.verdict !== "dnat") return;
  assert.equal(c.masquerade, e.masquerade, said);
  assert.ok(
    e.endpoints.some((ep) => ep.ip === c.endpoint?.ip && ep.port === c.endpoint?.port),
    said,
  );
}

function podOf(topo: Topology, ip: string | undefined): string {
  return topo.pods.find((p) => p.ip4 === ip || p.ip6 === ip)?.name ?? `unknown ${ip}`;
}

/** Sends `count` TCP connections and returns the pods that answered, in order. */
async function answered(topo: Topology, from: string, to: string, count: number) {
  const results = await probe(topo, from, to, { count, timeoutMs: 3000 });
  return results.map((r) => (r.outcome === "ok" ? r.body : r.outcome));
}

Deno.test({
  name: "trace names what the kernel did with real connections, agreeing with explain",
  ignore: gate.ignore,
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async (t) => {
    const topo = await createTopology();
    let proxy: RunningProxy | undefined;
    try {
      const objects = semanticsCluster(topo);
      const yaml = stringify(objects);
      proxy = await startProxy(topo, objects);
      const client = topo.client.ns;

      await t.step(
        "a ClusterIP with 3 endpoints: the traced endpoint is the pod that answered",
        async () => {
          for (
            const [to, src] of [[`${ADDR.web}:80`, topo.client.ip4], [
              `[${ADDR.web6}]:80`,
              topo.client.ip6!,
            ]]
          ) {
            let pods: string[] = [];
            const traced = await traceWhile(topo, [`--to=${to}`, "--count=6"], async () => {
              pods = await answered(topo, client, to, 6);
            });
            assert.equal(traced.length, 6);
            assert.deepEqual(traced.map((c) => podOf(topo, c.endpoint?.ip)), pods);
            const e = await explain(yaml, src, `${to}/tcp`);
            for (const c of traced) {
              assert.equal(c.endpoint?.from, "conntrack");
              assert.deepEqual(c.hooks, ["prerouting", "forward", "postrouting"]);
              assert.ok(
                c.chains.some((p) => p.chain === "services" && p.rule?.includes("@service-ips")),
              );
              assert.equal(c.masquerade, true, "an off-cluster client to a cluster IP");
              assert.match(c.masqueradeReason ?? "", /a source that is not a pod/);
              assert.equal(c.sourceRewritten, true);
              assertAgree(c, e);
            }
          }
        },
      );

      await t.step("the node's own connections: output hook, the pod that answered", async () => {
        const to = `${ADDR.web}:80`;
        let pods: string[] = [];
        const traced = await traceWhile(topo, [`--to=${to}`, "--count=3"], async () => {
          pods = await answered(topo, topo.node.ns, to, 3);
        });
        assert.deepEqual(traced.map((c) => podOf(topo, c.endpoint?.ip)), pods);
        for (const c of traced) {
          assert.deepEqual(c.hooks, ["output", "postrouting"]);
          assert.equal(c.servicePort, "default/web:http");
        }
      });

      await t.step(
        "a NodePort with externalTrafficPolicy Local: the local endpoint, not masqueraded",
        async () => {
          const to = `${topo.node.ip4}:${NODE_PORTS.nodePortLocal}`;
          let pods: string[] = [];
          const traced = await traceWhile(topo, [`--to=${to}`, "--count=3"], async () => {
            pods = await answered(topo, client, to, 3);
          });
          assert.deepEqual(pods, ["pod-a", "pod-a", "pod-a"]);
          assert.equal(traced.length, 3);
          const e = await explain(yaml, topo.client.ip4, `${to}/tcp`);
          for (const c of traced) {
            assert.equal(podOf(topo, c.endpoint?.ip), "pod-a");
            assert.equal(c.masquerade, false);
            assert.equal(c.sourceRewritten, false);
            assert.equal(c.servicePort, "default/node-port-local:http");
            assertAgree(c, e);
          }
        },
      );

      await t.step("a Service without endpoints: rejected, by the rule named", async () => {
        const to = `${ADDR.empty}:80`;
        const traced = await traceWhile(topo, [`--to=${to}`, "--count=1"], async () => {
          assert.deepEqual(await answered(topo, client, to, 1), ["refused"]);
        });
        const [c] = traced;
        assert.equal(c.verdict, "rejected");
        assert.equal(c.decidedBy?.ours, true);
        assert.equal(c.decidedBy?.chain, "reject-chain");
        assert.ok(
          c.chains.some((p) =>
            p.chain === "service-endpoints-check" && p.verdict === "goto reject-chain"
          ),
          JSON.stringify(c.chains),
        );
        assertAgree(c, await explain(yaml, topo.client.ip4, `${to}/tcp`));
      });

      await t.step("a LoadBalancer IP from outside loadBalancerSourceRanges: dropped", async () => {
        const to = `${ADDR.lbDeniedIP}:80`;
        const traced = await traceWhile(topo, [`--to=${to}`, "--count=1"], async () => {
          assert.deepEqual(await answered(topo, client, to, 1), ["timeout"]);
        });
        const [c] = traced;
        assert.equal(c.verdict, "dropped");
        assert.equal(c.decidedBy?.chain, "firewall-check");
        assert.equal(c.servicePort, "default/lb-denied:http");
        assertAgree(c, await explain(yaml, topo.client.ip4, `${to}/tcp`));
      });

      await t.step("a packet dropped by another table before ours is named as such", async () => {
        const to = `${ADDR.externalIP}:80`;
        await topo.exec(topo.node.ns, ["nft", "-f", "-"], {
          stdin: "table inet knp-firewall {\n" +
            "  chain pre { type filter hook prerouting priority -150; policy accept;\n" +
            `    ip daddr ${ADDR.externalIP} tcp dport 80 drop\n  }\n}\n`,
        });
        try {
          const traced = await traceWhile(topo, [`--to=${to}`, "--count=1"], async () => {
            assert.deepEqual(await answered(topo, client, to, 1), ["timeout"]);
          });
          const [c] = traced;
          assert.equal(c.verdict, "dropped");
          assert.equal(c.decidedBy?.ours, false);
          assert.equal(c.decidedBy?.table, "inet knp-firewall");
          assert.deepEqual(c.foreignTables, ["inet knp-firewall"]);
          assert.ok(!c.chains.some((p) => p.ours), "it never reached our chains");
        } finally {
          await topo.exec(topo.node.ns, ["nft", "delete", "table", "inet", "knp-firewall"]);
        }
      });

      await t.step(
        "a full sync leaves a live trace; after SIGKILL it removes the leftover",
        async () => {
          const to = `${ADDR.web}:80`;
          const trace = await startTrace(topo, [`--to=${to}`, "--count=2", "--timeout=120s"]);
          const withZone = (zone: string): RawObject[] =>
            objects.map((o) =>
              o.kind === "Node"
                ? node("node-a", {
                  ips: [topo.node.ip4, topo.node.ip6!],
                  zone,
                  podCIDRs: ["10.244.1.0/24", "fd00:10:244:1::/64"],
                })
                : o
            );
          const fullSyncs = () => (proxy!.output().match(/synced fully/g) ?? []).length;
          let before = fullSyncs();
          await proxy!.update(withZone("zone-b"));
          assert.ok(fullSyncs() > before, "a node change is a full sync");
          assert.equal((await traceTables(topo)).length, 1, "a full sync keeps a live trace");
          const pods = await answered(topo, client, to, 1);
          await waitFor(() => trace.connections.length === 1, 20_000);
          assert.equal(podOf(topo, trace.connections[0].endpoint?.ip), pods[0]);

          Deno.kill(trace.pid, "SIGKILL");
          await trace.finished;
          assert.equal((await traceTables(topo)).length, 1, "SIGKILL leaves the table");
          before = fullSyncs();
          await proxy!.update(withZone("zone-a"));
          assert.ok(fullSyncs() > before);
          await assertNoTraceTable(topo);
        },
      );

      await t.step(
        "the next trace replaces a killed one's table; SIGTERM removes its own",
        async () => {
          const args = [`--to=${ADDR.web}:80`, "--count=5", "--timeout=120s"];
          const killed = await startTrace(topo, args);
          Deno.kill(killed.pid, "SIGKILL");
          await killed.finished;
          assert.equal((await traceTables(topo)).length, 1);
          const next = await startTrace(topo, args);
          const listing = await topo.exec(topo.node.ns, [
            "nft",
            "list",
            "table",
            "inet",
            "kube-nftproxy-trace",
          ]);
          assert.match(listing.stdout, new RegExp(`pid=${next.pid} `), "the new trace owns it");
          Deno.kill(next.pid, "SIGTERM");
          assert.equal(await next.finished, 0, next.output());
          await assertNoTraceTable(topo);
        },
      );
    } finally {
      await proxy?.stop();
      await topo.cleanup();
    }
  },
});

async function waitFor(ok: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms in vain`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
