/**
 * The standard "Kubernetes / Proxy" dashboard and the KubeProxyDown alert against a real
 * Prometheus: Debian's `prometheus` scrapes the daemon (running against the test API server in
 * a node namespace) every second as `job="kube-proxy"`, and every query of the dashboard
 * (kubernetes-monitoring/kubernetes-mixin, dashboards/proxy.libsonnet) returns data — except
 * `go_goroutines`, which is Go's.
 *
 * Skipped, with a line saying so, where `prometheus` is not installed; required under `CI=true`
 * (scripts/ensure_kernel_tools.sh installs it for `deno task test`).
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, node, service } from "../fixtures/objects.ts";
import { NODE_NAME } from "../fixtures/ip_plan.ts";
import { netnsTestGate, SKIP_REPORT_ENV } from "../netns/netns.ts";
import { createTopology, type Topology } from "../netns/topology.ts";
import { type NamespacedApiServer, startNamespacedApiServer } from "./namespaced_api_server.ts";
import { type RunningDaemon, startDaemon } from "./proxy_harness.ts";

const gate = await netnsTestGate();

/** Where Debian's package puts it; PATH may lack /usr/bin in odd environments. */
async function findPrometheus(): Promise<string | undefined> {
  for (const path of ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]) {
    try {
      if ((await Deno.stat(path)).isFile) return path;
    } catch {
      // not there
    }
  }
  return undefined;
}
const PROMETHEUS = await findPrometheus();
const REQUIRED = Deno.env.get("CI") === "true";
if (PROMETHEUS === undefined && !REQUIRED && !gate.ignore) {
  const reason = "prometheus is not installed (apt-get install prometheus; required under CI=true)";
  console.error(`prometheus_dashboard_test: skipped: ${reason}`);
  // Counted by scripts/run_tests.ts as a skipped data-plane test, so the run does not read as a pass.
  const report = Deno.env.get(SKIP_REPORT_ENV);
  if (report) await Deno.writeTextFile(report, `${reason}\n`, { append: true });
}

/**
 * The dashboard's queries as written in proxy.libsonnet (its `%(…)s` filled from config.libsonnet:
 * `job="kube-proxy"`, `cluster` label, `$__rate_interval`), by panel.
 */
const DASHBOARD: [panel: string, query: string][] = [
  [
    "Rules Sync Rate",
    'sum(rate(kubeproxy_sync_proxy_rules_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))',
  ],
  [
    "Rule Sync Latency 99th Quantile",
    'histogram_quantile(0.99,rate(kubeproxy_sync_proxy_rules_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))',
  ],
  [
    "Network Programming Rate",
    'sum(rate(kubeproxy_network_programming_duration_seconds_count{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval]))',
  ],
  [
    "Network Programming Latency 99th Quantile",
    'histogram_quantile(0.99, sum(rate(kubeproxy_network_programming_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance"}[$__rate_interval])) by (instance, le))',
  ],
  [
    "Kube API Request Rate (2xx)",
    'sum(rate(rest_client_requests_total{cluster="$cluster",job="kube-proxy", instance=~"$instance",code=~"2.."}[$__rate_interval]))',
  ],
  [
    "Post Request Latency 99th Quantile",
    'histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy",instance=~"$instance",verb="POST"}[$__rate_interval])) by (verb, le))',
  ],
  [
    "Get Request Latency 99th Quantile",
    'histogram_quantile(0.99, sum(rate(rest_client_request_duration_seconds_bucket{cluster="$cluster", job="kube-proxy", instance=~"$instance", verb="GET"}[$__rate_interval])) by (verb, le))',
  ],
  [
    "Memory",
    'process_resident_memory_bytes{cluster="$cluster", job="kube-proxy",instance=~"$instance"}',
  ],
  [
    "CPU usage",
    'rate(process_cpu_seconds_total{cluster="$cluster", job="kube-proxy",instance=~"$instance"}[$__rate_interval])',
  ],
];

