import assert from "node:assert/strict";
import type { ObjectEvent, ObjectKind, RawObject } from "./events.ts";
import { objectKey } from "./object_key.ts";
import { remembered } from "./reflector.ts";
import {
  ApiConfigError,
  ApiSource,
  type ApiSourceOptions,
  ApiUnreachableError,
} from "./api_source.ts";
import { TestApiServer, type TestApiServerOptions } from "../../tests/apiserver/server.ts";
import { ServiceHealthServer } from "../server/health_check_ports.ts";
import { healthCheckEvents } from "./event_recorder.ts";

// ---------------------------------------------------------------------------------------------
// Helpers

const HEADLESS = { "service.kubernetes.io/headless": "" };
const OTHER_PROXY = { "service.kubernetes.io/service-proxy-name": "other-proxy" };

function svc(name: string, labels: Record<string, string> = {}, port = 80): RawObject {
  return {
    metadata: { namespace: "default", name, labels },
    spec: { clusterIP: "10.96.0.10", ports: [{ port, protocol: "TCP" }] },
  };
}

function slice(name: string, labels: Record<string, string> = {}): RawObject {
  return {
    metadata: {
      namespace: "default",
      name,
      labels: { "kubernetes.io/service-name": name.split("-")[0], ...labels },
    },
    addressType: "IPv4",
    endpoints: [{ addresses: ["10.0.0.1"], conditions: { ready: true } }],
  };
}

function node(name: string): RawObject {
  return {
    metadata: { name },
    status: { addresses: [{ type: "InternalIP", address: "192.0.2.1" }] },
  };
}

function serviceCIDR(name: string): RawObject {
  return { metadata: { name }, spec: { cidrs: ["10.96.0.0/16"] } };
}

function rvOf(object: RawObject): string {
  return String((object.metadata as Record<string, unknown>).resourceVersion);
}

