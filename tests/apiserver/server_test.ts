import assert from "node:assert/strict";
import type { RawObject } from "../../src/source/events.ts";
import { TestApiServer } from "./server.ts";

interface WatchEvent {
  type: string;
  object: RawObject & { metadata: Record<string, unknown> };
}

function svc(name: string, labels: Record<string, string> = {}, namespace = "default"): RawObject {
  return { metadata: { namespace, name, labels }, spec: { clusterIP: "10.96.0.1" } };
}

function nameOf(object: RawObject): string {
  return String((object.metadata as Record<string, unknown>).name);
}

async function getJson(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url);
  return { status: response.status, body: await response.json() };
}

/** An open watch stream whose events are read one at a time, each read bounded in time. */
class WatchReader {
  readonly #reader: ReadableStreamDefaultReader<string>;
  #buffer = "";
  /** A read still in flight after a timed-out wait; the next wait takes it over. */
  #pending?: Promise<ReadableStreamReadResult<string>>;

  private constructor(reader: ReadableStreamDefaultReader<string>) {
    this.#reader = reader;
  }

  static async open(url: string): Promise<WatchReader> {
    const response = await fetch(url);
    assert.equal(response.status, 200);
    return new WatchReader(response.body!.pipeThrough(new TextDecoderStream()).getReader());
  }

  /**
   * The next event, or `"end"` when the stream ended cleanly; fails after `timeoutMs` (a bound
   * for a loaded machine: events on 127.0.0.1 arrive in milliseconds).
   */
  async next(timeoutMs = 30_000): Promise<WatchEvent | "end"> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no watch event in ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      while (!this.#buffer.includes("\n")) {
        this.#pending ??= this.#reader.read();
        const chunk = await Promise.race([this.#pending, timeout]);
        this.#pending = undefined;
        if (chunk.done) return "end";
        this.#buffer += chunk.value;
      }
    } finally {
      clearTimeout(timer);
    }
    const newline = this.#buffer.indexOf("\n");
    const line = this.#buffer.slice(0, newline);
    this.#buffer = this.#buffer.slice(newline + 1);
    return JSON.parse(line);
  }

  /** Whether no event arrives within `ms` (an absence: only a bug can make it false). */
  async silentFor(ms: number): Promise<boolean> {
    try {
      await this.next(ms);
      return false;
    } catch {
      return true;
    }
  }

  async close(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}

function summary(event: WatchEvent | "end"): string {
  return event === "end" ? "end" : `${event.type} ${nameOf(event.object)}`;
}

/** The stream broke: a read error, not {@link WatchReader.next}'s own time limit. */
function broken(error: Error): boolean {
  return !error.message.startsWith("no watch event in");
}

Deno.test("TestApiServer lists objects with a global resourceVersion and no item TypeMeta", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Service", svc("a"));
  server.create("Node", { metadata: { name: "node-a" } });
  const stored = server.create("Service", svc("b", {}, "other"));
  assert.equal((stored.metadata as Record<string, unknown>).resourceVersion, "3");

  const all = await getJson(`${server.url}/api/v1/services`);
  assert.equal(all.body.kind, "ServiceList");
  assert.deepEqual(all.body.metadata, { resourceVersion: "3" });
  const items = all.body.items as RawObject[];
  assert.deepEqual(items.map(nameOf), ["a", "b"]);
  assert.equal(items[0].kind, undefined);

  const namespaced = await getJson(`${server.url}/api/v1/namespaces/other/services`);
  assert.deepEqual((namespaced.body.items as RawObject[]).map(nameOf), ["b"]);
  const one = await getJson(`${server.url}/api/v1/namespaces/other/services/b`);
  assert.equal(one.body.kind, "Service");
});

Deno.test("TestApiServer pages a LIST with limit and continue over one snapshot", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  for (let i = 0; i < 5; i++) server.create("Service", svc(`s${i}`));
  const first = await getJson(`${server.url}/api/v1/services?limit=2`);
  const metadata = first.body.metadata as Record<string, unknown>;
  assert.equal(metadata.remainingItemCount, 3);
  server.create("Service", svc("s9"));
  const names = (first.body.items as RawObject[]).map(nameOf);
  let token = metadata.continue as string | undefined;
  while (token !== undefined) {
    const page = await getJson(
      `${server.url}/api/v1/services?limit=2&continue=${encodeURIComponent(token)}`,
    );
    assert.equal((page.body.metadata as Record<string, unknown>).resourceVersion, "5");
    names.push(...(page.body.items as RawObject[]).map(nameOf));
    token = (page.body.metadata as Record<string, unknown>).continue as string | undefined;
  }
  assert.deepEqual(names, ["s0", "s1", "s2", "s3", "s4"]);
});