/** The same request-rate panel's other targets: valid, with data only when such answers came. */
const OTHER_CODES = ["3..", "4..", "5.."].map((code) =>
  `sum(rate(rest_client_requests_total{job="kube-proxy", instance=~".*",code=~"${code}"}[1m]))`
);

/**
 * Grafana's variables as a single-cluster Prometheus sees them: no `cluster` label (the
 * mixin's default `showMultiCluster: false`), every instance, a 1 m rate window.
 */
function substitute(query: string): string {
  return query
    .replace(/cluster="\$cluster",\s*/g, "")
    .replaceAll('instance=~"$instance"', 'instance=~".*"')
    .replaceAll("$__rate_interval", "1m");
}

const PROMETHEUS_PORT = 19090;
const METRICS_PORT = 10249;
/** The health server's default port. */
const HEALTHZ_PORT = 10256;

async function kubeconfig(dir: string, server: string): Promise<string> {
  const path = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    path,
    `apiVersion: v1\nkind: Config\nclusters:\n  - name: test\n    cluster: {server: "${server}"}\n` +
      `users:\n  - name: kube-proxy\n    user: {token: test-token}\ncontexts:\n  - name: test\n` +
      `    context: {cluster: test, user: kube-proxy}\ncurrent-context: test\n`,
  );
  return path;
}

/** One instant query's result vector (Prometheus HTTP API), fetched inside the namespace. */
async function query(api: NamespacedApiServer, promql: string): Promise<unknown[]> {
  const url = `http://127.0.0.1:${PROMETHEUS_PORT}/api/v1/query?query=${
    encodeURIComponent(promql)
  }`;
  const answer = await api.fetch(url);
  if ("error" in answer) throw new Error(`query ${promql}: ${answer.error}`);
  const body = JSON.parse(answer.body) as { status: string; data?: { result: unknown[] } };
  assert.equal(body.status, "success", `${promql}: ${answer.body}`);
  return body.data!.result;
}