function summary(event: ObjectEvent): string {
  const object = (event.current ?? event.previous)!;
  const what = event.previous === undefined
    ? "add"
    : event.current === undefined
    ? "delete"
    : "update";
  return `${what} ${objectKey(event.kind, object)}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `condition` every 10 ms; fails after `timeoutMs` (never waits without bound). */
async function waitFor(what: string, condition: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(10);
  }
}

/** A running source against a running test server, with what the source emitted. */
interface Harness extends AsyncDisposable {
  server: TestApiServer;
  source: ApiSource;
  events: ObjectEvent[];
  logs: string[];
  synced: () => number;
  /** The objects as a consumer of the events sees them, by kind and key. */
  mirror: Map<ObjectKind, Map<string, RawObject>>;
  /** Events that did not fit the consumer's view (add of a known key, stale previous, ...). */
  violations: string[];
  /** Waits until the consumer's view of every kind equals what the server would select. */
  converged: (what: string, timeoutMs?: number) => Promise<void>;
  /**
   * Events emitted from index `from` on, summarised, grouped by kind in {@link KINDS} order: each
   * kind has its own watch, so only the order within a kind is defined.
   */
  since: (from: number) => string[];
  /** Requests for the whole state of `kind` so far: LISTs and watch-lists. */
  initialReads: (kind: ObjectKind) => number;
}

interface HarnessOptions {
  server?: TestApiServerOptions;
  source?: Partial<ApiSourceOptions>;
  /** Fills the server before the source starts. */
  seed?: (server: TestApiServer) => void;
}

/** What the source should hold for each kind, given the server's content. */
function expected(server: TestApiServer, kind: ObjectKind): Map<string, string> {
  const selected = new Map<string, string>();
  for (const object of server.list(kind)) {
    const labels = ((object.metadata as Record<string, unknown>).labels ?? {}) as object;
    if (
      kind !== "Node" && (Object.hasOwn(labels, "service.kubernetes.io/headless") ||
        Object.hasOwn(labels, "service.kubernetes.io/service-proxy-name"))
    ) continue;
    if (kind === "Node" && (object.metadata as Record<string, unknown>).name !== "node-a") continue;
    selected.set(objectKey(kind, object)!, rvOf(object));
  }
  return selected;
}

const KINDS: ObjectKind[] = ["Service", "EndpointSlice", "Node", "ServiceCIDR"];

async function startHarness(options: HarnessOptions = {}): Promise<Harness> {
  const server = await TestApiServer.start({ bookmarkIntervalMs: 100, ...options.server });
  options.seed?.(server);
  const dir = await Deno.makeTempDir({ prefix: "api-source-test-" });
  const kubeconfig = `${dir}/kubeconfig`;
  await Deno.writeTextFile(
    kubeconfig,
    `apiVersion: v1
kind: Config
clusters:
  - name: test
    cluster:
      server: ${server.url}
users:
  - name: proxy
    user:
      token: test-token
contexts:
  - name: test
    context: {cluster: test, user: proxy}
current-context: test
`,
  );
  const events: ObjectEvent[] = [];
  const logs: string[] = [];
  const violations: string[] = [];
  const mirror = new Map<ObjectKind, Map<string, RawObject>>(KINDS.map((k) => [k, new Map()]));
  let synced = 0;
  const source = new ApiSource({
    kubeconfig,
    hostname: "node-a",
    log: (line) => logs.push(line),
    idleTimeoutMs: 1000,
    backoff: { initialMs: 50, maxMs: 200 },
    absentRetryMs: 200,
    ...options.source,
  });
  await source.start({
    onEvent: (event) => {
      events.push(event);
      const store = mirror.get(event.kind)!;
      const key = objectKey(event.kind, (event.current ?? event.previous)!)!;
      const known = store.get(key);
      if (event.previous === undefined && known !== undefined) {
        violations.push(`add of known ${key}`);
      }
      // A previous is what the source remembers of the last current: its name and version.
      if (event.previous !== undefined && !sameRemembered(event.previous, known)) {
        violations.push(`${summary(event)} with a previous that is not the last current`);
      }
      if (event.current !== undefined && event.current.kind !== event.kind) {
        violations.push(`${key} without its kind`);
      }
      if (event.current === undefined) store.delete(key);
      else store.set(key, event.current);
    },
    onSynced: () => synced++,
  });
  const agrees = () =>
    KINDS.every((kind) => {
      const want = expected(server, kind);
      const have = mirror.get(kind)!;
      return have.size === want.size &&
        [...want].every(([key, rv]) => have.has(key) && rvOf(have.get(key)!) === rv);
    });
  return {
    server,
    source,
    events,
    logs,
    synced: () => synced,
    mirror,
    violations,
    converged: (what, timeoutMs) => waitFor(what, agrees, timeoutMs),
    since: (from) =>
      KINDS.flatMap((kind) => events.slice(from).filter((e) => e.kind === kind).map(summary)),
    initialReads: (kind) =>
      server.requests.filter((r) =>
        r.kind === kind && (!r.watch || r.params.sendInitialEvents === "true")
      ).length,
    async [Symbol.asyncDispose]() {
      await source.stop();
      await server.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function sameRemembered(previous: RawObject, known: RawObject | undefined): boolean {
  return known !== undefined &&
    JSON.stringify(previous) === JSON.stringify(remembered(known));
}

function seedCluster(server: TestApiServer): void {
  server.create("Service", svc("web"));
  server.create("Service", svc("api"));
  server.create("EndpointSlice", slice("web-abc"));
  server.create("Node", node("node-a"));
  server.create("Node", node("node-b"));
  server.create("ServiceCIDR", serviceCIDR("kubernetes"));
}

// ---------------------------------------------------------------------------------------------
// Listing and watching

Deno.test("ApiSource lists every kind, calls onSynced once, then streams each change exactly once", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await waitFor("the initial sync", () => h.synced() === 1);
  await h.converged("the initial objects");
  assert.deepEqual(h.since(0).sort(), [
    "add EndpointSlice/default/web-abc",
    "add Node/node-a",
    "add Service/default/api",
    "add Service/default/web",
    "add ServiceCIDR/kubernetes",
  ]);

  const mark = h.events.length;
  h.server.create("Service", svc("db"));
  h.server.update("Service", svc("web", {}, 8080));
  h.server.delete("Service", { namespace: "default", name: "api" });
  h.server.update("Node", node("node-b")); // not ours
  h.server.update("Node", node("node-a"));
  await h.converged("the changes");
  // Every watch has read up to now (a bookmark came after anything else): still nothing more.
  const latest = h.server.resourceVersion;
  await waitFor(
    "bookmarks at the latest resourceVersion on every watch",
    () => KINDS.every((kind) => Number(h.source.resourceVersion(kind)) >= latest),
  );
  assert.deepEqual(h.since(mark), [
    "add Service/default/db",
    "update Service/default/web",
    "delete Service/default/api",
    "update Node/node-a",
  ]);
  const web = h.mirror.get("Service")!.get("Service/default/web")!;
  assert.deepEqual((web.spec as { ports: unknown[] }).ports, [{ port: 8080, protocol: "TCP" }]);
  assert.equal(web.apiVersion, "v1");
  assert.deepEqual(h.violations, []);
  assert.equal(h.synced(), 1);
  assert.ok(h.server.requests.every((r) => r.authorization === "Bearer test-token"));
});

Deno.test("ApiSource streams the initial state as one watch-list per kind, no LIST", async () => {
  await using h = await startHarness({
    seed: (server) => {
      seedCluster(server);
      for (let i = 0; i < 10; i++) server.create("Service", svc(`s${i}`));
    },
  });
  await h.converged("all 12 services");
  assert.equal(h.mirror.get("Service")!.size, 12);
  for (const kind of ["Service", "EndpointSlice", "Node", "ServiceCIDR"] as const) {
    const reads = h.server.requests.filter((r) => r.kind === kind);
    assert.equal(reads.filter((r) => !r.watch).length, 0, `${kind}: no LIST`);
    assert.equal(reads[0].params.sendInitialEvents, "true");
    assert.equal(reads[0].params.resourceVersionMatch, "NotOlderThan");
  }
});

Deno.test("ApiSource lists from the watch cache, in one piece, where watch-list is off", async () => {
  await using h = await startHarness({
    server: { watchList: false },
    source: { pageSize: 3 },
    seed: (server) => {
      seedCluster(server);
      for (let i = 0; i < 10; i++) server.create("Service", svc(`s${i}`));
    },
  });
  await h.converged("all 12 services");
  const lists = h.server.requests.filter((r) => r.kind === "Service" && !r.watch);
  assert.equal(lists.length, 1);
  assert.equal(lists[0].params.resourceVersion, "0");
  assert.equal(lists[0].params.continue, undefined);
  assert.equal(h.mirror.get("Service")!.size, 12);
  assert.ok(h.logs.some((l) => l.includes("does not stream Services as a watch-list (422")));
});

Deno.test("ApiSource asks for upstream's label and field selectors and follows objects leaving them", async () => {
  await using h = await startHarness({
    seed: (server) => {
      seedCluster(server);
      server.create("Service", svc("headless", HEADLESS));
      server.create("Service", svc("elsewhere", OTHER_PROXY));
      server.create("EndpointSlice", slice("headless-x", HEADLESS));
    },
  });
  await h.converged("the selected objects");
  assert.equal(h.mirror.get("Service")!.has("Service/default/headless"), false);
  assert.equal(h.mirror.get("EndpointSlice")!.has("EndpointSlice/default/headless-x"), false);
  assert.deepEqual([...h.mirror.get("Node")!.keys()], ["Node/node-a"]);
  const selectorOf = (kind: ObjectKind) => h.server.requests.find((r) => r.kind === kind)!.params;
  const proxyLabels = "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";
  assert.equal(selectorOf("Service").labelSelector, proxyLabels);
  assert.equal(selectorOf("EndpointSlice").labelSelector, proxyLabels);
  assert.equal(selectorOf("Node").fieldSelector, "metadata.name=node-a");

  const mark = h.events.length;
  h.server.update("Service", svc("web", OTHER_PROXY));
  h.server.update("Service", svc("headless"));
  await h.converged("objects moving across the selector");
  assert.deepEqual(h.since(mark), ["delete Service/default/web", "add Service/default/headless"]);
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource resumes from bookmarked resourceVersions without relisting", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await h.converged("the initial objects");
  // Writes to other kinds advance the global resourceVersion; bookmarks carry it to every watch.
  for (let i = 0; i < 5; i++) h.server.create("Service", svc(`s${i}`));
  const latest = h.server.resourceVersion;
  await waitFor(
    "a bookmark to carry the new resourceVersion to the Node watch",
    () => Number(h.source.resourceVersion("Node")) >= latest,
  );
  h.server.compact(); // anything older than now is gone
  h.server.dropWatches();
  h.server.update("Node", node("node-a"));
  await h.converged("the node update after the reconnect");
  assert.equal(h.initialReads("Node"), 1, "the Node watch resumed from its bookmark");
});

// ---------------------------------------------------------------------------------------------
// Faults

Deno.test("ApiSource survives dropped watches and resumes without relisting", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await h.converged("the initial objects");
  const mark = h.events.length;
  h.server.dropWatches();
  h.server.create("Service", svc("db"));
  h.server.delete("EndpointSlice", { namespace: "default", name: "web-abc" });
  await h.converged("the changes made while reconnecting");
  assert.deepEqual(h.since(mark), [
    "add Service/default/db",
    "delete EndpointSlice/default/web-abc",
  ]);
  assert.equal(h.initialReads("Service"), 1);
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource restarts a stalled watch after the idle timeout", async () => {
  await using h = await startHarness({ seed: seedCluster, source: { idleTimeoutMs: 300 } });
  await h.converged("the initial objects");
  const release = h.server.stall();
  h.server.create("Service", svc("db"));
  await waitFor("the idle watchdog", () => h.logs.some((l) => l.includes("nothing received")));
  release();
  await h.converged("the change held back by the stall");
  assert.equal(h.mirror.get("Service")!.has("Service/default/db"), true);
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource retries through 500s with backoff", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await h.converged("the initial objects");
  h.server.failNext(4, { status: 500 });
  h.server.dropWatches();
  h.server.update("Service", svc("web", {}, 8443));
  await h.converged("the update after the failures");
  assert.ok(h.logs.some((l) => l.includes("500") && l.includes("retrying in")), h.logs.join("\n"));
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource relists after 410 Gone, emitting deletes for vanished objects and updates only for changed ones", async () => {
  await using h = await startHarness({
    seed: (server) => {
      seedCluster(server);
      server.create("Service", svc("gone"));
    },
  });
  await h.converged("the initial objects");
  const mark = h.events.length;
  // All in one tick: the dropped watches cannot see these, and must resume after compaction.
  h.server.dropWatches();
  h.server.delete("Service", { namespace: "default", name: "gone" });
  h.server.update("Service", svc("api", {}, 9090));
  h.server.create("Service", svc("new"));
  h.server.compact();
  await h.converged("the relisted state");
  assert.deepEqual(h.since(mark), [
    "update Service/default/api",
    "add Service/default/new",
    "delete Service/default/gone",
  ]);
  assert.equal(h.initialReads("Service"), 2);
  assert.ok(h.logs.some((l) => l.includes("expired; listing again")), h.logs.join("\n"));
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource keeps up with a slow server", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await h.converged("the initial objects");
  h.server.slow(300);
  h.server.dropWatches();
  h.server.create("EndpointSlice", slice("api-xyz"));
  await h.converged("the slice created while the server is slow");
  assert.deepEqual(h.violations, []);
});

// @kubernetes/client-node's watch under Deno noticed a killed server only after 37 s (DESIGN.md
// §6). The idle watchdog is an hour away here: noticing can only come from the broken streams.
Deno.test("ApiSource notices a killed server without waiting for its idle timeout, and converges after it restarts on the same port", async () => {
  await using h = await startHarness({
    seed: seedCluster,
    source: { idleTimeoutMs: 3_600_000 },
  });
  await h.converged("the initial objects");
  await h.server.kill();
  await waitFor("the broken watches to be noticed", () => h.logs.length >= 4);
  h.server.delete("Service", { namespace: "default", name: "web" });
  h.server.create("Service", svc("db"));
  // Reconnects fail while the server is down.
  const retries = () => h.logs.filter((l) => l.includes("retrying in")).length;
  const before = retries();
  await waitFor("failed reconnects", () => retries() >= before + 2);
  await h.server.restart();
  await h.converged("the changes made while the server was down");
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource treats missing ServiceCIDRs as none, syncs anyway, and picks them up later", async () => {
  await using h = await startHarness({
    seed: (server) => {
      seedCluster(server);
      server.setResourceServed("ServiceCIDR", false);
    },
  });
  await waitFor("the initial sync", () => h.synced() === 1);
  assert.equal(h.mirror.get("ServiceCIDR")!.size, 0);
  assert.equal(h.mirror.get("Service")!.size, 2);
  h.server.setResourceServed("ServiceCIDR", true);
  await h.converged("the ServiceCIDR once served");
  assert.equal(h.mirror.get("ServiceCIDR")!.size, 1);
  assert.equal(h.synced(), 1);
  assert.equal(h.logs.filter((l) => l.includes("not served here")).length, 1);
});

Deno.test("ApiSource reads ServiceCIDRs at networking.k8s.io/v1beta1 where v1 is not served (1.31, 1.32)", async () => {
  await using h = await startHarness({
    server: { serviceCIDRVersion: "v1beta1" },
    seed: seedCluster,
  });
  await waitFor("the initial sync", () => h.synced() === 1);
  await h.converged("the v1beta1 ServiceCIDR");
  const [listed] = h.mirror.get("ServiceCIDR")!.values();
  assert.equal(listed.apiVersion, "networking.k8s.io/v1beta1");
  assert.deepEqual((listed.spec as Record<string, unknown>).cidrs, ["10.96.0.0/16"]);
  // Changes arrive through the v1beta1 watch.
  h.server.create("ServiceCIDR", {
    metadata: { name: "extra" },
    spec: { cidrs: ["10.97.0.0/16"] },
  });
  await h.converged("the ServiceCIDR added later");
  assert.equal(h.mirror.get("ServiceCIDR")!.size, 2);
  const paths = new Set(
    h.server.requests.filter((r) => r.kind === "ServiceCIDR").map((r) => r.path),
  );
  assert.deepEqual([...paths], ["/apis/networking.k8s.io/v1beta1/servicecidrs"]);
  assert.equal(h.logs.filter((l) => l.includes("not served at networking.k8s.io/v1 ")).length, 1);
  assert.equal(h.logs.filter((l) => l.includes("not served here")).length, 0);
  assert.deepEqual(h.violations, []);
});

Deno.test("ApiSource with recordEvents records upstream's Starting Event on its Node through the API server", async () => {
  await using h = await startHarness({ seed: seedCluster, source: { recordEvents: true } });
  await waitFor("the Starting Event", () => h.server.events.length === 1);
  const [{ namespace, apiVersion, event }] = h.server.events;
  assert.equal(namespace, "default");
  assert.equal(apiVersion, "events.k8s.io/v1");
  assert.equal(event.reason, "Starting");
  assert.equal(event.type, "Normal");
  assert.equal(event.reportingController, "kube-proxy");
  assert.equal(event.reportingInstance, "kube-proxy-node-a");
  assert.deepEqual(event.regarding, { kind: "Node", name: "node-a", uid: "node-a" });
  const post = h.server.requests.find((r) => r.method === "POST")!;
  assert.equal(post.authorization, "Bearer test-token", "with the source's credentials");
});

Deno.test("ApiSource records FailedToStartServiceHealthcheck on the Service whose health-check port cannot be bound", async () => {
  await using h = await startHarness({ seed: seedCluster, source: { recordEvents: true } });
  await waitFor("the initial sync", () => h.synced() === 1);
  const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const health = new ServiceHealthServer({
    proxyHealthy: () => true,
    ...healthCheckEvents(h.source, "node-a"),
  });
  try {
    const services = new Map([["shop/cart", {
      namespace: "shop",
      name: "cart",
      port: busy.addr.port,
      localEndpoints: 1,
    }]]);
    await health.sync(services, { bindIPs: ["127.0.0.1"] });
    await health.sync(services, { bindIPs: ["127.0.0.1"] }); // still busy: recorded once
    await waitFor(
      "the Warning",
      () => h.server.events.some((e) => e.event.reason === "FailedToStartServiceHealthcheck"),
    );
    const warnings = h.server.events.filter((e) => e.event.type === "Warning");
    assert.equal(warnings.length, 1);
    assert.equal(warnings[0].namespace, "shop");
    assert.equal(warnings[0].event.action, "Listen");
    assert.deepEqual(warnings[0].event.regarding, {
      kind: "Service",
      namespace: "shop",
      name: "cart",
      uid: "shop/cart",
    });
    assert.match(
      String(warnings[0].event.note),
      new RegExp(
        `^node node-a failed to start healthcheck "shop/cart" on port ${busy.addr.port}: `,
      ),
    );
  } finally {
    busy.close();
    await health.close();
  }
});

Deno.test("ApiSource records no Event without recordEvents (one-shot runs, explain)", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await waitFor("the initial sync", () => h.synced() === 1);
  await new Promise((resolve) => setTimeout(resolve, 200));
  assert.deepEqual(h.server.events, []);
  assert.equal(h.server.requests.filter((r) => r.method !== "GET").length, 0);
});

Deno.test("ApiSource does not let a failing ServiceCIDR list hold up the initial sync", async () => {
  await using h = await startHarness({
    seed: (server) => {
      seedCluster(server);
      server.failNext(1000, { status: 500, kind: "ServiceCIDR" });
    },
  });
  await waitFor("the initial sync", () => h.synced() === 1);
  assert.equal(h.mirror.get("ServiceCIDR")!.size, 0);
  assert.equal(h.mirror.get("Service")!.size, 2);
  h.server.clearFailures();
  await h.converged("the ServiceCIDR after the failures");
  assert.equal(h.mirror.get("ServiceCIDR")!.size, 1);
  assert.equal(h.synced(), 1);
});

Deno.test("ApiSource.stop() ends every loop while the server is still stalled", async () => {
  await using h = await startHarness({ seed: seedCluster });
  await h.converged("the initial objects");
  h.server.stall();
  const asked = h.server.requests.length;
  h.server.dropWatches();
  // The source's new requests reach the server and are held there.
  await waitFor("requests held by the stall", () => h.server.requests.length > asked);
  const stopped = h.source.stop().then(() => "stopped");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const held = new Promise((resolve) => timer = setTimeout(() => resolve("still held"), 30_000));
  assert.equal(await Promise.race([stopped, held]), "stopped", "stop() waited for the server");
  clearTimeout(timer);
  const count = h.events.length;
  const requests = h.server.requests.length;
  h.server.release();
  h.server.create("Service", svc("late"));
  // Nothing of the source is left to see it: no event, no request (and no timer or open
  // request either, or the test's op sanitizer fails it).
  assert.equal(h.events.length, count);
  assert.equal(h.server.requests.length, requests);
});

// ---------------------------------------------------------------------------------------------
// Configuration

Deno.test("ApiSource uses --master alone, without credentials", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Node", node("node-a"));
  let synced = false;
  const source = new ApiSource({ master: server.url, hostname: "node-a", log: () => {} });
  await source.start({ onEvent: () => {}, onSynced: () => (synced = true) });
  try {
    await waitFor("the sync", () => synced);
    assert.equal(source.store("Node").size, 1);
    assert.ok(server.requests.every((r) => r.authorization === undefined));
  } finally {
    await source.stop();
  }
});

Deno.test("ApiSource.start() with syncTimeoutMs resolves once the initial state is listed", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Node", node("node-a"));
  let synced = 0;
  const source = new ApiSource({
    master: server.url,
    hostname: "node-a",
    log: () => {},
    syncTimeoutMs: 5000,
  });
  try {
    await source.start({ onEvent: () => {}, onSynced: () => synced++ });
    assert.equal(synced, 1, "synced before start() resolved");
  } finally {
    await source.stop();
  }
});

Deno.test("ApiSource.start() with syncTimeoutMs gives up on a server that does not answer, naming it", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  await server.kill();
  const source = new ApiSource({
    master: server.url,
    hostname: "node-a",
    log: () => {},
    backoff: { initialMs: 50, maxMs: 100 },
    syncTimeoutMs: 500,
  });
  const started = performance.now();
  await assert.rejects(
    () => source.start({ onEvent: () => {}, onSynced: () => assert.fail("no sync") }),
    (e: unknown) =>
      e instanceof ApiUnreachableError &&
      e.message.startsWith(
        `the API server at ${server.url} did not send the initial state within 0.5 s: cannot `,
      ),
  );
  assert.ok(performance.now() - started < 2000);
});

Deno.test("ApiSource.stop() ends a start() that waits for the initial state", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.stall();
  const source = new ApiSource({
    master: server.url,
    hostname: "node-a",
    log: () => {},
    syncTimeoutMs: 60_000,
  });
  const starting = source.start({ onEvent: () => {}, onSynced: () => {} });
  await sleep(100);
  const stopping = performance.now();
  await source.stop();
  await starting;
  assert.ok(performance.now() - stopping < 500);
  server.release();
});

Deno.test("ApiSource.start() fails with ApiConfigError on an unreadable kubeconfig", async () => {
  const source = new ApiSource({ kubeconfig: "/nonexistent/kubeconfig", hostname: "node-a" });
  await assert.rejects(
    () => source.start({ onEvent: () => {}, onSynced: () => {} }),
    ApiConfigError,
  );
  await source.stop();
});

Deno.test("ApiSource refuses an empty hostname", () => {
  assert.throws(() => new ApiSource({ hostname: "" }), RangeError);
});