Deno.test("TestApiServer answers an expired continue token with 410", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  for (let i = 0; i < 3; i++) server.create("Service", svc(`s${i}`));
  const first = await getJson(`${server.url}/api/v1/services?limit=1`);
  server.compact();
  const token = (first.body.metadata as Record<string, unknown>).continue as string;
  const next = await getJson(`${server.url}/api/v1/services?limit=1&continue=${token}`);
  assert.equal(next.status, 410);
  assert.equal(next.body.reason, "Expired");
});

Deno.test("TestApiServer honours label and field selectors, and rejects bad ones with 400", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Service", svc("plain"));
  server.create("Service", svc("headless", { "service.kubernetes.io/headless": "" }));
  server.create("Service", svc("other", { "service.kubernetes.io/service-proxy-name": "x" }));
  server.create("Node", { metadata: { name: "node-a" } });
  server.create("Node", { metadata: { name: "node-b" } });
  const selector = encodeURIComponent(
    "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
  );
  const services = await getJson(`${server.url}/api/v1/services?labelSelector=${selector}`);
  assert.deepEqual((services.body.items as RawObject[]).map(nameOf), ["plain"]);
  const nodes = await getJson(`${server.url}/api/v1/nodes?fieldSelector=metadata.name%3Dnode-b`);
  assert.deepEqual((nodes.body.items as RawObject[]).map(nameOf), ["node-b"]);
  const bad = await getJson(`${server.url}/api/v1/services?labelSelector=a%20in%20(b`);
  assert.equal(bad.status, 400);
});

Deno.test("TestApiServer streams watch events after a resourceVersion, selectors included", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Service", svc("before"));
  const rv = server.resourceVersion;
  server.create("Service", svc("missed-by-nobody"));
  const watch = await WatchReader.open(
    `${server.url}/api/v1/services?watch=1&resourceVersion=${rv}&labelSelector=!skip`,
  );
  assert.equal(summary(await watch.next()), "ADDED missed-by-nobody");
  server.update("Service", svc("before", { skip: "yes" }));
  server.update("Service", svc("before"));
  server.create("Service", svc("hidden", { skip: "yes" }));
  server.delete("Service", { namespace: "default", name: "before" });
  const events: (WatchEvent | "end")[] = [];
  for (let i = 0; i < 3; i++) events.push(await watch.next());
  assert.deepEqual(events.map(summary), ["DELETED before", "ADDED before", "DELETED before"]);
  const deleted = events[2] as WatchEvent;
  assert.equal(deleted.object.metadata.resourceVersion, String(server.resourceVersion));
  assert.equal(deleted.object.kind, "Service");
  await watch.close();
});

Deno.test("TestApiServer starts a watch without resourceVersion with the current objects", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("EndpointSlice", { metadata: { namespace: "default", name: "web-1" } });
  const watch = await WatchReader.open(
    `${server.url}/apis/discovery.k8s.io/v1/endpointslices?watch=true`,
  );
  assert.equal(summary(await watch.next()), "ADDED web-1");
  await watch.close();
});

Deno.test("TestApiServer sends 410 Expired on a watch from a compacted resourceVersion", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0, historyLimit: 2 });
  for (let i = 0; i < 4; i++) server.create("Service", svc(`s${i}`));
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=1`);
  const event = await watch.next();
  assert.notEqual(event, "end");
  const error = event as WatchEvent;
  assert.equal(error.type, "ERROR");
  assert.equal(error.object.code, 410);
  assert.equal(error.object.reason, "Expired");
  assert.equal(await watch.next(), "end");
  // Within the kept history the watch works; after compact() it does not.
  const ok = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=2`);
  assert.equal(summary(await ok.next()), "ADDED s2");
  await ok.close();
  server.compact();
  const late = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=3`);
  assert.equal((await late.next() as WatchEvent).type, "ERROR");
  await late.close();
});

Deno.test("TestApiServer sends bookmarks only when allowed and ends at timeoutSeconds", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Node", { metadata: { name: "node-a" } });
  const url = `${server.url}/api/v1/nodes?watch=1&resourceVersion=1&timeoutSeconds=1`;
  const withBookmarks = await WatchReader.open(`${url}&allowWatchBookmarks=true`);
  const without = await WatchReader.open(url);
  server.sendBookmarks();
  const bookmark = await withBookmarks.next() as WatchEvent;
  assert.equal(bookmark.type, "BOOKMARK");
  assert.equal(bookmark.object.kind, "Node");
  assert.equal(bookmark.object.metadata.resourceVersion, "1");
  assert.equal(await without.next(), "end");
  assert.equal(await withBookmarks.next(), "end");
});

Deno.test("TestApiServer.dropWatches() breaks open streams", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1`);
  server.create("Service", svc("a"));
  assert.equal(summary(await watch.next()), "ADDED a");
  server.dropWatches();
  await assert.rejects(() => watch.next(), broken);
  assert.equal(server.watchCount, 0);
});

