/**
 * Specs of the daemon's lifecycle (`runProxy`): health, metrics, health-check node ports and
 * conntrack cleanup around each sync, driven by a fake source, a fake kernel and a fake clock.
 *
 * @module
 */
import { connectionBudget, readDescriptorLimit } from "../server/descriptor_limit.ts";
import assert from "node:assert/strict";
import type { ReconcileResult } from "../apply/conntrack.ts";
import type { ConntrackService } from "../apply/conntrack_plan.ts";
import { NftApplyError } from "../apply/nft.ts";
import { type Config, DEFAULT_CONFIG } from "../config/config.ts";
import { createLogger } from "../log.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import { healthHandler, healthTimeoutMs, ProxyHealth } from "../server/health.ts";
import { ServiceHealthServer } from "../server/health_check_ports.ts";
import { ProxyMetrics, type ProxyMetricsOptions } from "../server/metrics.ts";
import { IptablesApplyError } from "../apply/iptables.ts";
import type { HttpServer } from "../server/serve.ts";
import type { ObjectEvent, RawObject, Source, SourceHandler } from "../source/events.ts";
import { endpointSlice, node, service } from "../../tests/fixtures/objects.ts";
import { FakeClock } from "./clock.ts";
import { runProxy } from "./proxy.ts";

const CONFIG: Config = {
  ...DEFAULT_CONFIG,
  hostname: "node-a",
  healthzBindAddress: "",
  metricsBindAddress: "",
  minSyncPeriodMs: 1000,
  syncPeriodMs: 30_000,
};

/** A source the test feeds by hand. */
class FakeSource implements Source {
  handler?: SourceHandler;
  stopped = false;
  startError?: Error;

  start(handler: SourceHandler): Promise<void> {
    if (this.startError) return Promise.reject(this.startError);
    this.handler = handler;
    return Promise.resolve();
  }

  stop(): Promise<void> {
    this.stopped = true;
    return Promise.resolve();
  }

  add(kind: ObjectEvent["kind"], current: RawObject): void {
    this.handler!.onEvent({ kind, current });
  }
}

/** Sockets the health-check server would have opened, by address. */
class FakeSockets {
  readonly open = new Map<string, (req: Request) => Response>();

  serve = (address: string, handler: (req: Request) => Response): HttpServer => {
    if (this.open.has(address)) throw new Error(`${address} is in use`);
    this.open.set(address, handler);
    return {
      addr: { hostname: address, port: 0 },
      close: () => {
        this.open.delete(address);
        return Promise.resolve();
      },
    };
  };
}

/** A running daemon with every part observable. */
async function startDaemon(
  options: {
    conntrack?: (s: readonly ConntrackService[]) => Promise<readonly ReconcileResult[]>;
    /** What the metrics record: the mode's counters and the families' series. */
    metrics?: ProxyMetricsOptions;
    /** The error of a refused apply. Default: nft refusing the transaction. */
    refusal?: () => Error;
  } = {},
) {
  const clock = new FakeClock({ now: 1_700_000_000_000 });
  const source = new FakeSource();
  const scripts: string[] = [];
  const kernel = { failing: false };
  const logs: string[] = [];
  const health = new ProxyHealth({ healthTimeoutMs: healthTimeoutMs(CONFIG.syncPeriodMs), clock });
  const metrics = new ProxyMetrics({ clock, ...options.metrics });
  const sockets = new FakeSockets();
  const controller = new AbortController();
  const done = runProxy({
    config: CONFIG,
    source,
    planner: new NftPlanner(CONFIG),
    apply: (script) => {
      if (kernel.failing) {
        return Promise.reject(
          options.refusal?.() ??
            new NftApplyError("nft refused the transaction (Error: injected)", {
              line: 1,
              scriptLine: "",
              stderr: "Error: injected",
            }),
        );
      }
      scripts.push(script);
      return Promise.resolve();
    },
    log: createLogger({ verbosity: 4, write: (line) => logs.push(line), now: () => new Date(0) }),
    clock,
    health,
    metrics,
    serviceHealth: new ServiceHealthServer({
      proxyHealthy: () => health.status().healthy,
      serve: sockets.serve,
    }),
    conntrackReconcile: options.conntrack,
  }, { once: false, signal: controller.signal });
  await clock.flush();
  const healthz = async (path = "/healthz") =>
    (await healthHandler(health)(new Request(`http://node${path}`))).status;
  const metric = async (series: string) => {
    const line = (await metrics.text()).split("\n").find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };
  return {
    clock,
    source,
    scripts,
    kernel,
    logs,
    sockets,
    healthz,
    metric,
    async stop() {
      controller.abort();
      await clock.advanceAsync(0);
      return await done;
    },
  };
}

