import assert from "node:assert/strict";
import fc from "fast-check";
import { service } from "../../tests/fixtures/objects.ts";
import { ServiceChangeTracker } from "./service_tracker.ts";

const HTTP = "default/web:http/TCP";
const DNS = "default/web:dns/UDP";

const web = (ports = [{ name: "http", port: 80 }], clusterIPs = ["10.96.0.10"]) =>
  service({ name: "web", clusterIPs, ports });
const webTwoPorts = (dnsPort = 53) =>
  service({
    name: "web",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "http", port: 80 }, { name: "dns", port: dnsPort, protocol: "UDP" }],
  });
const broken = service({ name: "web", clusterIPs: ["10.0.0.300"] });

function tracker(lines: string[] = [], rejected: string[] = []) {
  return new ServiceChangeTracker({
    log: (line) => lines.push(line),
    onRejected: (reason) => rejected.push(reason),
  });
}

/** A tracker that has applied `objects` already. */
function applied(...objects: ReturnType<typeof service>[]): ServiceChangeTracker {
  const t = tracker();
  for (const o of objects) t.update(undefined, o);
  t.apply();
  return t;
}

const sorted = (keys: Iterable<string>) => [...keys].sort();

Deno.test("ServiceChangeTracker: a new Service is pending until apply(), which yields each of its ports", () => {
  const t = tracker();
  assert.equal(t.update(undefined, webTwoPorts()), true);
  assert.equal(t.pendingCount, 1, "one Service, however many ports");
  assert.equal(t.services.size, 0, "nothing applied before apply()");
  assert.deepEqual(sorted(t.apply()), [DNS, HTTP]);
  assert.deepEqual(sorted(t.services.keys()), [DNS, HTTP]);
  assert.equal(t.services.get(HTTP)?.port, 80);
  assert.equal(t.pendingCount, 0);
});

Deno.test("ServiceChangeTracker.apply() with nothing pending yields nothing", () => {
  const t = applied(web());
  assert.deepEqual([...t.apply()], []);
  assert.deepEqual([...t.services.keys()], [HTTP]);
});

Deno.test("ServiceChangeTracker: an update yields only the ports whose record changed", () => {
  const t = applied(webTwoPorts(53));
  assert.equal(t.update(webTwoPorts(53), webTwoPorts(5353)), true);
  assert.deepEqual([...t.apply()], [DNS]);
  assert.equal(t.services.get(DNS)?.port, 5353);
});

Deno.test("ServiceChangeTracker: a Service-wide field changes every port of the Service", () => {
  const t = applied(webTwoPorts());
  const moved = service({
    name: "web",
    clusterIPs: ["10.96.0.99"],
    ports: [{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }],
  });
  t.update(webTwoPorts(), moved);
  assert.deepEqual(sorted(t.apply()), [DNS, HTTP]);
  assert.deepEqual(t.services.get(HTTP)?.clusterIPs, ["10.96.0.99"]);
});

Deno.test("ServiceChangeTracker: a renamed port yields the old key (gone) and the new one", () => {
  const t = applied(web());
  t.update(web(), web([{ name: "web", port: 80 }]));
  assert.deepEqual(sorted(t.apply()), [HTTP, "default/web:web/TCP"]);
  assert.deepEqual([...t.services.keys()], ["default/web:web/TCP"]);
});

Deno.test("ServiceChangeTracker: a deleted Service yields all its ports and leaves no record", () => {
  const t = applied(webTwoPorts(), service({ name: "db", clusterIPs: ["10.96.0.20"] }));
  // A delete carries the last object seen; only its name is read.
  assert.equal(t.update(webTwoPorts(), undefined), true);
  assert.deepEqual(sorted(t.apply()), [DNS, HTTP]);
  assert.deepEqual([...t.services.keys()], ["default/db:http/TCP"]);
});

Deno.test("ServiceChangeTracker: an update identical to what is applied is no change", () => {
  const t = applied(web());
  assert.equal(t.update(web(), structuredClone(web())), false);
  assert.equal(t.pendingCount, 0);
  assert.deepEqual([...t.apply()], []);
});

Deno.test("ServiceChangeTracker: changes that end where they started vanish before apply()", () => {
  // Changed and changed back.
  const t = applied(web());
  assert.equal(t.update(web(), web([{ name: "http", port: 81 }])), true);
  assert.equal(t.update(web([{ name: "http", port: 81 }]), web()), false);
  assert.equal(t.pendingCount, 0);
  assert.deepEqual([...t.apply()], []);
  // Added and deleted again.
  const fresh = tracker();
  fresh.update(undefined, web());
  assert.equal(fresh.update(web(), undefined), false);
  assert.deepEqual([...fresh.apply()], []);
  assert.equal(fresh.services.size, 0);
  // Deleted and added back.
  const back = applied(web());
  back.update(web(), undefined);
  assert.equal(back.update(undefined, web()), false);
  assert.deepEqual([...back.apply()], []);
  assert.deepEqual([...back.services.keys()], [HTTP]);
});