Deno.test("TestApiServer.stall() withholds responses and events until released", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1`);
  const release = server.stall();
  server.create("Service", svc("held"));
  let listed = false;
  const list = getJson(`${server.url}/api/v1/services`).then((r) => {
    listed = true;
    return r;
  });
  assert.equal(await watch.silentFor(200), true);
  assert.equal(listed, false);
  release();
  assert.equal(summary(await watch.next()), "ADDED held");
  assert.equal((await list).status, 200);
  await watch.close();
});

Deno.test("TestApiServer.failNext() fails only the matching requests, then recovers", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.failNext(2, { status: 503, kind: "Node" });
  assert.equal((await getJson(`${server.url}/api/v1/services`)).status, 200);
  const failed = await getJson(`${server.url}/api/v1/nodes`);
  assert.equal(failed.status, 503);
  assert.equal(failed.body.kind, "Status");
  assert.equal((await getJson(`${server.url}/api/v1/nodes`)).status, 503);
  assert.equal((await getJson(`${server.url}/api/v1/nodes`)).status, 200);
});

Deno.test("TestApiServer.slow() delays each response", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.slow(150);
  const started = performance.now();
  assert.equal((await getJson(`${server.url}/api/v1/nodes`)).status, 200);
  assert.ok(performance.now() - started >= 140);
});

Deno.test("TestApiServer.kill() refuses connections until restart() on the same port", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Service", svc("kept"));
  const port = server.port;
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=1`);
  await server.kill();
  await assert.rejects(() => watch.next(), broken);
  await assert.rejects(() => fetch(`${server.url}/api/v1/services`));
  await server.restart();
  assert.equal(server.port, port);
  const list = await getJson(`${server.url}/api/v1/services`);
  assert.deepEqual((list.body.items as RawObject[]).map(nameOf), ["kept"]);
});

Deno.test("TestApiServer.setResourceServed() makes a resource 404 like an older cluster", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.setResourceServed("ServiceCIDR", false);
  const missing = await getJson(`${server.url}/apis/networking.k8s.io/v1/servicecidrs`);
  assert.equal(missing.status, 404);
  const groups = await getJson(`${server.url}/apis`);
  const names = (groups.body.groups as { name: string }[]).map((g) => g.name);
  assert.deepEqual(names, ["discovery.k8s.io"]);
  server.setResourceServed("ServiceCIDR", true);
  const found = await getJson(`${server.url}/apis/networking.k8s.io/v1/servicecidrs`);
  assert.equal(found.status, 200);
});

