/**
 * Specs of the per-service connection counters: parsing nft's JSON listing, summing service
 * ports over entry points and families, and staying monotonic across element re-adds.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  type ElementCount,
  parseElementCounts,
  parsePortComment,
  ServiceCounters,
} from "./service_counters.ts";

/** `nft -j list map ip kube-nftproxy service-ips` as nft 1.0.6 prints it. */
const LISTING = JSON.stringify({
  nftables: [
    { metainfo: { version: "1.0.6", json_schema_version: 1 } },
    {
      map: {
        family: "ip",
        name: "service-ips",
        table: "kube-nftproxy",
        type: ["ipv4_addr", "inet_proto", "inet_service"],
        map: "verdict",
        elem: [
          [
            {
              elem: {
                val: { concat: ["10.96.0.10", "tcp", 80] },
                comment: "default/web:http",
                counter: { packets: 7, bytes: 420 },
              },
            },
            { goto: { target: "lb-tcp-2" } },
          ],
          [
            {
              elem: {
                val: { concat: ["10.96.0.11", "udp", 53] },
                comment: "kube-system/dns",
                counter: { packets: 2, bytes: 100 },
              },
            },
            { goto: { target: "lb-udp-1" } },
          ],
          [
            { elem: { val: { concat: ["10.96.0.12", "tcp", 1] }, comment: "no counter" } },
            { goto: { target: "reject-chain" } },
          ],
        ],
        stmt: [{ counter: null }],
      },
    },
  ],
});

function element(comment: string, packets: number, options: Partial<ElementCount> = {}) {
  return { family: "ip", map: "service-ips", key: "k", comment, packets, ...options };
}

/** A counter source returning the given listings one after the other. */
function scripted(...listings: ElementCount[][]): () => Promise<ElementCount[]> {
  let i = 0;
  return () => Promise.resolve(listings[Math.min(i++, listings.length - 1)]);
}

Deno.test("parseElementCounts() reads each commented element's packets from nft's JSON", () => {
  assert.deepEqual(parseElementCounts(LISTING), [
    {
      family: "ip",
      map: "service-ips",
      key: "10.96.0.10 . tcp . 80",
      comment: "default/web:http",
      packets: 7,
    },
    {
      family: "ip",
      map: "service-ips",
      key: "10.96.0.11 . udp . 53",
      comment: "kube-system/dns",
      packets: 2,
    },
  ]);
});

/** Counted elements of both dispatch maps and families, as one nft release listed them. */
function fixtureCounts(release: string): ElementCount[] {
  const fixtures = new URL(`../../tests/fixtures/nft/${release}/`, import.meta.url);
  return ["ip", "ip6"].flatMap((family) =>
    ["service-ips", "service-nodeports"].flatMap((map) =>
      parseElementCounts(
        Deno.readTextFileSync(new URL(`list-map-${family}-${map}.json`, fixtures)),
      )
    )
  );
}

Deno.test("parseElementCounts() reads nft 1.0.6's and 1.1.3's JSON (protocol numbers) alike", () => {
  const old = fixtureCounts("1.0.6");
  assert.deepEqual(fixtureCounts("1.1.3"), old);
  assert.deepEqual(fixtureCounts("1.1.3-protocols"), old);
  const counted = old.filter((e) => e.packets > 0).map((e) =>
    `${e.family} ${e.map} ${e.key} ${e.comment} ${e.packets}`
  );
  assert.deepEqual(counted, [
    "ip service-ips 10.96.0.10 . tcp . 80 default/web:http 3",
    "ip service-ips 10.96.0.19 . tcp . 80 default/sticky:http 1",
    "ip service-ips 10.96.0.10 . udp . 80 default/web:echo 1",
    "ip service-nodeports tcp . 30080 default/node-port:http 2",
    "ip6 service-ips fd00:10:96::10 . tcp . 80 default/web:http 2",
  ]);
  assert.equal(old.length, 29);
});

Deno.test("parsePortComment() splits namespace/name:port and accepts unnamed ports", () => {
  assert.deepEqual(parsePortComment("default/web:http"), {
    namespace: "default",
    service: "web",
    port: "http",
  });
  assert.deepEqual(parsePortComment("default/web"), {
    namespace: "default",
    service: "web",
    port: "",
  });
  assert.deepEqual(parsePortComment("not a service"), undefined);
});

Deno.test("ServiceCounters.read() sums a service port over entry points and families", async () => {
  const counters = new ServiceCounters(scripted([
    element("default/web:http", 3, { key: "cluster-ip" }),
    element("default/web:http", 2, { key: "external-ip" }),
    element("default/web:http", 4, { map: "service-nodeports", key: "30080" }),
    element("default/web:http", 1, { family: "ip6", key: "cluster-ip" }),
    element("default/db:sql", 5),
  ]));
  assert.deepEqual(await counters.read(), [
    { namespace: "default", service: "db", port: "sql", connections: 5 },
    { namespace: "default", service: "web", port: "http", connections: 10 },
  ]);
});

Deno.test("ServiceCounters.read() stays monotonic when a re-sync re-adds elements at 0", async () => {
  const counters = new ServiceCounters(scripted(
    [element("default/web:http", 5)],
    [element("default/web:http", 8)],
    [element("default/web:http", 2)], // flushed and re-added, then 2 new connections
    [],
  ));
  const totals: number[] = [];
  for (let i = 0; i < 4; i++) totals.push((await counters.read())[0].connections);
  assert.deepEqual(totals, [5, 8, 10, 10]);
});

Deno.test("ServiceCounters.read() shares one kernel read between concurrent callers", async () => {
  let reads = 0;
  const counters = new ServiceCounters(() => {
    reads++;
    return Promise.resolve([element("default/web:http", 4)]);
  });
  const [a, b] = await Promise.all([counters.read(), counters.read()]);
  assert.deepEqual([reads, a[0].connections, b[0].connections], [1, 4, 4]);
});

Deno.test("ServiceCounters.read() counts a key taken over by another service port from 0", async () => {
  // The cluster IP's element is removed with its Service and added again for another one: the
  // new port's count is its own, however it compares with the old one's.
  const counters = new ServiceCounters(scripted(
    [element("default/web:http", 5), element("default/db:sql", 1, { key: "other" })],
    [element("default/db:sql", 7), element("default/db:sql", 1, { key: "other" })],
  ));
  await counters.read();
  assert.deepEqual(await counters.read(), [
    { namespace: "default", service: "db", port: "sql", connections: 8 },
    { namespace: "default", service: "web", port: "http", connections: 5 },
  ]);
});
