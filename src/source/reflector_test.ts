import { observeApiProblems } from "./api_http.ts";
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
  replies: ((path: string, signal: AbortSignal) => Response | undefined)[],
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
      const reply = replies.shift()?.(path, signal);
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
    // The first object was handed on as it came; the LIST then brings it to its listed version.
    assert.deepEqual(r.events.map(summary), ["add a", "update a"]);
    assert.deepEqual(r.events[1].current?.metadata, listItem("a", "5").metadata);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector hands on a first watch-list's objects as they arrive, a relist's only at its end", async () => {
  const encoder = new TextEncoder();
  const open = () => {
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
    const send = (...events: unknown[]) =>
      controller.enqueue(encoder.encode(events.map((e) => JSON.stringify(e) + "\n").join("")));
    // Answers the request, and ends the body as a connection would when the request aborts.
    const respond = (_path: string, signal: AbortSignal) => {
      signal.addEventListener("abort", () => controller.error(signal.reason), { once: true });
      return new Response(body);
    };
    return { respond, send, end: () => controller.close() };
  };
  const first = open();
  const relist = open();
  const r = scripted([
    first.respond,
    () => stream({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } }),
    relist.respond,
  ], { watchList: true });
  try {
    first.send({ type: "ADDED", object: listItem("a", "4") });
    await waitFor("a, before the list has ended", () => r.events.length === 1);
    assert.equal(r.listed(), 0, "not listed before the end bookmark");
    first.send({ type: "ADDED", object: listItem("b", "5") }, initialEventsEnd("6"));
    await waitFor("the end bookmark", () => r.listed() === 1);
    assert.deepEqual(r.events.map(summary), ["add a", "add b"]);
    first.end();
    // The watch from 6 expires: the relist comes as a watch-list, taken in whole at its end.
    relist.send({ type: "ADDED", object: listItem("a", "7") });
    await waitFor("the relist's request", () => r.paths.length === 3);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(r.events.length, 2, "nothing of a relist before its end bookmark");
    relist.send(initialEventsEnd("8"));
    await waitFor("the relist's end", () => r.listed() === 2);
    assert.deepEqual(r.events.map(summary), ["add a", "add b", "update a", "delete b"]);
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

// ---------------------------------------------------------------------------------------------
// What a broken or hostile server sends

/**
 * A body that sends `text` a byte at a time, one every `everyMs`, then ends (or sends spaces
 * for ever, with `endless`); aborting `signal` errors it, as it does a fetch's body.
 */
function dribble(
  text: string,
  everyMs: number,
  options: { endless?: boolean; signal?: AbortSignal } = {},
): Response {
  const bytes = new TextEncoder().encode(text);
  let i = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  return new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        options.signal?.addEventListener("abort", () => {
          clearTimeout(timer);
          controller.error(options.signal!.reason);
        }, { once: true });
      },
      pull(controller) {
        return new Promise((resolve) => {
          timer = setTimeout(() => {
            if (i < bytes.length) controller.enqueue(bytes.subarray(i, ++i));
            else if (options.endless) controller.enqueue(new Uint8Array([0x20]));
            else controller.close();
            resolve();
          }, everyMs);
        });
      },
      cancel() {
        clearTimeout(timer);
      },
    }),
  );
}

const listOf = (rv: string, ...items: unknown[]) =>
  json({ metadata: { resourceVersion: rv }, items });