Deno.test("TestApiServer forgets a watch whose client went away", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1`);
  assert.equal(server.watchCount, 1);
  await watch.close();
  const deadline = Date.now() + 30_000;
  while (server.watchCount > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.equal(server.watchCount, 0);
});

Deno.test("TestApiServer serves resourceVersion=0 lists whole from the cache, unset ones paged", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  for (let i = 0; i < 5; i++) server.create("Service", svc(`s${i}`));
  const cached = await getJson(`${server.url}/api/v1/services?limit=2&resourceVersion=0`);
  assert.deepEqual(cached.body.metadata, { resourceVersion: "5" });
  assert.equal((cached.body.items as RawObject[]).length, 5);
  const notOlder = await getJson(
    `${server.url}/api/v1/services?limit=2&resourceVersion=3&resourceVersionMatch=NotOlderThan`,
  );
  assert.deepEqual(notOlder.body.metadata, { resourceVersion: "5" });
  assert.equal((notOlder.body.items as RawObject[]).length, 5);
  const consistent = await getJson(`${server.url}/api/v1/services?limit=2`);
  assert.equal((consistent.body.items as RawObject[]).length, 2);
  assert.equal(typeof (consistent.body.metadata as Record<string, unknown>).continue, "string");

  const tooNew = await getJson(`${server.url}/api/v1/services?resourceVersion=9`);
  assert.equal(tooNew.status, 504);
  const exactOld = await getJson(
    `${server.url}/api/v1/services?resourceVersion=3&resourceVersionMatch=Exact&limit=2`,
  );
  assert.equal(exactOld.status, 410);
  const exactNow = await getJson(
    `${server.url}/api/v1/services?resourceVersion=5&resourceVersionMatch=Exact&limit=2`,
  );
  assert.equal((exactNow.body.items as RawObject[]).length, 2);
  const matchAlone = await getJson(
    `${server.url}/api/v1/services?resourceVersionMatch=NotOlderThan`,
  );
  assert.equal(matchAlone.status, 422);
  assert.equal(matchAlone.body.reason, "Invalid");
});

Deno.test("TestApiServer streams a watch-list: every object, the end bookmark, then changes", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  server.create("Service", svc("a", { app: "x" }));
  server.create("Service", svc("b", { app: "y" }));
  server.create("Service", svc("c", { app: "x" }));
  const watch = await WatchReader.open(
    `${server.url}/api/v1/services?watch=1&sendInitialEvents=true&allowWatchBookmarks=true` +
      `&resourceVersionMatch=NotOlderThan&resourceVersion=0&labelSelector=app%3Dx`,
  );
  try {
    assert.equal(summary(await watch.next()), "ADDED a");
    assert.equal(summary(await watch.next()), "ADDED c");
    const end = await watch.next();
    assert.ok(end !== "end" && end.type === "BOOKMARK");
    assert.deepEqual(end.object.metadata, {
      resourceVersion: "3",
      annotations: { "k8s.io/initial-events-end": "true" },
    });
    server.create("Service", svc("d", { app: "x" }));
    const added = await watch.next();
    assert.equal(summary(added), "ADDED d");
    assert.ok(added !== "end" && added.object.metadata.resourceVersion === "4");
  } finally {
    await watch.close();
  }

  // sendInitialEvents=false: no initial state, only what changes afterwards.
  const later = await WatchReader.open(
    `${server.url}/api/v1/services?watch=1&sendInitialEvents=false&allowWatchBookmarks=true` +
      `&resourceVersionMatch=NotOlderThan`,
  );
  try {
    assert.ok(await later.silentFor(100));
    server.delete("Service", { name: "a" });
    assert.equal(summary(await later.next()), "DELETED a");
  } finally {
    await later.close();
  }
});

Deno.test("TestApiServer streams a long watch-list as it is read; changes meanwhile follow its end bookmark", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  // Five chunks of initial events: the first is sent before the rest are written.
  const names = Array.from({ length: 1000 }, (_, i) => `s${String(i).padStart(4, "0")}`);
  server.load("Service", names.map((name) => svc(name)));
  const watch = await WatchReader.open(
    `${server.url}/api/v1/services?watch=1&sendInitialEvents=true&allowWatchBookmarks=true` +
      `&resourceVersionMatch=NotOlderThan`,
  );
  try {
    assert.equal(summary(await watch.next()), "ADDED s0000");
    server.create("Service", svc("late"));
    const release = server.stall();
    server.delete("Service", { name: "s0001" });
    release();
    const seen: string[] = [];
    for (let i = 1; i < names.length; i++) seen.push(summary(await watch.next()));
    assert.deepEqual(seen, names.slice(1).map((name) => `ADDED ${name}`));
    const end = await watch.next();
    assert.ok(end !== "end" && end.type === "BOOKMARK");
    assert.equal(end.object.metadata.resourceVersion, "1000");
    assert.equal(summary(await watch.next()), "ADDED late");
    assert.equal(summary(await watch.next()), "DELETED s0001");
  } finally {
    await watch.close();
  }
});

Deno.test("TestApiServer refuses a watch-list with 422 when it is off, as an older server does", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0, watchList: false });
  server.create("Service", svc("a"));
  const query = "watch=1&sendInitialEvents=true&allowWatchBookmarks=true" +
    "&resourceVersionMatch=NotOlderThan";
  const off = await getJson(`${server.url}/api/v1/services?${query}`);
  assert.equal(off.status, 422);
  assert.equal(off.body.kind, "Status");
  assert.equal(off.body.reason, "Invalid");
  assert.match(
    String(off.body.message),
    /sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled/,
  );
  // A plain watch still works, and the feature can be turned on.
  const plain = await WatchReader.open(`${server.url}/api/v1/services?watch=1`);
  assert.equal(summary(await plain.next()), "ADDED a");
  await plain.close();
  server.setWatchList(true);
  const on = await WatchReader.open(`${server.url}/api/v1/services?${query}`);
  assert.equal(summary(await on.next()), "ADDED a");
  await on.close();
});

Deno.test("TestApiServer refuses list options the real server refuses, with 422 Invalid", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  const cases: [string, RegExp][] = [
    [
      "watch=1&sendInitialEvents=true&allowWatchBookmarks=true",
      /resourceVersionMatch to NotOlderThan/,
    ],
    [
      "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
      /allowWatchBookmarks to true/,
    ],
    [
      "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0",
      /forbidden for list/,
    ],
    ["watch=1&resourceVersionMatch=NotOlderThan", /unless sendInitialEvents is provided/],
    ["resourceVersion=0&resourceVersionMatch=Newest", /Unsupported value/],
  ];
  for (const [query, message] of cases) {
    const { status, body } = await getJson(`${server.url}/api/v1/services?${query}`);
    assert.equal(status, 422, query);
    assert.match(String(body.message), message, query);
  }
});

Deno.test("TestApiServer.load() stores many objects at once, as create() would one by one", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0, historyLimit: 3 });
  server.create("Service", svc("first"));
  const watch = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=1`);
  const objects = Array.from({ length: 5 }, (_, i) => svc(`bulk-${i}`));
  server.load("Service", objects);
  assert.equal(server.resourceVersion, 6);
  try {
    for (let i = 0; i < 5; i++) {
      const event = await watch.next();
      assert.equal(summary(event), `ADDED bulk-${i}`);
      assert.ok(event !== "end" && event.object.metadata.resourceVersion === String(i + 2));
    }
  } finally {
    await watch.close();
  }
  assert.throws(() => server.load("Service", [svc("other"), svc("bulk-0")]), /already exists/);
  assert.equal(server.list("Service").length, 6);
  // The history keeps the last 3 writes: a watch from before them is told 410.
  const old = await WatchReader.open(`${server.url}/api/v1/services?watch=1&resourceVersion=2`);
  const gone = await old.next();
  assert.ok(gone !== "end" && gone.type === "ERROR" && gone.object.code === 410);
  await old.close();
});

