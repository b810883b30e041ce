/**
 * Specs of the proxy's metrics: upstream names, types and buckets in the exposition text, the
 * values the typed methods leave there, and the metrics server's handler.
 *
 * @module
 */
import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import { advanceUntil, emfile, FakeListener } from "../../tests/fixtures/fake_sockets.ts";
import { ConnectionPool } from "./connection_pool.ts";
import {
  MAX_REJECTION_SERIES,
  metricsHandler,
  NETWORK_PROGRAMMING_BUCKETS,
  ProxyMetrics,
  rejectionReason,
  serveMetrics,
  SYNC_DURATION_BUCKETS,
} from "./metrics.ts";

/** The value of one sample line (`name{labels} value`) in an exposition, or undefined. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** `name{ip_family="IPv4"}`, or with `le` first for a histogram bucket. */
function v4(name: string, le?: string): string {
  return le === undefined ? `${name}{ip_family="IPv4"}` : `${name}{le="${le}",ip_family="IPv4"}`;
}

function typeOf(text: string, name: string): string | undefined {
  return new RegExp(`^# TYPE ${name} (\\w+)$`, "m").exec(text)?.[1];
}

Deno.test("ProxyMetrics() exposes upstream's metric names and types in nft mode", async () => {
  const text = await new ProxyMetrics({ mode: "nft" }).text();
  const expected: [string, string][] = [
    ["kubeproxy_sync_proxy_rules_duration_seconds", "histogram"],
    ["kubeproxy_sync_full_proxy_rules_duration_seconds", "histogram"],
    ["kubeproxy_sync_partial_proxy_rules_duration_seconds", "histogram"],
    ["kubeproxy_sync_proxy_rules_last_timestamp_seconds", "gauge"],
    ["kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", "gauge"],
    ["kubeproxy_network_programming_duration_seconds", "histogram"],
    ["kubeproxy_sync_proxy_rules_endpoint_changes_pending", "gauge"],
    ["kubeproxy_sync_proxy_rules_endpoint_changes_total", "counter"],
    ["kubeproxy_sync_proxy_rules_service_changes_pending", "gauge"],
    ["kubeproxy_sync_proxy_rules_service_changes_total", "counter"],
    ["kubeproxy_sync_proxy_rules_no_local_endpoints_total", "gauge"],
    ["kubeproxy_sync_proxy_rules_nftables_sync_failures_total", "counter"],
    ["kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", "counter"],
    ["kubeproxy_proxy_healthz_total", "counter"],
    ["kubeproxy_proxy_livez_total", "counter"],
    ["kubenftproxy_objects_rejected_total", "counter"],
    ["kubeproxy_conntrack_reconciler_sync_duration_seconds", "histogram"],
    ["kubeproxy_conntrack_reconciler_deleted_entries_total", "counter"],
    ["kubenftproxy_sync_script_bytes", "histogram"],
  ];
  for (const [name, type] of expected) assert.equal(typeOf(text, name), type, name);
  assert.equal(
    typeOf(text, "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"),
    undefined,
  );
  assert.match(
    text,
    /^# HELP kubeproxy_sync_proxy_rules_duration_seconds SyncProxyRules latency in seconds$/m,
  );
});

Deno.test("ProxyMetrics() registers iptables-restore failure counters instead in iptables mode", async () => {
  const metrics = new ProxyMetrics({ mode: "iptables" });
  metrics.syncFailed({ full: false });
  metrics.syncFailed({ full: true });
  metrics.cleanupFailed(); // nft only: ignored
  const text = await metrics.text();
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_iptables_restore_failures_total")), 2);
  assert.equal(
    sample(text, v4("kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total")),
    1,
  );
  assert.equal(typeOf(text, "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"), undefined);
  assert.equal(metrics.proxyMode, "iptables");
});

Deno.test("ProxyMetrics() uses upstream's buckets", async () => {
  assert.equal(SYNC_DURATION_BUCKETS.length, 15);
  assert.equal(SYNC_DURATION_BUCKETS[0], 0.001);
  assert.equal(SYNC_DURATION_BUCKETS[14], 16.384);
  assert.deepEqual(NETWORK_PROGRAMMING_BUCKETS.slice(0, 5), [0, 0.25, 0.5, 1, 2]);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS.length, 1 + 2 + 59 + 12 + 7);
  assert.equal(NETWORK_PROGRAMMING_BUCKETS.at(-1), 300);
  const text = await new ProxyMetrics().text();
  assert.match(
    text,
    /^kubeproxy_sync_proxy_rules_duration_seconds_bucket\{le="16.384",ip_family="IPv4"\} 0$/m,
  );
  assert.match(
    text,
    /^kubeproxy_network_programming_duration_seconds_bucket\{le="115",ip_family="IPv4"\} 0$/m,
  );
});

