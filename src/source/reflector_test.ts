import assert from "node:assert/strict";
import type { ObjectEvent, RawObject } from "./events.ts";
import { Backoff, Reflector, type ReflectorOptions, relistEvents } from "./reflector.ts";

function svc(name: string, rv?: string, port = 80): RawObject {
  const metadata: Record<string, unknown> = { namespace: "default", name };
  if (rv !== undefined) metadata.resourceVersion = rv;
  return { kind: "Service", apiVersion: "v1", metadata, spec: { ports: [{ port }] } };
}

function summary(event: ObjectEvent): string {
  const name = ((event.current ?? event.previous)!.metadata as { name: string }).name;
  const what = event.previous === undefined
    ? "add"
    : event.current === undefined
    ? "delete"
    : "update";
  return `${what} ${name}`;
}

Deno.test("Backoff doubles up to the cap, jitters within [d/2, d), and starts over on reset", () => {
  const lowest = new Backoff({ initialMs: 500, maxMs: 30_000, random: () => 0 });
  assert.deepEqual(
    Array.from({ length: 9 }, () => lowest.next()),
    [250, 500, 1000, 2000, 4000, 8000, 15_000, 15_000, 15_000],
  );
  lowest.reset();
  assert.equal(lowest.next(), 250);
  const highest = new Backoff({ initialMs: 500, maxMs: 30_000, random: () => 0.999999 });
  for (let i = 0; i < 8; i++) highest.next();
  assert.equal(highest.next(), 30_000);
});

Deno.test("relistEvents() adds and updates in list order, deletes the vanished, skips the unchanged", () => {
  const previous = new Map([
    ["a", svc("a", "1")],
    ["b", svc("b", "2")],
    ["c", svc("c", "3")],
  ]);
  const next = new Map([
    ["d", svc("d", "9")],
    ["b", svc("b", "7")],
    ["a", svc("a", "1")],
  ]);
  const events = relistEvents("Service", previous, next);
  assert.deepEqual(events.map(summary), ["add d", "update b", "delete c"]);
  assert.equal(events[1].previous, previous.get("b"));
  assert.equal(events[2].previous, previous.get("c"));
});

Deno.test("relistEvents() compares content when objects carry no resourceVersion", () => {
  const previous = new Map([["a", svc("a")], ["b", svc("b")]]);
  const next = new Map([["a", svc("a")], ["b", svc("b", undefined, 443)]]);
  assert.deepEqual(relistEvents("Service", previous, next).map(summary), ["update b"]);
});

/** A reflector over a scripted `get`: each request is answered by the next matching reply. */
function scripted(
  replies: ((path: string) => Response | undefined)[],
  overrides: Partial<ReflectorOptions> = {},
) {
  const abort = new AbortController();
  const events: ObjectEvent[] = [];
  const paths: string[] = [];
  const logs: string[] = [];
  let listed = 0;
  const reflector = new Reflector({
    kind: "Service",
    apiVersion: "v1",
    path: "/api/v1/services",
    get: (path, signal) => {
      paths.push(path);
      const reply = replies.shift()?.(path);
      if (reply !== undefined) return Promise.resolve(reply);
      // Nothing scripted: hang like an idle server until aborted.
      return new Promise((_, reject) => {
        signal.addEventListener("abort", () => reject(signal.reason), { once: true });
      });
    },
    onEvent: (event) => events.push(event),
    onListed: () => listed++,
    log: (line) => logs.push(line),
    idleTimeoutMs: 10_000,
    backoff: { initialMs: 10, maxMs: 20 },
    watchTimeoutSeconds: 300,
    absentRetryMs: 10_000,
    pageSize: 2,
    signal: abort.signal,
    watchList: false,
    ...overrides,
  });
  const run = reflector.run();
  return {
    reflector,
    events,
    paths,
    logs,
    listed: () => listed,
    async stop() {
      abort.abort();
      await run;
    },
  };
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status });
}