Deno.test("TestApiServer.traffic() counts requests and bytes by verb and query shape", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0 });
  for (let i = 0; i < 3; i++) server.create("Service", svc(`s${i}`));
  const first = await fetch(`${server.url}/api/v1/services?limit=2`);
  const firstBytes = (await first.arrayBuffer()).byteLength;
  const token = (JSON.parse(
    new TextDecoder().decode(
      await (await fetch(`${server.url}/api/v1/services?limit=2`))
        .arrayBuffer(),
    ),
  ).metadata.continue) as string;
  await (await fetch(`${server.url}/api/v1/services?limit=2&continue=${token}`)).arrayBuffer();
  await (await fetch(`${server.url}/api/v1/services?resourceVersion=0&limit=2`)).arrayBuffer();
  const watch = await WatchReader.open(
    `${server.url}/api/v1/services?watch=1&sendInitialEvents=true&allowWatchBookmarks=true` +
      `&resourceVersionMatch=NotOlderThan&timeoutSeconds=60`,
  );
  for (let i = 0; i < 4; i++) await watch.next();
  await watch.close();
  await (await fetch(`${server.url}/api/v1`)).arrayBuffer();

  const traffic = server.traffic();
  assert.equal(traffic.list.requests, 4);
  assert.equal(traffic.watch.requests, 1);
  assert.equal(traffic.other.requests, 1);
  assert.ok(traffic.list.bytes > 3 * firstBytes);
  assert.ok(traffic.watch.bytes > 0);
  assert.deepEqual(Object.keys(traffic.shapes).sort(), [
    "list services continue limit=2",
    "list services limit=2",
    "list services limit=2 resourceVersion=0",
    "other /api/v1",
    "watch services allowWatchBookmarks=true resourceVersionMatch=NotOlderThan " +
    "sendInitialEvents=true timeoutSeconds",
  ]);
  assert.equal(traffic.shapes["list services limit=2"].requests, 2);
  assert.equal(traffic.shapes["list services limit=2"].bytes, 2 * firstBytes);
  server.resetTraffic();
  assert.deepEqual(server.traffic().list, { requests: 0, bytes: 0 });
});

Deno.test("TestApiServer listens on the address it is given", async () => {
  await using server = await TestApiServer.start({ bookmarkIntervalMs: 0, hostname: "127.0.0.2" });
  assert.equal(server.url, `http://127.0.0.2:${server.port}`);
  assert.equal((await getJson(`${server.url}/api/v1/services`)).status, 200);
});
