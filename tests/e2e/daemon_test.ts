/**
 * End-to-end specs of the daemon (`main.ts` without `--from-file`): the real proxy, started from
 * kubeadm's kube-proxy ConfigMap, watches a test API server that speaks the real list/watch
 * protocol, and real packets in a namespace topology follow every change made through the API —
 * through dropped watches, stalls, 500s, 410 Gone and a killed server; `/healthz` follows the
 * syncs and `/metrics` shows upstream's metrics.
 *
 * Where things run: the test API server runs inside the node namespace, on its own 127.0.0.1
 * (see `namespaced_api_server.ts`), because a process in a namespace cannot reach the machine's
 * loopback and nothing may be added to the machine's namespace. The same helper fetches
 * `/healthz`, `/metrics` and health-check node ports from inside the namespace.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import { NODE_NAME, SERVICE_CIDR_V4, SERVICE_CIDR_V6 } from "../fixtures/ip_plan.ts";
import { netnsTestGate } from "../netns/netns.ts";
import { createTopology, probe, type ProbeResult, type Topology } from "../netns/topology.ts";
import type { ObjectKind, RawObject } from "../../src/source/events.ts";
import {
  type FetchResult,
  type NamespacedApiServer,
  startNamespacedApiServer,
} from "./namespaced_api_server.ts";
import { MAIN, type RunningDaemon, startDaemon } from "./proxy_harness.ts";

const gate = await netnsTestGate();

const KUBEADM_CONFIGMAP = fileURLToPath(
  new URL("../fixtures/kubeadm-kube-proxy-configmap.yaml", import.meta.url),
);
const CLUSTER_FILE = fileURLToPath(
  new URL("../fixtures/file-source-cluster.yaml", import.meta.url),
);

/**
 * How long a change made through the API may take to reach the kernel after a fault before the
 * test gives up: a bound on a wait, generous for a loaded machine, not a figure the proxy must
 * meet (bench/ measures those).
 */
const CONVERGE_MS = 60_000;
/** The health server's default address (the ConfigMap leaves it empty) and the metrics one. */
const HEALTHZ = "http://127.0.0.1:10256";
const METRICS = "http://127.0.0.1:10249/metrics";

/** Polls `check` every 100 ms until it returns true; throws with `what` after `timeoutMs`. */
async function eventually(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = CONVERGE_MS,
): Promise<number> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return Date.now() - started;
}

function bodies(results: ProbeResult[]): string[] {
  return results.map((r) => (r.outcome === "ok" ? r.body : r.outcome));
}

function status(result: FetchResult): number | string {
  return "status" in result ? result.status : result.error;
}

function bodyOf(result: FetchResult): string {
  if ("error" in result) throw new Error(`fetch failed: ${result.error}`);
  return result.body;
}

/** One sample of the Prometheus text (`name{labels} value`), or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** A Service with one TCP port 80 → pods' 8080, and its EndpointSlice. */
function web(name: string, ip: string, pods: { ip4: string; nodeName?: string }[]): RawObject[] {
  return [
    service({ name, clusterIPs: [ip] }),
    endpointSlice({
      name: `${name}-1`,
      service: name,
      endpoints: pods.map((p) => ({ ip: p.ip4, nodeName: p.nodeName ?? NODE_NAME })),
    }),
  ];
}

async function kubeconfig(dir: string, server: string): Promise<string> {
  const path = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    path,
    `apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster: {server: "${server}"}
users:
  - name: kube-proxy
    user: {token: test-token}
contexts:
  - name: test
    context: {cluster: test, user: kube-proxy}
current-context: test
`,
  );
  return path;
}

/**
 * An `nft` wrapper the daemon runs instead of `nft` (`KUBE_NFTPROXY_NFT`): it fails while the
 * file `fail` exists next to it, and runs the real `nft` otherwise.
 */