Deno.test("ProxyMetrics.syncDone() records latency, script size and the last sync time", async () => {
  const clock = new FakeClock({ now: 1_700_000_000_000 });
  const metrics = new ProxyMetrics({ clock });
  metrics.syncDone({ full: true, seconds: 0.2, bytes: 5000 });
  clock.advance(1500);
  metrics.syncDone({ full: false, seconds: 0.003, bytes: 0 });
  const text = await metrics.text();
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_duration_seconds_count")), 2);
  assert.equal(sample(text, v4("kubeproxy_sync_full_proxy_rules_duration_seconds_count")), 1);
  assert.equal(sample(text, v4("kubeproxy_sync_full_proxy_rules_duration_seconds_sum")), 0.2);
  assert.equal(sample(text, v4("kubeproxy_sync_partial_proxy_rules_duration_seconds_count")), 1);
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_duration_seconds_bucket", "0.004")), 1);
  // A sync that sent nothing is not a script.
  assert.equal(sample(text, "kubenftproxy_sync_script_bytes_count"), 1);
  assert.equal(sample(text, 'kubenftproxy_sync_script_bytes_bucket{le="4096"}'), 0);
  assert.equal(sample(text, 'kubenftproxy_sync_script_bytes_bucket{le="16384"}'), 1);
  assert.equal(
    sample(text, v4("kubeproxy_sync_proxy_rules_last_timestamp_seconds")),
    1_700_000_001.5,
  );
});

Deno.test("ProxyMetrics.syncFailed() counts nftables failures and observes their latency", async () => {
  const metrics = new ProxyMetrics();
  metrics.syncFailed({ full: false, seconds: 0.5 });
  metrics.syncFailed();
  metrics.cleanupFailed();
  const text = await metrics.text();
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_nftables_sync_failures_total")), 2);
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total")), 1);
  assert.equal(sample(text, v4("kubeproxy_sync_partial_proxy_rules_duration_seconds_count")), 1);
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_last_timestamp_seconds")), 0);
});

Deno.test("ProxyMetrics records each observation once per programmed family, as upstream's one proxier per family", async () => {
  const clock = new FakeClock({ now: 1_700_000_000_000 });
  const dual = new ProxyMetrics({ clock, families: ["IPv4", "IPv6"] });
  dual.queued("Service");
  dual.networkProgrammed(1.5);
  dual.syncDone({ full: true, seconds: 0.2, bytes: 5000 });
  dual.syncFailed({ full: false, seconds: 0.01 });
  dual.cleanupFailed();
  const text = await dual.text();
  for (const family of ["IPv4", "IPv6"]) {
    const of = (name: string) => sample(text, `${name}{ip_family="${family}"}`);
    assert.equal(of("kubeproxy_sync_proxy_rules_duration_seconds_count"), 2, family);
    assert.equal(of("kubeproxy_sync_full_proxy_rules_duration_seconds_sum"), 0.2, family);
    assert.equal(of("kubeproxy_sync_partial_proxy_rules_duration_seconds_count"), 1, family);
    assert.equal(of("kubeproxy_network_programming_duration_seconds_count"), 1, family);
    assert.equal(of("kubeproxy_sync_proxy_rules_last_timestamp_seconds"), 1_700_000_000, family);
    assert.equal(
      of("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"),
      1_700_000_000,
      family,
    );
    assert.equal(of("kubeproxy_sync_proxy_rules_nftables_sync_failures_total"), 1, family);
    assert.equal(of("kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"), 1, family);
  }
  // Every series carries its family; none is left without.
  assert.equal(sample(text, "kubeproxy_sync_proxy_rules_duration_seconds_count"), undefined);

  const single = new ProxyMetrics({ clock, families: ["IPv6"] });
  single.syncDone({ full: true, seconds: 0.2, bytes: 5000 });
  const only = await single.text();
  assert.equal(
    sample(only, 'kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv6"}'),
    1,
  );
  assert.ok(!only.includes('ip_family="IPv4"'), "no series of a family not programmed");
});