/** `name{ip_family="IPv4"}`: the series of a single-stack IPv4 daemon (the default). */
const v4 = (name: string) => `${name}{ip_family="IPv4"}`;

const web = () => service({ name: "web", clusterIPs: ["10.96.0.10"] });
const webSlice = (endpoints: (string | { ip: string; nodeName: string })[]) =>
  endpointSlice({ name: "web-1", service: "web", endpoints });

Deno.test("runProxy() answers /healthz 503 while syncs fail for 2 × syncPeriod, and 200 after one succeeds", async () => {
  const d = await startDaemon();
  d.source.add("Node", node("node-a", { ips: ["192.168.77.1"] }));
  d.source.add("Service", web());
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  assert.equal(d.scripts.length, 1, "the first sync runs at once");
  assert.equal(await d.healthz(), 200);

  d.kernel.failing = true;
  d.source.add("EndpointSlice", webSlice(["10.244.1.11"]));
  await d.clock.advanceAsync(healthTimeoutMs(CONFIG.syncPeriodMs) - 1);
  assert.equal(await d.healthz(), 200, "not yet: the change has waited less than the timeout");
  assert.ok((await d.metric(v4("kubeproxy_sync_proxy_rules_nftables_sync_failures_total")))! >= 2);
  await d.clock.advanceAsync(1);
  assert.equal(await d.healthz(), 503);
  assert.equal(await d.healthz("/livez"), 503);

  d.kernel.failing = false;
  await d.clock.advanceAsync(CONFIG.syncPeriodMs);
  assert.equal(await d.healthz(), 200);
  assert.match(d.scripts.at(-1)!, /10\.244\.1\.11/, "the retry carried the change");
  assert.equal(await d.stop(), 0);
});

Deno.test("runProxy() answers /healthz 503 while the Node is being deleted, /livez stays 200", async () => {
  const d = await startDaemon();
  d.source.add("Node", {
    ...node("node-a", { ips: ["192.168.77.1"] }),
    metadata: { name: "node-a", deletionTimestamp: "2024-05-01T12:00:00Z" },
  });
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  assert.equal(await d.healthz(), 503);
  assert.equal(await d.healthz("/livez"), 200);
  await d.stop();
});

Deno.test("runProxy() answers /healthz 503 once the state is listed without this Node, and 200 when it appears", async () => {
  const d = await startDaemon();
  assert.equal(await d.healthz(), 200, "starting up: the Node is not known yet");
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  assert.equal(await d.healthz(), 503);
  assert.equal(await d.healthz("/livez"), 200);
  d.source.add("Node", node("node-a", { ips: ["192.168.77.1"] }));
  await d.clock.advanceAsync(CONFIG.syncPeriodMs);
  assert.equal(await d.healthz(), 200);
  await d.stop();
});

Deno.test("runProxy() warns once, naming the node, when no Node object for it was listed", async () => {
  const missing = await startDaemon();
  missing.source.handler!.onSynced();
  await missing.clock.advanceAsync(0);
  await missing.clock.advanceAsync(60_000);
  const warnings = missing.logs.filter((l) => l.includes('no Node named \\"node-a\\"'));
  assert.equal(warnings.length, 1, missing.logs.join("\n"));
  assert.match(warnings[0], /\/healthz answers 503 .*--hostname-override/);
  await missing.stop();

  const present = await startDaemon();
  present.source.add("Node", node("node-a", { ips: ["192.168.77.1"] }));
  present.source.handler!.onSynced();
  await present.clock.advanceAsync(0);
  assert.equal(present.logs.filter((l) => l.includes("no Node named")).length, 0);
  await present.stop();
});