async function waitFor(what: string, condition: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

Deno.test("Reflector lists again in one piece when a continue token has expired", async () => {
  const item = (name: string, rv: string) => ({
    metadata: { namespace: "default", name, resourceVersion: rv },
  });
  const r = scripted([
    () =>
      json({
        metadata: { resourceVersion: "5", continue: "t1" },
        items: [item("a", "1"), item("b", "2")],
      }),
    () => json({ kind: "Status", code: 410, reason: "Expired", message: "too old" }, 410),
    () => json({ metadata: { resourceVersion: "9" }, items: [item("a", "1"), item("c", "8")] }),
  ]);
  try {
    await waitFor("the list", () => r.listed() === 1);
    assert.deepEqual(r.events.map(summary), ["add a", "add c"]);
    assert.equal(r.events[0].current!.kind, "Service");
    assert.match(r.paths[0], /limit=2/);
    assert.match(r.paths[1], /continue=t1/);
    assert.doesNotMatch(r.paths[2], /limit=|continue=/);
    await waitFor("the watch", () => r.paths.length === 4);
    assert.match(
      r.paths[3],
      /watch=1&allowWatchBookmarks=true&resourceVersion=9&timeoutSeconds=\d+/,
    );
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector backs off after an error and lists again after a watch ERROR 410", async () => {
  const r = scripted([
    () => json({ kind: "Status", code: 503, message: "etcd unavailable" }, 503),
    () => json({ metadata: { resourceVersion: "3" }, items: [] }),
    () =>
      new Response(
        JSON.stringify({
          type: "ERROR",
          object: { kind: "Status", code: 410, reason: "Expired" },
        }) +
          "\n",
      ),
    () => json({ metadata: { resourceVersion: "4" }, items: [] }),
  ]);
  try {
    await waitFor("the second list", () => r.listed() === 2);
    assert.match(r.logs[0], /cannot list Services: 503: etcd unavailable; retrying in \d+ ms/);
    assert.match(r.logs[1], /watch from resourceVersion 3 expired; listing again/);
    assert.equal(r.reflector.resourceVersion, "4");
    // The relist asks the watch cache for the version last seen, in one piece.
    assert.match(r.paths[3], /^\/api\/v1\/services\?resourceVersion=3$/);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector aborts a request on which nothing arrives within the idle timeout", async () => {
  const r = scripted([], { idleTimeoutMs: 50 });
  try {
    await waitFor("the idle abort", () => r.logs.length > 0);
    assert.match(r.logs[0], /cannot list Services: nothing received for 50 ms/);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector refuses a LIST without a resourceVersion and retries it", async () => {
  const r = scripted([
    () => json({ metadata: {}, items: [] }),
    () => json({ metadata: { resourceVersion: "2" }, items: [] }),
  ]);
  try {
    await waitFor("the retried list", () => r.listed() === 1);
    assert.match(r.logs[0], /answered without a resourceVersion; retrying in/);
    assert.equal(r.reflector.resourceVersion, "2");
  } finally {
    await r.stop();
  }
});

/** One watch stream: each event on its own line. */
function stream(...events: unknown[]): Response {
  return new Response(events.map((e) => JSON.stringify(e) + "\n").join(""));
}

const listItem = (name: string, rv: string) => ({
  metadata: { namespace: "default", name, resourceVersion: rv },
});
const initialEventsEnd = (rv: string) => ({
  type: "BOOKMARK",
  object: {
    kind: "Service",
    metadata: { resourceVersion: rv, annotations: { "k8s.io/initial-events-end": "true" } },
  },
});

Deno.test("Reflector first asks with resourceVersion=0, served from the watch cache", async () => {
  const r = scripted([() => json({ metadata: { resourceVersion: "7" }, items: [] })]);
  try {
    await waitFor("the list", () => r.listed() === 1);
    assert.equal(r.paths[0], "/api/v1/services?resourceVersion=0&limit=2");
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector reads consistently, paginated, once the version it asks for is too old", async () => {
  const r = scripted([
    () => json({ metadata: { resourceVersion: "3" }, items: [] }),
    () => stream({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } }),
    () => json({ kind: "Status", code: 410, reason: "Expired", message: "too old" }, 410),
    () => json({ metadata: { resourceVersion: "12" }, items: [listItem("a", "11")] }),
  ]);
  try {
    await waitFor("the consistent list", () => r.listed() === 2);
    assert.equal(r.paths[2], "/api/v1/services?resourceVersion=3");
    assert.equal(r.paths[3], "/api/v1/services?limit=2");
    assert.match(r.logs.join("\n"), /list at resourceVersion 3 expired; reading consistently/);
    assert.deepEqual(r.events.map(summary), ["add a"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector streams the initial state as a watch-list and watches on the same connection", async () => {
  const r = scripted([
    () =>
      stream(
        { type: "ADDED", object: listItem("a", "4") },
        { type: "ADDED", object: listItem("b", "5") },
        initialEventsEnd("6"),
        { type: "MODIFIED", object: listItem("a", "7") },
      ),
  ], { watchList: true });
  try {
    await waitFor("the update after the initial events", () => r.events.length === 3);
    assert.equal(r.listed(), 1);
    assert.deepEqual(r.events.map(summary), ["add a", "add b", "update a"]);
    assert.match(
      r.paths[0],
      /^\/api\/v1\/services\?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&timeoutSeconds=\d+$/,
    );
    // The stream ended (the server's timeout): the watch resumes where it left off.
    await waitFor("the next watch", () => r.paths.length === 2);
    assert.match(r.paths[1], /watch=1&allowWatchBookmarks=true&resourceVersion=7&/);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector lists instead, for good, when the server refuses the watch-list", async () => {
  const refused = {
    kind: "Status",
    code: 422,
    reason: "Invalid",
    message:
      "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
  };
  const r = scripted([
    () => json(refused, 422),
    () => json({ metadata: { resourceVersion: "3" }, items: [listItem("a", "2")] }),
    () => stream({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } }),
    () => json({ metadata: { resourceVersion: "4" }, items: [listItem("a", "2")] }),
  ], { watchList: true });
  try {
    await waitFor("the relist", () => r.listed() === 2);
    assert.match(r.logs[0], /does not stream Services as a watch-list \(422 Invalid: sendInitial/);
    assert.equal(r.paths[1], "/api/v1/services?resourceVersion=0&limit=2");
    assert.equal(r.paths[3], "/api/v1/services?resourceVersion=3");
    assert.deepEqual(r.events.map(summary), ["add a"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector lists instead when a server ignores sendInitialEvents and just watches", async () => {
  const r = scripted([
    () =>
      stream(
        { type: "ADDED", object: listItem("a", "4") },
        { type: "MODIFIED", object: listItem("a", "5") },
      ),
    () => json({ metadata: { resourceVersion: "5" }, items: [listItem("a", "5")] }),
  ], { watchList: true });
  try {
    await waitFor("the list", () => r.listed() === 1);
    assert.match(r.logs[0], /a MODIFIED event before the list ended\); listing instead/);
    assert.deepEqual(r.events.map(summary), ["add a"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector remembers each object's kind, name and version, not the whole object", async () => {
  const big = {
    metadata: { namespace: "default", name: "a", resourceVersion: "4", labels: { x: "y" } },
    spec: { ports: [{ port: 80 }] },
  };
  const r = scripted([() => json({ metadata: { resourceVersion: "5" }, items: [big] })]);
  try {
    await waitFor("the list", () => r.listed() === 1);
    assert.deepEqual(r.events[0].current!.spec, big.spec, "the event carries the whole object");
    assert.deepEqual(r.reflector.store.get("Service/default/a"), {
      kind: "Service",
      apiVersion: "v1",
      metadata: { namespace: "default", name: "a", resourceVersion: "4" },
    });
  } finally {
    await r.stop();
  }
});
