import assert from "node:assert/strict";
import { endpointSlice, type EndpointSpec } from "../../tests/fixtures/objects.ts";
import { EndpointsChangeTracker } from "./endpoints_tracker.ts";

const WEB = "default/web:http/TCP";
const API = "default/api:http/TCP";

const slice = (name: string, endpoints: (string | EndpointSpec)[], service = "web") =>
  endpointSlice({ name, service, endpoints });

function tracker(lines: string[] = [], rejected: string[] = []) {
  return new EndpointsChangeTracker({
    hostname: "node-a",
    log: (line) => lines.push(line),
    onRejected: (reason) => rejected.push(reason),
  });
}

/** A tracker that has applied `slices` already. */
function applied(...slices: ReturnType<typeof slice>[]): EndpointsChangeTracker {
  const t = tracker();
  for (const s of slices) t.update(undefined, s);
  t.apply();
  return t;
}

const ips = (t: EndpointsChangeTracker, key = WEB) => t.endpoints.get(key)?.map((e) => e.ip);

Deno.test("EndpointsChangeTracker: a new slice is pending until apply(), which yields its service ports", () => {
  const t = tracker();
  assert.equal(
    t.update(undefined, slice("web-1", ["10.244.1.1", { ip: "10.244.2.2", nodeName: "node-b" }])),
    true,
  );
  assert.equal(t.pendingCount, 1);
  assert.equal(t.endpoints.size, 0, "nothing applied before apply()");
  assert.deepEqual([...t.apply()], [WEB]);
  const endpoints = t.endpoints.get(WEB)!;
  assert.deepEqual(endpoints.map((e) => [e.ip, e.port, e.isLocal]), [
    ["10.244.1.1", 8080, true],
    ["10.244.2.2", 8080, false],
  ]);
  assert.ok(Object.isFrozen(endpoints));
});

Deno.test("EndpointsChangeTracker merges the slices of one Service, an endpoint listed twice once", () => {
  const t = applied(
    slice("web-1", ["10.244.1.1", { ip: "10.244.1.2", ready: false }]),
    slice("web-2", ["10.244.1.2", "10.244.1.3"]),
  );
  assert.deepEqual(ips(t), ["10.244.1.1", "10.244.1.2", "10.244.1.3"]);
  assert.equal(t.endpoints.get(WEB)![1].ready, true, "the ready copy wins");
});

Deno.test("EndpointsChangeTracker: a changed slice yields its Service's ports; other Services stay", () => {
  const t = applied(slice("web-1", ["10.244.1.1"]), slice("api-1", ["10.244.1.9"], "api"));
  assert.equal(t.update(slice("web-1", ["10.244.1.1"]), slice("web-1", ["10.244.1.2"])), true);
  assert.deepEqual([...t.apply()], [WEB]);
  assert.deepEqual(ips(t), ["10.244.1.2"]);
  assert.deepEqual(ips(t, API), ["10.244.1.9"]);
});

Deno.test("EndpointsChangeTracker: an update identical to what is applied is no change", () => {
  const t = applied(slice("web-1", ["10.244.1.1"]));
  assert.equal(t.update(slice("web-1", ["10.244.1.1"]), slice("web-1", ["10.244.1.1"])), false);
  assert.equal(t.pendingCount, 0);
  assert.deepEqual([...t.apply()], []);
});

Deno.test("EndpointsChangeTracker: changes that end where they started vanish before apply()", () => {
  // Changed and changed back.
  const t = applied(slice("web-1", ["10.244.1.1"]));
  t.update(slice("web-1", ["10.244.1.1"]), slice("web-1", ["10.244.1.2"]));
  assert.equal(t.update(slice("web-1", ["10.244.1.2"]), slice("web-1", ["10.244.1.1"])), false);
  assert.equal(t.pendingCount, 0);
  assert.deepEqual([...t.apply()], []);
  // Added and deleted again.
  const fresh = tracker();
  fresh.update(undefined, slice("web-1", ["10.244.1.1"]));
  assert.equal(fresh.update(slice("web-1", ["10.244.1.1"]), undefined), false);
  assert.deepEqual([...fresh.apply()], []);
  assert.equal(fresh.endpoints.size, 0);
});

Deno.test("EndpointsChangeTracker: reverting one slice keeps the pending change of another", () => {
  // Two slices of one Service pending: reverting one keeps the other's change.
  const t = applied(slice("web-1", ["10.244.1.1"]), slice("web-2", ["10.244.1.2"]));
  t.update(slice("web-1", ["10.244.1.1"]), slice("web-1", ["10.244.1.5"]));
  t.update(slice("web-2", ["10.244.1.2"]), slice("web-2", ["10.244.1.6"]));
  assert.equal(t.update(slice("web-1", ["10.244.1.5"]), slice("web-1", ["10.244.1.1"])), true);
  assert.deepEqual([...t.apply()], [WEB]);
  assert.deepEqual(ips(t), ["10.244.1.1", "10.244.1.6"]);
});