Deno.test("runProxy() leaves upstream's metrics with the syncs, changes, rejections and Local-policy gaps it saw", async () => {
  const d = await startDaemon();
  d.source.add("Service", web());
  d.source.add(
    "Service",
    service({ name: "broken", clusterIPs: ["10.96.0.300"] }),
  );
  d.source.add(
    "Service",
    service({
      name: "local",
      clusterIPs: ["10.96.0.12"],
      spec: { internalTrafficPolicy: "Local" },
    }),
  );
  d.source.add("EndpointSlice", webSlice(["10.244.1.11"]));
  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_service_changes_pending"), 2);
  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_endpoint_changes_pending"), 1);
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);

  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_service_changes_total"), 2);
  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_endpoint_changes_total"), 1);
  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_service_changes_pending"), 0);
  assert.equal(await d.metric(v4("kubeproxy_sync_proxy_rules_duration_seconds_count")), 1);
  assert.equal(await d.metric(v4("kubeproxy_sync_full_proxy_rules_duration_seconds_count")), 1);
  assert.equal(
    await d.metric(v4("kubeproxy_sync_proxy_rules_last_timestamp_seconds")),
    d.clock.now() / 1000,
  );
  assert.equal(
    await d.metric('kubenftproxy_objects_rejected_total{kind="Service",reason="spec.clusterIPs"}'),
    1,
  );
  assert.equal(
    await d.metric(
      'kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="IPv4",traffic_policy="internal"}',
    ),
    1,
  );
  assert.equal(d.logs.filter((l) => l.includes("default/broken")).length, 1, "logged once");

  d.source.handler!.onEvent({
    kind: "EndpointSlice",
    previous: webSlice(["10.244.1.11"]),
    current: webSlice(["10.244.1.12"]),
  });
  await d.clock.advanceAsync(1000);
  assert.equal(await d.metric(v4("kubeproxy_sync_partial_proxy_rules_duration_seconds_count")), 1);
  assert.equal(await d.metric("kubeproxy_sync_proxy_rules_endpoint_changes_total"), 2);
  await d.stop();
});

Deno.test("runProxy() records a dual-stack daemon's sync once per family, a single-stack one's only for its family", async () => {
  const dual = await startDaemon({ metrics: { families: ["IPv4", "IPv6"] } });
  const single = await startDaemon({ metrics: { families: ["IPv4"] } });
  for (const d of [dual, single]) {
    // Local traffic policy, a local IPv4 endpoint and an IPv6 one elsewhere.
    d.source.add(
      "Service",
      service({
        name: "web",
        clusterIPs: ["10.96.0.10", "fd00:96::10"],
        spec: { internalTrafficPolicy: "Local", ipFamilies: ["IPv4", "IPv6"] },
      }),
    );
    d.source.add("EndpointSlice", webSlice([{ ip: "10.244.1.11", nodeName: "node-a" }]));
    d.source.add(
      "EndpointSlice",
      endpointSlice({
        name: "web-2",
        service: "web",
        addressType: "IPv6",
        endpoints: [{ ip: "fd00:244:2::11", nodeName: "node-b" }],
      }),
    );
    d.source.handler!.onSynced();
    await d.clock.advanceAsync(0);
  }
  const count = "kubeproxy_sync_proxy_rules_duration_seconds_count";
  const noLocal = (family: string) =>
    `kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family="${family}",traffic_policy="internal"}`;
  assert.equal(await dual.metric(`${count}{ip_family="IPv4"}`), 1);
  assert.equal(await dual.metric(`${count}{ip_family="IPv6"}`), 1);
  assert.equal(await dual.metric(noLocal("IPv4")), 0);
  assert.equal(await dual.metric(noLocal("IPv6")), 1, "no IPv6 endpoint on this node");
  assert.equal(await single.metric(`${count}{ip_family="IPv4"}`), 1);
  assert.equal(await single.metric(`${count}{ip_family="IPv6"}`), undefined);
  assert.equal(await single.metric(noLocal("IPv4")), 0);
  assert.equal(await single.metric(noLocal("IPv6")), undefined);
  // Changes have no family, as upstream's.
  assert.equal(await dual.metric("kubeproxy_sync_proxy_rules_service_changes_total"), 1);
  await dual.stop();
  await single.stop();
});