async function nftWrapper(
  dir: string,
): Promise<{ path: string; fail(on: boolean): Promise<void> }> {
  const path = `${dir}/nft`;
  const marker = `${dir}/fail`;
  await Deno.writeTextFile(
    path,
    `#!/bin/sh\nif [ -e '${marker}' ]; then echo 'Error: injected by the test' >&2; exit 1; fi\n` +
      `exec nft "$@"\n`,
  );
  await Deno.chmod(path, 0o755);
  return {
    path,
    fail: (on) => on ? Deno.writeTextFile(marker, "") : Deno.remove(marker),
  };
}

Deno.test({
  name: "daemon: from kubeadm's ConfigMap, against the API server, traffic follows every change",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn(t) {
    gate.assertUsable();
    const topo: Topology = await createTopology();
    const dir = await Deno.makeTempDir({ prefix: "knp-daemon-" });
    let daemon: RunningDaemon | undefined;
    let apiServer: NamespacedApiServer | undefined;
    try {
      const api = apiServer = await startNamespacedApiServer(topo.node.ns);
      const [podA, podB, podC] = topo.pods;
      await api.create("Node", node(NODE_NAME, { ips: [topo.node.ip4, topo.node.ip6!] }));
      await api.create(
        "ServiceCIDR",
        serviceCIDR("kubernetes", [SERVICE_CIDR_V4, SERVICE_CIDR_V6]),
      );
      for (const object of web("web", "10.96.0.10", [podA, podB])) {
        await api.create(object.kind as ObjectKind, object);
      }
      const nft = await nftWrapper(dir);
      const kubeconfigPath = await kubeconfig(dir, api.url);
      daemon = await startDaemon(topo, {
        // What kubeadm's DaemonSet passes, plus the test's API server and short sync periods.
        args: [
          "--mode=nft",
          `--config=${KUBEADM_CONFIGMAP}`,
          `--hostname-override=${NODE_NAME}`,
          `--kubeconfig=${kubeconfigPath}`,
          "--nftables-sync-period=1s",
          "--nftables-min-sync-period=50ms",
          // -v=4 logs every sync, the empty periodic ones too: the faults below wait for them.
          "-v=4",
        ],
        env: { KUBE_NFTPROXY_NFT: nft.path },
      });
      const proxy = daemon;
      const ruleset = async () =>
        (await topo.exec(topo.node.ns, ["nft", "list", "table", "ip", "kube-nftproxy"])).stdout;
      const reaches = async (target: string, expected: string[], count = 12) => {
        const seen = bodies(await probe(topo, topo.client.ns, target, { count, timeoutMs: 500 }));
        return seen.every((b) => expected.includes(b)) &&
          expected.every((name) => seen.includes(name));
      };

      await t.step(
        "the kubeadm ConfigMap loads unchanged and the daemon serves its defaults",
        async () => {
          assert.match(proxy.output(), /watching the API server at http:\/\/127\.0\.0\.1:/);
          assert.equal(status(await api.fetch(`${HEALTHZ}/healthz`)), 200);
          assert.equal(status(await api.fetch(`${HEALTHZ}/livez`)), 200);
          assert.equal(status(await api.fetch(METRICS)), 200);
        },
      );

      await t.step("a Service created through the API is reachable on its endpoints", async () => {
        await eventually(
          "web reaches pod-a and pod-b",
          () => reaches("10.96.0.10:80", [podA.name, podB.name]),
        );
        // The first sync was written over netlink (nft_batch.ts), not handed to nft -f instead.
        assert.doesNotMatch(proxy.output(), /not over netlink/);
        const tables = (await topo.exec(topo.node.ns, ["nft", "list", "tables"])).stdout;
        assert.doesNotMatch(tables, /stage/, "the stage table is gone");
      });

      await t.step(
        "an endpoint removed from the EndpointSlice gets no new connections",
        async () => {
          await api.update("EndpointSlice", web("web", "10.96.0.10", [podA])[1]);
          await eventually("web reaches pod-a only", () => reaches("10.96.0.10:80", [podA.name]));
          assert.ok(await reaches("10.96.0.10:80", [podA.name], 30));
        },
      );

      await t.step(
        "an endpoint added to the EndpointSlice starts receiving connections",
        async () => {
          await api.update("EndpointSlice", web("web", "10.96.0.10", [podA, podC])[1]);
          await eventually(
            "web reaches pod-a and pod-c",
            () => reaches("10.96.0.10:80", [podA.name, podC.name]),
          );
        },
      );

      await t.step(
        "explain --live and --dry-run read the cluster from the API and agree with the kernel",
        async () => {
          const tool = async (args: string[]) => {
            const out = await topo.exec(topo.node.ns, [
              Deno.execPath(),
              "run",
              "--cached-only",
              "-A",
              MAIN,
              ...args,
              `--config=${KUBEADM_CONFIGMAP}`,
              `--hostname-override=${NODE_NAME}`,
              `--kubeconfig=${kubeconfigPath}`,
              "--healthz-bind-address=",
              "--metrics-bind-address=",
            ], { timeoutMs: 60_000 });
            assert.equal(out.code, 0, out.stderr);
            return out.stdout;
          };
          const explained = await tool([
            "explain",
            `--from=${topo.client.ip4}`,
            "--to=10.96.0.10:80/tcp",
            "--live",
          ]);
          assert.match(explained, /^verdict: +dnat$/m);
          assert.match(
            explained,
            new RegExp(`^  ${podA.ip4.replaceAll(".", "\\.")}:\\d+ +50\\.0%$`, "m"),
          );
          assert.match(
            explained,
            new RegExp(`^  ${podC.ip4.replaceAll(".", "\\.")}:\\d+ +50\\.0%$`, "m"),
          );
          assert.match(explained, /^kernel: +the live rules are these/m);
          assert.match(await tool(["--dry-run"]), /^# no change: /m);
        },
      );

      await t.step(
        "a deleted Service stops answering (its IP is dropped as unallocated)",
        async () => {
          await api.delete("Service", { namespace: "default", name: "web" });
          await eventually("web is gone", async () => {
            const [r] = await probe(topo, topo.client.ns, "10.96.0.10:80", { timeoutMs: 500 });
            return r.outcome !== "ok";
          });
          assert.doesNotMatch(await ruleset(), /10\.96\.0\.10/);
        },
      );

      await t.step(
        "a health-check node port follows its LoadBalancer's local endpoints",
        async () => {
          const lb = service({
            name: "lb",
            type: "LoadBalancer",
            clusterIPs: ["10.96.0.30"],
            ports: [{ name: "http", port: 80, nodePort: 30080 }],
            spec: { externalTrafficPolicy: "Local", healthCheckNodePort: 30300 },
          });
          const lbSlice = (nodeName: string) =>
            endpointSlice({
              name: "lb-1",
              service: "lb",
              endpoints: [{ ip: podA.ip4, nodeName }],
            });
          await api.create("Service", lb);
          await api.create("EndpointSlice", lbSlice(NODE_NAME));
          const probeUrl = `http://${topo.node.ip4}:30300/`;
          let answer = { error: "not asked" } as FetchResult;
          await eventually("the health-check port answers 200", async () => {
            answer = await api.fetch(probeUrl);
            return status(answer) === 200;
          });
          assert.deepEqual(JSON.parse(bodyOf(answer)), {
            service: { namespace: "default", name: "lb" },
            localEndpoints: 1,
            serviceProxyHealthy: true,
          });
          await api.update("EndpointSlice", lbSlice("node-b"));
          await eventually(
            "the health-check port answers 503 without a local endpoint",
            async () => {
              answer = await api.fetch(probeUrl);
              return status(answer) === 503;
            },
          );
          assert.equal(JSON.parse(bodyOf(answer)).localEndpoints, 0);
          await api.delete("Service", lb);
          await eventually(
            "the health-check port closes with its Service",
            async () => "error" in await api.fetch(probeUrl),
          );
        },
      );

      // Each fault: inject it, create a Service and its EndpointSlice through the API, clear it,
      // and see both in the kernel within CONVERGE_MS: the service's first endpoint element
      // (`IP . tcp . 80 . 0`) exists only once both have arrived. One cluster IP per fault.
      const createService = async (name: string, ip: string) => {
        for (const object of web(name, ip, [podA])) {
          await api.create(object.kind as ObjectKind, object);
        }
      };
      const programmed = async (ip: string) => (await ruleset()).includes(`${ip} . tcp . 80 . 0`);
      /** Waits for the next sync the proxy logs (a periodic one at least every second). */
      const nextSync = async () => {
        const from = proxy.output().length;
        await eventually(
          "a sync",
          () => Promise.resolve(/\bsynced (fully|partially): /.test(proxy.output().slice(from))),
        );
      };
      const faults: [string, string, (ip: string) => Promise<void>][] = [
        ["dropped watches", "10.96.0.41", async (ip) => {
          await api.dropWatches();
          await createService("after-drop", ip);
        }],
        ["a stalled API server", "10.96.0.42", async (ip) => {
          await api.stall();
          await createService("after-stall", ip);
          // The proxy goes on syncing, without the change the server holds back.
          await nextSync();
          assert.equal(await programmed(ip), false, "nothing arrives during the stall");
          await api.release();
        }],
        ["500 answers", "10.96.0.43", async (ip) => {
          await api.failNext(8, { status: 500 });
          await api.dropWatches();
          await createService("after-500s", ip);
          await eventually(
            "the proxy saw the 500s",
            () => Promise.resolve(/injected failure \(500\)/.test(proxy.output())),
          );
        }],
        ["410 Gone after compaction", "10.96.0.44", async (ip) => {
          // The watches break, the change lands, and the history behind the proxy's
          // resourceVersions is compacted away before it watches again — certainly, since the
          // stalled server holds its new watches until then: only a relist can bring the change.
          const logged = proxy.output().length;
          await api.stall();
          await api.dropWatches();
          await createService("after-410", ip);
          await api.compact();
          await api.release();
          await eventually("the proxy relisted Services and EndpointSlices", () => {
            const log = proxy.output().slice(logged);
            return Promise.resolve(
              /Service watch from resourceVersion \d+ expired; listing again/.test(log) &&
                /EndpointSlice watch from resourceVersion \d+ expired; listing again/.test(log),
            );
          });
        }],
        ["a killed and restarted API server", "10.96.0.45", async (ip) => {
          const logged = proxy.output().length;
          await api.kill();
          await createService("after-restart", ip);
          // The proxy notices (a failed reconnect) and goes on syncing without the change.
          await eventually(
            "the proxy to retry",
            () => Promise.resolve(/; retrying in \d+ ms/.test(proxy.output().slice(logged))),
          );
          await nextSync();
          assert.equal(await programmed(ip), false, "nothing arrives while the server is down");
          await api.restart();
        }],
      ];
      for (const [fault, ip, inject] of faults) {
        await t.step(
          `a change made around ${fault} reaches the kernel once it clears`,
          async () => {
            await inject(ip);
            await eventually(
              `${ip} and its endpoint in the ruleset after ${fault}`,
              () => programmed(ip),
            );
          },
        );
      }

      await t.step("traffic still follows the API after every fault", async () => {
        for (const object of web("again", "10.96.0.50", [podB, podC])) {
          await api.create(object.kind as ObjectKind, object);
        }
        await eventually(
          "again reaches pod-b and pod-c",
          () => reaches("10.96.0.50:80", [podB.name, podC.name]),
        );
      });

      await t.step("/healthz turns 503 while syncs fail and 200 once one succeeds", async () => {
        await nft.fail(true);
        await api.create(
          "Service",
          service({ name: "during-failure", clusterIPs: ["10.96.0.60"] }),
        );
        // Unhealthy once the change has waited 2 × syncPeriod (2 s) without a successful sync.
        await eventually(
          "/healthz 503",
          async () => status(await api.fetch(`${HEALTHZ}/healthz`)) === 503,
        );
        assert.equal(status(await api.fetch(`${HEALTHZ}/livez`)), 503);
        const failing = await api.fetch(METRICS);
        assert.ok(
          sample(
            bodyOf(failing),
            'kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family="IPv4"}',
          )! >= 1,
        );
        await nft.fail(false);
        await eventually(
          "/healthz 200",
          async () => status(await api.fetch(`${HEALTHZ}/healthz`)) === 200,
        );
        assert.match(await ruleset(), /10\.96\.0\.60/);
      });

      await t.step("/metrics shows upstream's metrics with plausible values", async () => {
        await api.create(
          "Service",
          service({ name: "broken", clusterIPs: ["10.96.0.300"] }),
        );
        let text = "";
        await eventually("the rejection is counted", async () => {
          text = bodyOf(await api.fetch(METRICS));
          return sample(
            text,
            'kubenftproxy_objects_rejected_total{kind="Service",reason="spec.clusterIPs"}',
          ) === 1;
        });
        const value = (series: string) => sample(text, series) ?? NaN;
        const v4 = (name: string) => `${name}{ip_family="IPv4"}`;
        assert.ok(value(v4("kubeproxy_sync_proxy_rules_duration_seconds_count")) >= 10);
        assert.ok(value(v4("kubeproxy_sync_full_proxy_rules_duration_seconds_count")) >= 2);
        assert.ok(value(v4("kubeproxy_sync_partial_proxy_rules_duration_seconds_count")) >= 5);
        assert.ok(value(v4("kubeproxy_sync_proxy_rules_duration_seconds_sum")) < 60);
        const last = value(v4("kubeproxy_sync_proxy_rules_last_timestamp_seconds"));
        assert.ok(Math.abs(Date.now() / 1000 - last) < 30, `last sync at ${last}`);
        const queued = value(v4("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"));
        assert.ok(Math.abs(Date.now() / 1000 - queued) < 30, `last queued at ${queued}`);
        assert.ok(value("kubeproxy_sync_proxy_rules_service_changes_total") >= 10);
        assert.ok(value("kubeproxy_sync_proxy_rules_endpoint_changes_total") >= 5);
        assert.equal(value("kubeproxy_sync_proxy_rules_service_changes_pending"), 0);
        assert.equal(value("kubeproxy_sync_proxy_rules_endpoint_changes_pending"), 0);
        assert.ok(value(v4("kubeproxy_sync_proxy_rules_nftables_sync_failures_total")) >= 1);
        assert.ok(value('kubeproxy_proxy_healthz_total{code="200"}') >= 1);
        assert.ok(value('kubeproxy_proxy_healthz_total{code="503"}') >= 1);
        assert.equal(
          value(
            'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="external"}',
          ),
          0,
        );
        // Both families are programmed: each counts every sync, as upstream's two proxiers.
        assert.equal(
          value('kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"}'),
          value(v4("kubeproxy_sync_proxy_rules_duration_seconds_count")),
        );
        assert.match(text, /^# TYPE kubeproxy_network_programming_duration_seconds histogram$/m);
        const broken = proxy.output().split("\n").filter((l) => l.includes("default/broken"));
        assert.equal(broken.length, 1, broken.join("\n"));
      });

      await t.step(
        "SIGTERM ends the daemon cleanly and leaves the rules in the kernel",
        async () => {
          const exit = await proxy.stop(3000);
          assert.equal(exit.code, 0, proxy.output().slice(-2000));
          assert.match(proxy.output(), /shutting down; rules stay in the kernel/);
          assert.ok(await reaches("10.96.0.50:80", [podB.name, podC.name]));
        },
      );
    } catch (err) {
      if (daemon !== undefined) {
        throw new Error(`${(err as Error).message}\nproxy log:\n${daemon.output().slice(-4000)}`, {
          cause: err,
        });
      }
      throw err;
    } finally {
      await daemon?.stop();
      await apiServer?.close();
      await topo.cleanup();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "main.ts loads kubeadm's kube-proxy ConfigMap unchanged with --from-file",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        MAIN,
        `--config=${KUBEADM_CONFIGMAP}`,
        `--hostname-override=${NODE_NAME}`,
        `--from-file=${CLUSTER_FILE}`,
        "--once",
        "--dry-run",
      ],
      stdout: "piped",
      stderr: "piped",
      env: { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    const script = new TextDecoder().decode(out.stdout);
    assert.match(script, /^add table ip kube-nftproxy /m);
    // The ConfigMap's clusterCIDR became the local-traffic detector.
    assert.match(script, /ip saddr != 10\.244\.0\.0\/16 jump mark-for-masquerade/);
    assert.match(stderr, /synced \d+ service ports/);
  },
});