Deno.test("EndpointsChangeTracker: deleting the last slice yields the ports and drops the endpoints", () => {
  const t = applied(slice("web-1", ["10.244.1.1"]), slice("web-2", ["10.244.1.2"]));
  t.update(slice("web-1", ["10.244.1.1"]), undefined);
  assert.deepEqual([...t.apply()], [WEB]);
  assert.deepEqual(ips(t), ["10.244.1.2"]);
  t.update(slice("web-2", ["10.244.1.2"]), undefined);
  assert.deepEqual([...t.apply()], [WEB]);
  assert.equal(t.endpoints.size, 0);
});

Deno.test("EndpointsChangeTracker: a slice relabelled to another Service yields both Services' ports", () => {
  const t = applied(slice("shared-1", ["10.244.1.1"]));
  assert.equal(
    t.update(slice("shared-1", ["10.244.1.1"]), slice("shared-1", ["10.244.1.1"], "api")),
    true,
  );
  assert.equal(t.pendingCount, 2, "one change leaving web, one arriving at api");
  assert.deepEqual([...t.apply()].sort(), [API, WEB]);
  assert.equal(t.endpoints.get(WEB), undefined);
  assert.deepEqual(ips(t, API), ["10.244.1.1"]);
});

Deno.test("EndpointsChangeTracker: a port renamed in a slice yields the old key (gone) and the new one", () => {
  const t = applied(slice("web-1", ["10.244.1.1"]));
  const renamed = endpointSlice({
    name: "web-1",
    service: "web",
    ports: [{ name: "web", port: 8080 }],
    endpoints: ["10.244.1.1"],
  });
  t.update(slice("web-1", ["10.244.1.1"]), renamed);
  assert.deepEqual([...t.apply()].sort(), [WEB, "default/web:web/TCP"]);
  assert.deepEqual([...t.endpoints.keys()], ["default/web:web/TCP"]);
});

Deno.test("EndpointsChangeTracker: a refused slice is logged, counted, and stands for no endpoints", () => {
  const lines: string[] = [];
  const rejected: string[] = [];
  const t = tracker(lines, rejected);
  t.update(undefined, slice("web-1", ["10.244.1.1"]));
  t.apply();
  const unlabelled = slice("web-1", ["10.244.1.1"]);
  delete (unlabelled.metadata as { labels: Record<string, string> }).labels[
    "kubernetes.io/service-name"
  ];
  assert.equal(t.update(slice("web-1", ["10.244.1.1"]), unlabelled), true);
  assert.deepEqual([...t.apply()], [WEB]);
  assert.equal(t.endpoints.size, 0);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /^cannot use EndpointSlice default\/web-1: .*service-name/);
  assert.equal(rejected.length, 1);
});

Deno.test("EndpointsChangeTracker ignores slices of headless Services and FQDN slices", () => {
  const t = tracker();
  const headless = endpointSlice({
    name: "web-1",
    service: "web",
    endpoints: ["10.244.1.1"],
    labels: { "service.kubernetes.io/headless": "" },
  });
  assert.equal(t.update(undefined, headless), false);
  const fqdn = endpointSlice({
    name: "web-2",
    service: "web",
    addressType: "FQDN",
    endpoints: ["example.com"],
  });
  assert.equal(t.update(undefined, fqdn), false);
  assert.deepEqual([...t.apply()], []);
});

Deno.test("EndpointsChangeTracker reports the trigger times of the changes apply() folds in, once", () => {
  const t = tracker();
  const at = (iso: string) => {
    const s = slice("web-1", ["10.244.1.1"]);
    (s.metadata as Record<string, unknown>).annotations = {
      "endpoints.kubernetes.io/last-change-trigger-time": iso,
    };
    return s;
  };
  t.update(undefined, at("2026-11-22T20:00:00Z"));
  t.update(at("2026-11-22T20:00:00Z"), at("2026-11-22T20:00:05Z"));
  t.apply();
  assert.deepEqual(t.appliedTriggerTimes, [
    Date.parse("2026-11-22T20:00:00Z"),
    Date.parse("2026-11-22T20:00:05Z"),
  ]);
  t.apply();
  assert.deepEqual(t.appliedTriggerTimes, []);
});