Deno.test("runProxy() counts an iptables-restore failure in the family it names", async () => {
  const d = await startDaemon({
    metrics: { mode: "iptables", families: ["IPv4", "IPv6"] },
    refusal: () =>
      new IptablesApplyError("ip6tables-nft-restore refused the IPv6 rules", {
        family: "IPv6",
        line: 3,
        scriptLine: "-A KUBE-SERVICES -j BROKEN",
        stderr: "Error occurred at line: 3",
      }),
  });
  d.kernel.failing = true;
  d.source.add("Service", web());
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  const failures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total";
  assert.equal(await d.metric(`${failures}{ip_family="IPv6"}`), 1);
  assert.equal(await d.metric(`${failures}{ip_family="IPv4"}`), 0);
  await d.stop();
});

Deno.test("runProxy() opens a health-check node port for an eTP Local LoadBalancer and closes it when the Service goes", async () => {
  const d = await startDaemon();
  const lb = service({
    name: "lb",
    type: "LoadBalancer",
    clusterIPs: ["10.96.0.20"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
    spec: { externalTrafficPolicy: "Local", healthCheckNodePort: 30300 },
  });
  d.source.add("Node", node("node-a", { ips: ["127.0.0.1"] }));
  d.source.add("Service", lb);
  d.source.add(
    "EndpointSlice",
    endpointSlice({ name: "lb-1", service: "lb", endpoints: ["10.244.1.11"] }),
  );
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  // A loopback node IP is never a node-port address: every address, as upstream.
  assert.deepEqual([...d.sockets.open.keys()], ["0.0.0.0:30300"]);
  const answer = d.sockets.open.get("0.0.0.0:30300")!(new Request("http://node:30300/"));
  assert.equal(answer.status, 200);
  assert.deepEqual(JSON.parse(await answer.text()), {
    service: { namespace: "default", name: "lb" },
    localEndpoints: 1,
    serviceProxyHealthy: true,
  });

  d.source.handler!.onEvent({ kind: "Service", previous: lb });
  await d.clock.advanceAsync(1000);
  assert.deepEqual([...d.sockets.open.keys()], []);
  await d.stop();
});

Deno.test("runProxy() runs the conntrack reconciler after every sync and counts what it did; a failure fails no sync", async () => {
  const runs: ConntrackService[][] = [];
  let fail = false;
  const d = await startDaemon({
    conntrack: (services) => {
      runs.push([...services]);
      if (fail) return Promise.reject(new Error("conntrack is missing"));
      return Promise.resolve([
        { family: "IPv4", deleted: 2, seconds: 0.01 },
        { family: "IPv6", deleted: 0, seconds: 0.01, error: new Error("cannot list") },
      ]);
    },
  });
  const dns = service({
    name: "dns",
    clusterIPs: ["10.96.0.53"],
    ports: [{ name: "dns", port: 53, protocol: "UDP" }],
  });
  const slice = (ip: string) =>
    endpointSlice({
      name: "dns-1",
      service: "dns",
      ports: [{ name: "dns", port: 53, protocol: "UDP" }],
      endpoints: [ip],
    });
  d.source.add("Node", node("node-a", { ips: ["192.168.77.1"] }));
  d.source.add("Service", dns);
  d.source.add("EndpointSlice", slice("10.244.1.11"));
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  assert.equal(runs.length, 1);
  assert.deepEqual(runs[0].map((r) => [r.serviceIP, r.port, r.endpoints]), [
    ["10.96.0.53", 53, ["10.244.1.11"]],
  ]);
  const deleted = 'kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family="IPv4"}';
  assert.equal(await d.metric(deleted), 2);
  assert.ok(d.logs.some((l) => l.startsWith("E") && l.includes("(IPv6) failed: cannot list")));

  fail = true;
  d.source.handler!.onEvent({
    kind: "EndpointSlice",
    previous: slice("10.244.1.11"),
    current: slice("10.244.1.12"),
  });
  await d.clock.advanceAsync(1000);
  assert.deepEqual(runs[1][0].endpoints, ["10.244.1.12"]);
  assert.equal(await d.metric(deleted), 2);
  assert.equal(await d.metric(v4("kubeproxy_sync_proxy_rules_nftables_sync_failures_total")), 0);
  assert.equal(await d.healthz(), 200);
  assert.ok(d.logs.some((l) => l.startsWith("E") && l.includes("conntrack is missing")));
  await d.stop();
});

Deno.test("runProxy() stops the source and every health-check port on abort, leaving the rules", async () => {
  const d = await startDaemon();
  d.source.add(
    "Service",
    service({
      name: "lb",
      type: "LoadBalancer",
      clusterIPs: ["10.96.0.20"],
      ports: [{ name: "http", port: 80, nodePort: 30080 }],
      spec: { externalTrafficPolicy: "Local", healthCheckNodePort: 30300 },
    }),
  );
  d.source.handler!.onSynced();
  await d.clock.advanceAsync(0);
  assert.equal(d.sockets.open.size, 1);
  const scripts = d.scripts.length;
  assert.equal(await d.stop(), 0);
  assert.equal(d.source.stopped, true);
  assert.equal(d.sockets.open.size, 0);
  assert.equal(d.scripts.length, scripts, "no script (no flush) on the way out");
  assert.ok(d.logs.some((l) => l.includes("rules stay in the kernel")));
});

Deno.test("runProxy() rethrows the source's start error (e.g. no API configuration) after cleaning up", async () => {
  const source = new FakeSource();
  source.startError = new Error("no kubeconfig");
  await assert.rejects(
    runProxy({
      config: CONFIG,
      source,
      planner: new NftPlanner(CONFIG),
      apply: () => Promise.resolve(),
      log: createLogger({ write: () => {} }),
      clock: new FakeClock(),
    }, { once: false }),
    /no kubeconfig/,
  );
  assert.equal(source.stopped, true);
});

Deno.test("runProxy() logs the descriptor limit in force at start and the connection budget from it", async () => {
  const d = await startDaemon();
  const line = d.logs.find((l) => l.includes("open files limit"));
  const limit = readDescriptorLimit()!;
  assert.equal(
    line && JSON.parse(line.slice(line.indexOf("] ") + 2)),
    `open files limit ${limit.soft} (hard ${limit.hard}); the health, metrics and ` +
      `health-check ports hold at most ${connectionBudget(limit.soft)} connections`,
  );
  assert.equal(
    d.logs.some((l) => l.includes("is low (under 4096)")),
    limit.soft < 4096,
  );
  await d.stop();
});

/** A source whose start() never ends on its own (an API server that never answers). */
class HangingSource implements Source {
  stopped = false;
  #stop?: () => void;

  start(): Promise<void> {
    return new Promise((resolve) => this.#stop = resolve);
  }

  stop(): Promise<void> {
    this.stopped = true;
    this.#stop?.();
    return Promise.resolve();
  }
}

for (const once of [true, false]) {
  const run = once ? "a once run" : "the daemon";
  Deno.test(`runProxy() ends ${run} on abort while its source is still starting`, async () => {
    const source = new HangingSource();
    const abort = new AbortController();
    const lines: string[] = [];
    const scripts: string[] = [];
    const running = runProxy({
      config: CONFIG,
      source,
      planner: new NftPlanner(CONFIG),
      apply: (script) => {
        scripts.push(script);
        return Promise.resolve();
      },
      log: createLogger({ write: (line) => lines.push(line) }),
      clock: new FakeClock(),
    }, { once, signal: abort.signal });
    await new Promise((resolve) => setTimeout(resolve, 10));
    abort.abort();
    assert.equal(await running, once ? 1 : 0);
    assert.equal(source.stopped, true);
    assert.deepEqual(scripts, [], "nothing applied");
    if (once) assert.ok(lines.some((l) => l.includes("interrupted before the sync")));
  });
}

Deno.test("runProxy() ends a once run on abort while it waits for the initial state", async () => {
  const source = new FakeSource();
  const abort = new AbortController();
  const running = runProxy({
    config: CONFIG,
    source,
    planner: new NftPlanner(CONFIG),
    apply: () => assert.fail("nothing may be applied"),
    log: createLogger({ write: () => {} }),
    clock: new FakeClock(),
  }, { once: true, signal: abort.signal });
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.ok(source.handler !== undefined, "started, never synced");
  abort.abort();
  assert.equal(await running, 1);
  assert.equal(source.stopped, true);
});