/** Polls `check` every 500 ms until it is true; throws with `what` after `timeoutMs`. */
async function eventually(what: string, check: () => Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** An EndpointSlice of `web` with a trigger time of now, for the network programming latency. */
function webSlice(ips: string[]): ReturnType<typeof endpointSlice> {
  const slice = endpointSlice({ name: "web-1", service: "web", endpoints: ips });
  const metadata = slice.metadata as Record<string, unknown>;
  metadata.annotations = {
    "endpoints.kubernetes.io/last-change-trigger-time": new Date().toISOString(),
  };
  return slice;
}

Deno.test({
  name:
    "a real Prometheus gets data for every query of the Kubernetes / Proxy dashboard, and up is 1",
  ignore: gate.ignore || (PROMETHEUS === undefined && !REQUIRED),
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    gate.assertUsable();
    if (PROMETHEUS === undefined) {
      throw new Error("prometheus is required under CI=true: apt-get install prometheus");
    }
    const topo: Topology = await createTopology();
    const dir = await Deno.makeTempDir({ prefix: "knp-obs-prometheus-" });
    let daemon: RunningDaemon | undefined;
    let api: NamespacedApiServer | undefined;
    try {
      api = await startNamespacedApiServer(topo.node.ns);
      const [podA, podB] = topo.pods;
      await api.create("Node", node(NODE_NAME, { ips: [topo.node.ip4] }));
      await api.create("Service", service({ name: "web", clusterIPs: ["10.96.0.10"] }));
      await api.create("EndpointSlice", webSlice([podA.ip4]));
      daemon = await startDaemon(topo, {
        args: [
          "--mode=nft",
          `--hostname-override=${NODE_NAME}`,
          `--kubeconfig=${await kubeconfig(dir, api.url)}`,
          `--metrics-bind-address=127.0.0.1:${METRICS_PORT}`,
          "--nftables-sync-period=1s",
          "--nftables-min-sync-period=50ms",
          "-v=1",
        ],
      });
      await Deno.writeTextFile(
        `${dir}/prometheus.yml`,
        `global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n` +
          `  - job_name: kube-proxy\n    static_configs: [{targets: ["127.0.0.1:${METRICS_PORT}"]}]\n`,
      );
      // Stopped by topo.cleanup() with every process of the topology.
      const prometheus = topo.startProcess(topo.node.ns, [
        PROMETHEUS,
        `--config.file=${dir}/prometheus.yml`,
        `--storage.tsdb.path=${dir}/data`,
        `--web.listen-address=127.0.0.1:${PROMETHEUS_PORT}`,
      ]);
      try {
        await eventually("prometheus answers and scraped the proxy", async () => {
          const result = await query(api!, 'up{job="kube-proxy"}').catch(() => []);
          return result.length > 0;
        }, 60_000);
      } catch (err) {
        throw new Error(`${(err as Error).message}; prometheus said:\n${prometheus.output()}`);
      }
      // A counter must grow while Prometheus watches for its rate to be non-zero (what the
      // daemon did before the first scrape never shows in a rate). After a few scrapes: a change
      // of endpoints (the network programming panels), watches that end and are made again (GET),
      // and an Event (POST): a Local LoadBalancer whose health-check node port cannot be bound
      // (10256, the health server's, held on every address) is FailedToStartServiceHealthcheck.
      await new Promise((r) => setTimeout(r, 3000));
      await api.update("EndpointSlice", webSlice([podA.ip4, podB.ip4]));
      await api.create(
        "Service",
        service({
          name: "lb",
          clusterIPs: ["10.96.0.11"],
          type: "LoadBalancer",
          spec: { externalTrafficPolicy: "Local", healthCheckNodePort: HEALTHZ_PORT },
        }),
      );
      await daemon.waitForSync(daemon.syncs(), 30_000);
      await api.dropWatches();

      // The metrics server's other pages, as the daemon serves them.
      const page = async (path: string) => {
        const answer = await api!.fetch(`http://127.0.0.1:${METRICS_PORT}${path}`);
        if ("error" in answer) throw new Error(`${path}: ${answer.error}`);
        assert.equal(answer.status, 200, path);
        return answer.body;
      };
      assert.equal(await page("/healthz/ping"), "ok");
      const configz = JSON.parse(await page("/configz"))["kubeproxy.config.k8s.io"];
      assert.equal(configz.metricsBindAddress, `127.0.0.1:${METRICS_PORT}`);
      assert.equal(configz.hostnameOverride, NODE_NAME);
      assert.match(await page("/flagz"), new RegExp(`\nhostname-override=${NODE_NAME}\n`));
      assert.match(await page("/statusz"), /\nUp: 0 hr \d\d min \d\d sec\n/);

      // KubeProxyDown fires on absent(up{job="kube-proxy"}); it must be 1, not absent.
      const up = await query(api, 'up{job="kube-proxy"}') as { value: [number, string] }[];
      assert.equal(up.length, 1);
      assert.equal(up[0].value[1], "1");
      assert.deepEqual(await query(api, 'absent(up{job="kube-proxy"})'), []);

      const empty = async () => {
        const missing: string[] = [];
        for (const [panel, promql] of DASHBOARD) {
          const result = await query(api!, substitute(promql)) as { value: [number, string] }[];
          if (result.length === 0 || result.every((r) => r.value[1] === "NaN")) missing.push(panel);
        }
        return missing;
      };
      let missing: string[] = [];
      // A few scrapes for the rates; well within the 1 m window of what was done above.
      await eventually("every panel has data", async () => {
        missing = await empty();
        return missing.length === 0;
      }, 30_000).catch(async (err) => {
        const series = await Promise.all(
          ["rest_client_requests_total", "kubeproxy_network_programming_duration_seconds_count"]
            .map((name) => query(api!, `${name}[2m]`).then((r) => JSON.stringify(r))),
        );
        throw new Error(
          `${(err as Error).message}: empty: ${missing.join(", ")}\n${series.join("\n")}\n` +
            daemon!.output(),
        );
      });
      for (const promql of OTHER_CODES) await query(api, promql);
    } finally {
      await daemon?.stop().catch(() => {});
      await api?.close().catch(() => {});
      await topo.cleanup();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  },
});