Deno.test("ProxyMetrics.syncFailed() counts an iptables-restore failure only in the family refused", async () => {
  const metrics = new ProxyMetrics({ mode: "iptables", families: ["IPv4", "IPv6"] });
  metrics.syncFailed({ full: false, seconds: 0.5, family: "IPv6" });
  const text = await metrics.text();
  const restore = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
  const partial = "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total";
  assert.equal(sample(text, `${restore}{ip_family="IPv6"}`), 1);
  assert.equal(sample(text, `${partial}{ip_family="IPv6"}`), 1);
  assert.equal(sample(text, `${restore}{ip_family="IPv4"}`), 0);
  assert.equal(sample(text, `${partial}{ip_family="IPv4"}`), 0);
  // Both families' rules were being synced: the attempt's latency counts in each.
  assert.equal(
    sample(text, 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"}'),
    1,
  );
});

Deno.test("ProxyMetrics leaves the metrics upstream does not label by family unlabelled", async () => {
  const metrics = new ProxyMetrics({ families: ["IPv4", "IPv6"] });
  metrics.queued("Service");
  metrics.queued("EndpointSlice");
  metrics.pending({ services: 1, endpoints: 1 });
  metrics.healthServed("/healthz", 200);
  metrics.healthServed("/livez", 200);
  const lines = (await metrics.text()).split("\n");
  const unlabelled = [
    "kubeproxy_sync_proxy_rules_service_changes_total 1",
    "kubeproxy_sync_proxy_rules_endpoint_changes_total 1",
    "kubeproxy_sync_proxy_rules_service_changes_pending 1",
    "kubeproxy_sync_proxy_rules_endpoint_changes_pending 1",
    'kubeproxy_proxy_healthz_total{code="200"} 1',
    'kubeproxy_proxy_livez_total{code="200"} 1',
  ];
  for (const line of unlabelled) assert.ok(lines.includes(line), line);
  const labelled = lines.filter((l) => l.includes("ip_family=")).map((l) => l.split("{")[0]);
  assert.deepEqual([...new Set(labelled)].sort(), [
    "kubeproxy_network_programming_duration_seconds_bucket",
    "kubeproxy_network_programming_duration_seconds_count",
    "kubeproxy_network_programming_duration_seconds_sum",
    "kubeproxy_sync_full_proxy_rules_duration_seconds_bucket",
    "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
    "kubeproxy_sync_full_proxy_rules_duration_seconds_sum",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds_bucket",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds_count",
    "kubeproxy_sync_partial_proxy_rules_duration_seconds_sum",
    "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
    "kubeproxy_sync_proxy_rules_duration_seconds_count",
    "kubeproxy_sync_proxy_rules_duration_seconds_sum",
    "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
    "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
    "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
    "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
    "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
  ]);
});

Deno.test("ProxyMetrics.queued() counts changes by kind and stamps the last queued time", async () => {
  const clock = new FakeClock({ now: 42_000 });
  const metrics = new ProxyMetrics({ clock });
  metrics.queued("Service");
  metrics.queued("EndpointSlice");
  metrics.queued("EndpointSlice");
  clock.advance(1000);
  metrics.queued("Node");
  metrics.pending({ services: 1, endpoints: 2 });
  const text = await metrics.text();
  assert.equal(sample(text, "kubeproxy_sync_proxy_rules_service_changes_total"), 1);
  assert.equal(sample(text, "kubeproxy_sync_proxy_rules_endpoint_changes_total"), 2);
  assert.equal(sample(text, v4("kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds")), 43);
  assert.equal(sample(text, "kubeproxy_sync_proxy_rules_service_changes_pending"), 1);
  assert.equal(sample(text, "kubeproxy_sync_proxy_rules_endpoint_changes_pending"), 2);
});

Deno.test("ProxyMetrics.noLocalEndpoints() sets both traffic policies of each family, 0 from the start", async () => {
  const metrics = new ProxyMetrics({ families: ["IPv4", "IPv6"] });
  const series = (family: string, policy: string) =>
    `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="${family}",traffic_policy="${policy}"}`;
  const before = await metrics.text();
  assert.equal(sample(before, series("IPv4", "internal")), 0);
  assert.equal(sample(before, series("IPv6", "external")), 0);
  metrics.noLocalEndpoints({
    IPv4: { internal: 3, external: 1 },
    IPv6: { internal: 0, external: 2 },
  });
  const after = await metrics.text();
  assert.equal(sample(after, series("IPv4", "internal")), 3);
  assert.equal(sample(after, series("IPv4", "external")), 1);
  assert.equal(sample(after, series("IPv6", "internal")), 0);
  assert.equal(sample(after, series("IPv6", "external")), 2);

  const single = new ProxyMetrics({ families: ["IPv4"] });
  single.noLocalEndpoints({
    IPv4: { internal: 1, external: 0 },
    IPv6: { internal: 5, external: 5 },
  });
  const text = await single.text();
  assert.equal(sample(text, series("IPv4", "internal")), 1);
  assert.ok(!text.includes('ip_family="IPv6"'), "a family not programmed has no series");
});

Deno.test("ProxyMetrics counts conntrack reconciles, network programming and health answers", async () => {
  const metrics = new ProxyMetrics();
  metrics.conntrackReconciled({ family: "IPv4", seconds: 0.3, deleted: 3 });
  metrics.conntrackReconciled({ family: "IPv6", seconds: 0.002, deleted: 0 });
  metrics.networkProgrammed(1.5);
  metrics.healthServed("/healthz", 200);
  metrics.healthServed("/healthz", 503);
  metrics.healthServed("/livez", 200);
  const text = await metrics.text();
  assert.equal(
    sample(text, 'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"}'),
    3,
  );
  assert.equal(
    sample(text, 'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv6"}'),
    undefined,
  );
  assert.equal(
    sample(text, 'kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="IPv6"}'),
    1,
  );
  assert.equal(
    sample(
      text,
      'kubeproxy_conntrack_reconciler_sync_duration_seconds_bucket{le="0.512",ip_family="IPv4"}',
    ),
    1,
  );
  assert.equal(sample(text, v4("kubeproxy_network_programming_duration_seconds_bucket", "2")), 1);
  assert.equal(sample(text, 'kubeproxy_proxy_healthz_total{code="503"}'), 1);
  assert.equal(sample(text, 'kubeproxy_proxy_livez_total{code="200"}'), 1);
});

Deno.test("rejectionReason() keeps only the field path the message names", () => {
  const cases: [string, string][] = [
    ["spec.ports[1].port is 70000, must be 1-65535", "spec.ports.port"],
    [
      'cannot use Service default/web: spec.clusterIPs[0] "10.0.0.300" is not a valid IP address',
      "spec.clusterIPs",
    ],
    [
      'cannot use EndpointSlice default/web-abc: metadata.labels["kubernetes.io/service-name"] is missing',
      "metadata.labels",
    ],
    ["cannot use EndpointSlice a/b: addressType is 7, must be IPv4, IPv6 or FQDN", "addressType"],
    ["cannot use EndpointSlice a/b: ports is a string, must be a list", "ports"],
    ["status.loadBalancer.ingress[0].ip bad", "status.loadBalancer.ingress.ip"],
    // Never an object name, never free text.
    ["cannot use Service default/spec: something odd", "other"],
    ["web-123 is broken", "other"],
    ["", "other"],
  ];
  for (const [message, reason] of cases) assert.equal(rejectionReason(message), reason, message);
});

Deno.test("ProxyMetrics.rejected() counts by kind and reason, with a bounded number of series", async () => {
  const metrics = new ProxyMetrics();
  metrics.rejected("Service", "cannot use Service default/a: spec.ports[0].port is 0");
  metrics.rejected("Service", "cannot use Service default/b: spec.ports[3].port is -1");
  metrics.rejected("EndpointSlice", "cannot use EndpointSlice x/y: ports is 1, must be a list");
  const text = await metrics.text();
  assert.equal(
    sample(text, 'kubenftproxy_objects_rejected_total{kind="Service",reason="spec.ports.port"}'),
    2,
  );
  assert.equal(
    sample(text, 'kubenftproxy_objects_rejected_total{kind="EndpointSlice",reason="ports"}'),
    1,
  );
  assert.ok(!text.includes("default/a"));

  const flood = new ProxyMetrics();
  const letter = (n: number) => String.fromCharCode(97 + (n % 26));
  for (let i = 0; i < MAX_REJECTION_SERIES + 50; i++) {
    // Distinct, well-formed field paths: spec.faa, spec.fab, …
    flood.rejected("Service", `spec.f${letter(Math.floor(i / 26))}${letter(i)} is bad`);
  }
  const series = (await flood.text()).split("\n")
    .filter((l) => l.startsWith("kubenftproxy_objects_rejected_total{"));
  assert.equal(series.length, MAX_REJECTION_SERIES + 1, `${series.length} series`);
  assert.ok(series.some((l) => l.includes('reason="other"')));
});

Deno.test("metricsHandler() serves the exposition with Prometheus' content type", async () => {
  const metrics = new ProxyMetrics();
  metrics.syncDone({ full: true, seconds: 0.01, bytes: 100 });
  const handle = metricsHandler(metrics);
  const res = await handle(new Request("http://node:10249/metrics"));
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  assert.equal(
    sample(await res.text(), v4("kubeproxy_sync_proxy_rules_duration_seconds_count")),
    1,
  );
});

Deno.test("metricsHandler() answers /proxyMode and /healthz like upstream, 404 otherwise", async () => {
  const handle = metricsHandler(new ProxyMetrics({ mode: "nft" }));
  const mode = await handle(new Request("http://node:10249/proxyMode"));
  assert.equal(await mode.text(), "nftables");
  const ok = await handle(new Request("http://node:10249/healthz"));
  assert.equal(await ok.text(), "ok");
  const missing = await handle(new Request("http://node:10249/configz"));
  assert.equal(missing.status, 404);
  await missing.body?.cancel();
});

Deno.test("serveMetrics() serves /metrics on loopback, and is disabled by an empty address", async () => {
  assert.equal(serveMetrics("", () => new Response()), null);
  const metrics = new ProxyMetrics();
  metrics.conntrackReconciled({ family: "IPv4", seconds: 0.1, deleted: 7 });
  const server = serveMetrics("127.0.0.1:0", metricsHandler(metrics));
  assert.ok(server);
  try {
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/metrics`);
    assert.equal(
      sample(
        await res.text(),
        'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"}',
      ),
      7,
    );
  } finally {
    await server.close();
  }
});

Deno.test("ProxyMetrics.serviceConnectionsFrom() exposes each service port's connections at scrape time", async () => {
  const metrics = new ProxyMetrics({ mode: "nft" });
  let connections = 3;
  metrics.serviceConnectionsFrom(() =>
    Promise.resolve([{ namespace: "default", service: "web", port: "http", connections }])
  );
  const series =
    'kubenftproxy_service_connections_total{namespace="default",service="web",port="http"}';
  assert.equal(sample(await metrics.text(), series), 3);
  connections = 5;
  assert.equal(sample(await metrics.text(), series), 5);
  assert.equal(typeOf(await metrics.text(), "kubenftproxy_service_connections_total"), "counter");
});

Deno.test("ProxyMetrics.serviceConnectionsFrom() keeps the last values when the source fails", async () => {
  const metrics = new ProxyMetrics({ mode: "nft" });
  let fail = false;
  metrics.serviceConnectionsFrom(() =>
    fail
      ? Promise.reject(new Error("nft: no such table"))
      : Promise.resolve([{ namespace: "default", service: "web", port: "", connections: 2 }])
  );
  const series =
    'kubenftproxy_service_connections_total{namespace="default",service="web",port=""}';
  assert.equal(sample(await metrics.text(), series), 2);
  fail = true;
  assert.equal(sample(await metrics.text(), series), 2);
});

Deno.test("serveMetrics() survives accept errors, logs them once, counts them, and serves after", async () => {
  const clock = new FakeClock();
  const metrics = new ProxyMetrics({ clock });
  const listener = new FakeListener();
  const logs: string[] = [];
  const server = serveMetrics("0.0.0.0:10249", metricsHandler(metrics), {
    listen: () => listener,
    clock,
    log: (line) => logs.push(line),
    onAcceptError: (_err, server) => metrics.connections.acceptFailed(server),
  })!;
  try {
    for (let i = 0; i < 3; i++) listener.fail(emfile());
    const conn = listener.connect();
    conn.send("GET /metrics HTTP/1.1\r\n\r\n");
    await advanceUntil(clock, () => conn.written().includes("# TYPE"));
    assert.equal(
      sample(conn.written(), 'kubenftproxy_server_accept_errors_total{server="metrics"}'),
      3,
    );
    assert.equal(logs.length, 1);
    assert.match(logs[0], /^metrics server on 0\.0\.0\.0:10249: cannot accept .*\[EMFILE\]/);
  } finally {
    await server.close();
  }
});

Deno.test("ProxyMetrics.connections counts evicted and refused connections, and exposes the descriptors", async () => {
  const metrics = new ProxyMetrics();
  const pool = new ConnectionPool({
    maxConnections: 1,
    onEvicted: (s) => metrics.connections.evicted(s),
    onRefused: (s) => metrics.connections.refused(s),
  });
  metrics.connections.watch(pool);
  const health = pool.listener("health", 1);
  health.admit("192.168.77.2", () => {});
  health.admit("192.168.77.2", () => {})!.setState("active");
  assert.equal(health.admit("192.168.77.2", () => {}), null);
  const text = await metrics.text();
  assert.equal(sample(text, 'kubenftproxy_server_connections_evicted_total{server="health"}'), 1);
  assert.equal(sample(text, 'kubenftproxy_server_connections_refused_total{server="health"}'), 1);
  assert.equal(sample(text, 'kubenftproxy_server_connections{server="health"}'), 1);
  assert.ok(sample(text, "process_open_fds")! > 0);
  assert.ok(sample(text, "process_max_fds")! >= 1024);
});