Deno.test("Reflector lists again after a watch line that is not JSON, losing no other object", async () => {
  const r = scripted([
    () => listOf("3", listItem("a", "1"), listItem("b", "2")),
    () => new Response('{"type":"MODIFIED","object":{"metadata":\n'),
    () => listOf("5", listItem("a", "4"), listItem("b", "2")),
  ]);
  try {
    await waitFor("the relist", () => r.listed() === 2);
    assert.match(
      r.logs[0],
      /^cannot watch Services: the watch sent a line that is not JSON: "\{\\"type\\":\\"MODIFIED\\",\\"object\\":\{\\"metadata\\":"; retrying in \d+ ms$/,
    );
    assert.equal(r.logs.length, 1, "logged once");
    assert.deepEqual(r.events.map(summary), ["add a", "add b", "update a"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector ends a watch event larger than maxEventBytes without holding it, and lists again", async () => {
  const huge = JSON.stringify({
    type: "ADDED",
    object: { metadata: { namespace: "default", name: "x", annotations: { a: "x".repeat(5000) } } },
  });
  const r = scripted([
    () => listOf("3", listItem("a", "1")),
    () => new Response(`${huge}\n`),
    () => listOf("4", listItem("a", "1"), listItem("b", "4")),
  ], { maxEventBytes: 1000 });
  try {
    await waitFor("the relist", () => r.listed() === 2);
    assert.match(
      r.logs[0],
      /^cannot watch Services: the server sent a line larger than 1000 bytes; retrying in/,
    );
    assert.deepEqual(r.events.map(summary), ["add a", "add b"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector skips objects of the wrong kind, listed or watched, and keeps the others", async () => {
  const pod = { kind: "Pod", apiVersion: "v1", ...listItem("p", "2") };
  const r = scripted([
    () => listOf("3", listItem("a", "1"), pod),
    () => stream({ type: "ADDED", object: pod }, { type: "ADDED", object: svc("b", "4") }),
  ]);
  try {
    await waitFor("the watched Service", () => r.events.length === 2);
    assert.deepEqual(r.events.map(summary), ["add a", "add b"]);
    assert.deepEqual(r.logs.slice(0, 2), [
      "skipping a listed object of kind Pod among Services",
      "skipping a watched object of kind Pod among Services",
    ]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector retries a truncated or oversized LIST answer with backoff", async () => {
  const r = scripted([
    () => new Response('{"metadata":{"resourceVersion":"3"},"items":[{"metad'),
    () => listOf("3", listItem("a", "1"), listItem("b", "x".repeat(2000))),
    () => listOf("3", listItem("a", "1")),
  ], { maxListBytes: 1000 });
  try {
    await waitFor("the list", () => r.listed() === 1);
    assert.match(
      r.logs[0],
      /^cannot list Services: LIST \/api\/v1\/services answered with text that is not JSON/,
    );
    assert.match(
      r.logs[1],
      /^cannot list Services: the server sent an answer larger than 1000 bytes/,
    );
    assert.deepEqual(r.events.map(summary), ["add a"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector gives up on a LIST that dribbles in a byte at a time, after the idle timeout", async () => {
  const r = scripted([
    (_, signal) =>
      dribble('{"metadata":{"resourceVersion":"3"},"items":[', 5, { endless: true, signal }),
    () => listOf("3", listItem("a", "1")),
  ], { idleTimeoutMs: 300 });
  try {
    await waitFor("the second list", () => r.listed() === 1, 3000);
    assert.match(r.logs[0], /^cannot list Services: nothing received for 300 ms/);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector reads watch events that arrive a byte at a time", async () => {
  const events = [{ type: "ADDED", object: listItem("b", "4") }, {
    type: "MODIFIED",
    object: listItem("a", "5"),
  }];
  const r = scripted([
    () => listOf("3", listItem("a", "1")),
    () => dribble(events.map((e) => JSON.stringify(e) + "\n").join(""), 0),
  ]);
  try {
    await waitFor("both watched events", () => r.events.length === 3);
    assert.deepEqual(r.events.map(summary), ["add a", "add b", "update a"]);
    assert.equal(r.reflector.resourceVersion, "5");
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector takes in a 20,000-object watch-list without stalling the event loop for 1 s", async () => {
  const lines: string[] = [];
  for (let i = 0; i < 20_000; i++) {
    const object = {
      ...svc(`s${i}`, String(i + 1)),
      spec: { clusterIP: "10.96.0.1", ports: [{ port: 80 }], selector: { app: `a${i}` } },
    };
    lines.push(JSON.stringify({ type: "ADDED", object }));
  }
  lines.push(JSON.stringify(initialEventsEnd("20001")));
  const body = new TextEncoder().encode(lines.join("\n") + "\n");
  let worst = 0;
  let last = performance.now();
  const probe = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last - 10);
    last = now;
  }, 10);
  // The whole list arrives at once: the reflector alone decides how long it holds the loop.
  const r = scripted([() => new Response(body)], { watchList: true });
  try {
    await waitFor("the initial events", () => r.listed() === 1, 30_000);
    assert.equal(r.events.length, 20_000);
  } finally {
    clearInterval(probe);
    await r.stop();
  }
  assert.ok(worst < 1000, `the event loop stalled for ${Math.round(worst)} ms`);
});

Deno.test("Reflector lists again, consistently, after a bookmark with a version the server refuses", async () => {
  const refused = { kind: "Status", code: 400, reason: "BadRequest", message: "invalid rv" };
  const r = scripted([
    () => listOf("3", listItem("a", "1")),
    () =>
      stream({ type: "BOOKMARK", object: { kind: "Service", metadata: { resourceVersion: "x" } } }),
    () => json(refused, 400),
    () => json(refused, 400),
    () => listOf("5", listItem("a", "1"), listItem("b", "4")),
  ]);
  try {
    await waitFor("the consistent list", () => r.listed() === 2);
    assert.match(r.paths[2], /watch=1&allowWatchBookmarks=true&resourceVersion=x&/);
    assert.equal(r.paths[3], "/api/v1/services?resourceVersion=x");
    assert.equal(r.paths[4], "/api/v1/services?limit=2");
    assert.deepEqual(r.events.map(summary), ["add a", "add b"]);
  } finally {
    await r.stop();
  }
});

Deno.test("Reflector reports each problem by reason: not JSON, too large, wrong kind", async () => {
  const problems: string[] = [];
  observeApiProblems((p) => problems.push(`${p.kind} ${p.reason}`));
  const pod = { kind: "Pod", apiVersion: "v1", ...listItem("p", "2") };
  const r = scripted([
    () => listOf("3", listItem("a", "1"), pod),
    () => new Response('{"type":"MODIFIED","object":{"metadata":\n'),
    () => listOf("5", listItem("a", "4")),
    () => new Response(`${JSON.stringify({ type: "ADDED", object: svc("x".repeat(2000)) })}\n`),
    () => listOf("6", listItem("a", "4")),
  ], { maxEventBytes: 1000 });
  try {
    await waitFor("the third list", () => r.listed() === 3);
    assert.deepEqual(problems, [
      "Service wrong_kind",
      "Service not_json",
      "Service too_large",
    ]);
  } finally {
    observeApiProblems(undefined);
    await r.stop();
  }
});
