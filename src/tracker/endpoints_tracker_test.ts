import assert from "node:assert/strict";
import fc from "fast-check";
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

/** One slice event of a generated cluster: slice `slice` now belongs to Service `service`. */
interface SliceEvent {
  slice: number;
  /** A Service index; -1: the slice is deleted; -2: a refused slice (no service label). */
  service: number;
  ips: number;
  ready: boolean;
  triggered: number | null;
}

const sliceEvent = fc.record({
  slice: fc.nat(149),
  service: fc.integer({ min: -2, max: 99 }),
  ips: fc.nat(3),
  ready: fc.boolean(),
  triggered: fc.option(fc.nat(1000)),
});

/**
 * Feeds `events` to `t`, each as a change of the slice's last version (in `last`); returns
 * update()'s answers with the pending count after each.
 */
function feed(t: EndpointsChangeTracker, events: SliceEvent[], last: Map<number, unknown>) {
  return events.map((e) => {
    let current: Record<string, unknown> | undefined;
    if (e.service !== -1) {
      const ips = Array.from({ length: e.ips }, (_, i) => ({
        ip: `10.244.${e.slice}.${i + 1}`,
        ready: e.ready,
      }));
      // An empty service-name label: the slice is refused.
      current = slice(`s${e.slice}`, ips, e.service === -2 ? "" : `svc${e.service}`);
      if (e.triggered !== null) {
        (current.metadata as Record<string, unknown>).annotations = {
          "endpoints.kubernetes.io/last-change-trigger-time": new Date(e.triggered * 1000)
            .toISOString(),
        };
      }
    }
    const previous = last.get(e.slice);
    if (previous === undefined && current === undefined) return [false, t.pendingCount];
    if (current === undefined) last.delete(e.slice);
    else last.set(e.slice, current);
    return [t.update(previous, current), t.pendingCount];
  });
}

Deno.test("EndpointsChangeTracker takes in an initial list as it arrives with the result of folding it at the first apply()", () => {
  fc.assert(
    fc.property(
      fc.array(sliceEvent, { maxLength: 400 }),
      fc.array(sliceEvent, { maxLength: 40 }),
      (initial, later) => {
        // `folded` has applied once already, so it keeps every change pending until apply().
        const folded = tracker();
        folded.apply();
        const streamed = tracker();
        const lastFolded = new Map<number, unknown>();
        const lastStreamed = new Map<number, unknown>();
        assert.deepEqual(feed(streamed, initial, lastStreamed), feed(folded, initial, lastFolded));
        assert.equal(streamed.endpoints.size, 0, "nothing applied before apply()");
        for (const round of [initial, later]) {
          if (round === later) {
            assert.deepEqual(feed(streamed, later, lastStreamed), feed(folded, later, lastFolded));
          }
          assert.deepEqual([...streamed.apply()].sort(), [...folded.apply()].sort());
          const entries = (t: EndpointsChangeTracker) =>
            [...t.endpoints].sort(([a], [b]) => a < b ? -1 : 1);
          assert.deepEqual(entries(streamed), entries(folded));
          assert.deepEqual(
            [...streamed.appliedTriggerTimes].sort(),
            [...folded.appliedTriggerTimes].sort(),
          );
          assert.equal(streamed.pendingCount, 0);
        }
      },
    ),
    { numRuns: 200 },
  );
});