Deno.test("ServiceChangeTracker: several updates before apply() yield the net change once", () => {
  const t = applied(webTwoPorts(53));
  t.update(webTwoPorts(53), webTwoPorts(1053));
  t.update(webTwoPorts(1053), webTwoPorts(2053));
  assert.equal(t.pendingCount, 1);
  assert.deepEqual([...t.apply()], [DNS]);
  assert.equal(t.services.get(DNS)?.port, 2053);
});

Deno.test("ServiceChangeTracker: a refused Service has no ports, is logged once and counted", () => {
  const lines: string[] = [];
  const rejected: string[] = [];
  const t = tracker(lines, rejected);
  assert.equal(t.update(undefined, broken), false, "a refused new Service changes nothing");
  assert.deepEqual([...t.apply()], []);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /^cannot use Service default\/web: spec\.clusterIPs\[0\]/);
  assert.equal(rejected.length, 1);
});

Deno.test("ServiceChangeTracker: a Service updated into a refused one loses its ports", () => {
  const lines: string[] = [];
  const t = tracker(lines);
  t.update(undefined, web());
  t.apply();
  assert.equal(t.update(web(), broken), true);
  assert.deepEqual([...t.apply()], [HTTP]);
  assert.equal(t.services.size, 0);
  assert.equal(lines.length, 1);
  // Fixed again: the ports come back.
  t.update(broken, web());
  assert.deepEqual([...t.apply()], [HTTP]);
});

Deno.test("ServiceChangeTracker keeps Services apart by namespace", () => {
  const t = tracker();
  t.update(undefined, service({ namespace: "a", name: "web", clusterIPs: ["10.96.0.1"] }));
  t.update(undefined, service({ namespace: "b", name: "web", clusterIPs: ["10.96.0.2"] }));
  assert.equal(t.pendingCount, 2);
  assert.deepEqual(sorted(t.apply()), ["a/web:http/TCP", "b/web:http/TCP"]);
  t.update(service({ namespace: "a", name: "web", clusterIPs: ["10.96.0.1"] }), undefined);
  assert.deepEqual([...t.apply()], ["a/web:http/TCP"]);
  assert.deepEqual([...t.services.keys()], ["b/web:http/TCP"]);
});

Deno.test("ServiceChangeTracker takes in an initial list as it arrives with the result of folding it at the first apply()", () => {
  // Each event: Service `index` is deleted (0), has one port (1), two ports (2) or is refused (3).
  const events = fc.array(fc.tuple(fc.nat(79), fc.nat(3)), { maxLength: 300 });
  const version = (index: number, shape: number) =>
    shape === 0 ? undefined : service({
      name: `svc${index}`,
      clusterIPs: [shape === 3 ? "10.0.0.300" : `10.96.0.${index + 1}`],
      ports: shape === 1
        ? [{ name: "http", port: 80 }]
        : [{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }],
    });
  const feed = (t: ServiceChangeTracker, list: [number, number][], last: Map<number, unknown>) =>
    list.map(([index, shape]) => {
      const current = version(index, shape);
      const previous = last.get(index);
      if (previous === undefined && current === undefined) return [false, t.pendingCount];
      if (current === undefined) last.delete(index);
      else last.set(index, current);
      return [t.update(previous, current), t.pendingCount];
    });
  fc.assert(
    fc.property(events, events, (initial, later) => {
      // `folded` has applied once already, so it keeps every change pending until apply().
      const folded = tracker();
      folded.apply();
      const streamed = tracker();
      const lastFolded = new Map<number, unknown>();
      const lastStreamed = new Map<number, unknown>();
      for (const round of [initial, later]) {
        assert.deepEqual(feed(streamed, round, lastStreamed), feed(folded, round, lastFolded));
        if (round === initial) assert.equal(streamed.services.size, 0, "nothing applied yet");
        assert.deepEqual(sorted(streamed.apply()), sorted(folded.apply()));
        assert.deepEqual(
          [...streamed.services].sort(([a], [b]) => a < b ? -1 : 1),
          [...folded.services].sort(([a], [b]) => a < b ? -1 : 1),
        );
      }
    }),
    { numRuns: 200 },
  );
});
