/**
 * Specs of the servers' socket layer: bind addresses, and what a listener survives and bounds —
 * accept errors, slow and idle clients, oversized heads, clients that never read, and a flood
 * over its connection cap.
 *
 * @module
 */
import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import {
  advanceUntil as advanceFakeClockUntil,
  emfile,
  FakeListener,
  until,
} from "../../tests/fixtures/fake_sockets.ts";
import { ConnectionPool } from "./connection_pool.ts";
import { type ConnectionLimits, parseBindAddress, ServeError, serveHttp } from "./serve.ts";

Deno.test("parseBindAddress() reads kube-proxy's IPv4 and bracketed IPv6 bind addresses", () => {
  assert.deepEqual(parseBindAddress("0.0.0.0:10256"), { hostname: "0.0.0.0", port: 10256 });
  assert.deepEqual(parseBindAddress("[::]:10256"), { hostname: "::", port: 10256 });
  assert.deepEqual(parseBindAddress("127.0.0.1:0"), { hostname: "127.0.0.1", port: 0 });
});

Deno.test("parseBindAddress() refuses names, bare IPs, unbracketed IPv6 and bad ports", () => {
  for (const bad of ["localhost:80", "0.0.0.0", "::1:80", "[::1]", "1.2.3.4:", "1.2.3.4:65536"]) {
    assert.throws(() => parseBindAddress(bad), ServeError, bad);
  }
});

Deno.test("serveHttp() serves on [::1] and its close() may be called twice", async () => {
  const server = serveHttp("[::1]:0", () => new Response("pong"), { name: "test" });
  assert.ok(server);
  try {
    const res = await fetch(`http://[::1]:${server.addr.port}/`);
    assert.equal(await res.text(), "pong");
  } finally {
    await Promise.all([server.close(), server.close()]);
  }
});

/** A server on a fake listener with a fake clock, recording log lines and accept errors. */
function fakeServer(options: { limits?: Partial<ConnectionLimits>; pool?: ConnectionPool } = {}) {
  const clock = new FakeClock({ now: 1_000_000 });
  const listener = new FakeListener();
  const logs: string[] = [];
  const acceptErrors: string[] = [];
  let answered = 0;
  const server = serveHttp("127.0.0.1:10256", (req) => {
    answered++;
    return new Response(`${new URL(req.url).pathname} ${answered}`);
  }, {
    name: "health",
    listen: () => listener,
    clock,
    log: (line) => logs.push(line),
    onAcceptError: (err, server) => acceptErrors.push(`${server}: ${(err as Error).message}`),
    limits: options.limits,
    pool: options.pool,
  })!;
  const advanceUntil = (check: () => boolean) => advanceFakeClockUntil(clock, check);
  return { clock, listener, logs, acceptErrors, server, advanceUntil };
}

const GET = "GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n";

Deno.test("serveHttp() survives accept errors: one log line, a back-off, and it keeps serving", async () => {
  const { listener, logs, acceptErrors, server, advanceUntil, clock } = fakeServer();
  try {
    for (let i = 0; i < 4; i++) listener.fail(emfile());
    const conn = listener.connect();
    conn.send(GET);
    await advanceUntil(() => conn.written().includes("200 OK"));
    assert.equal(acceptErrors.length, 4);
    assert.equal(acceptErrors[0], "health: Too many open files (os error 24)");
    assert.equal(logs.length, 1, logs.join("\n"));
    assert.match(
      logs[0],
      /^health server on 127\.0\.0\.1:10256: cannot accept a connection: Too many open files \(os error 24\) \[EMFILE\]; backing off 5 ms and still serving/,
    );
    // Back-off 5 + 10 + 20 + 40 ms before the connection was taken.
    assert.ok(clock.now() - 1_000_000 >= 75, `${clock.now() - 1_000_000} ms`);
    // A minute later the next error is reported again, with the count of those not logged.
    await clock.advanceAsync(60_000);
    listener.fail(emfile());
    await advanceUntil(() => logs.length === 2);
    assert.match(logs[1], /\(3 more accept errors since the last report\); backing off 5 ms/);
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() keeps a connection alive for the next request, and closes on Connection: close", async () => {
  const { listener, server, advanceUntil } = fakeServer();
  try {
    const conn = listener.connect();
    conn.send(GET);
    await advanceUntil(() => conn.written().endsWith("/healthz 1"));
    assert.doesNotMatch(conn.written(), /connection: close/);
    conn.send("GET /livez HTTP/1.1\r\nConnection: close\r\n\r\n");
    await advanceUntil(() => conn.closed);
    assert.match(conn.written(), /connection: close\r\n\r\n\/livez 2$/);
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() answers pipelined requests in order", async () => {
  const { listener, server, advanceUntil } = fakeServer();
  try {
    const conn = listener.connect();
    conn.send(`${GET}GET /livez HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nConnection: close\r\n\r\n`);
    await advanceUntil(() => conn.closed);
    assert.deepEqual(conn.written().match(/\/\w+ \d/g), ["/healthz 1", "/livez 2", "/x 3"]);
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() closes a half-open connection after headerTimeoutMs and an idle one after idleTimeoutMs", async () => {
  const { listener, server, clock } = fakeServer({
    limits: { headerTimeoutMs: 1_000, idleTimeoutMs: 3_000 },
  });
  try {
    const half = listener.connect();
    half.send("GET /healthz HTTP/1.1\r\nHost: no");
    const idle = listener.connect();
    idle.send(GET);
    await until(() => idle.written().includes("200 OK"), "idle answered");
    await clock.advanceAsync(999);
    assert.equal(half.closed, false);
    await clock.advanceAsync(1);
    await until(() => half.closed, "half-open closed");
    assert.equal(half.written(), "", "a timed-out head gets no answer");
    await clock.advanceAsync(1_999);
    assert.equal(idle.closed, false);
    await clock.advanceAsync(1);
    await until(() => idle.closed, "idle closed");
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() answers 431 to a head over maxHeaderBytes and 400 to a malformed one, then closes", async () => {
  const { listener, server } = fakeServer({ limits: { maxHeaderBytes: 64 } });
  try {
    const long = listener.connect();
    long.send(`GET /healthz HTTP/1.1\r\nX-Pad: ${"a".repeat(100)}`);
    const bad = listener.connect();
    bad.send("HELLO\r\n\r\n");
    await until(() => long.closed && bad.closed, "both closed");
    assert.match(long.written(), /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/);
    assert.match(bad.written(), /^HTTP\/1\.1 400 Bad Request\r\n/);
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() closes a connection whose client does not take its answer within writeTimeoutMs", async () => {
  const { listener, server, clock } = fakeServer({ limits: { writeTimeoutMs: 2_000 } });
  try {
    const conn = listener.connect();
    conn.block();
    conn.send(GET);
    await clock.advanceAsync(1_999);
    assert.equal(conn.closed, false);
    await clock.advanceAsync(1);
    await until(() => conn.closed, "closed");
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp() at its cap closes the oldest waiting connection, never one being answered", async () => {
  const evicted: string[] = [];
  const pool = new ConnectionPool({ maxConnections: 100, onEvicted: (s) => evicted.push(s) });
  const { listener, server } = fakeServer({ pool, limits: { maxConnections: 3 } });
  try {
    const answering = listener.connect();
    answering.block();
    answering.send(GET);
    const first = listener.connect();
    const second = listener.connect();
    await until(() => listener.accepts >= 4, "three accepted");
    const prober = listener.connect();
    prober.send(GET);
    await until(() => prober.written().includes("200 OK"), "prober answered");
    assert.equal(first.closed, true);
    assert.equal(second.closed, false);
    assert.equal(answering.closed, false);
    assert.deepEqual(evicted, ["health"]);
    answering.unblock();
    await until(() => answering.written().includes("200 OK"), "answered at last");
  } finally {
    await server.close();
  }
});

Deno.test("serveHttp().close() closes waiting connections at once and lets one being answered finish", async () => {
  const { listener, server } = fakeServer();
  const waiting = listener.connect();
  const answering = listener.connect();
  answering.block();
  answering.send(GET);
  await until(() => listener.accepts >= 3, "accepted");
  const closing = server.close();
  await until(() => waiting.closed, "waiting closed");
  assert.equal(answering.closed, false);
  answering.unblock();
  await closing;
  assert.match(answering.written(), /\r\n\r\n\/healthz 1$/, "the whole answer");
  assert.equal(answering.closed, true);
});

Deno.test("serveHttp() on a real socket: a flood of half-open connections over the cap does not lock a prober out", async () => {
  let evicted = 0;
  const pool = new ConnectionPool({ maxConnections: 8, onEvicted: () => evicted++ });
  const server = serveHttp("127.0.0.1:0", () => new Response("ok"), {
    name: "test",
    pool,
    limits: { maxConnections: 8 },
  })!;
  const flood: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 40; i++) {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
      await conn.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n"));
      flood.push(conn);
    }
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/`);
    assert.equal(await res.text(), "ok");
    assert.ok(evicted >= 32, `evicted ${evicted}`);
    assert.ok(pool.size <= 8);
  } finally {
    flood.forEach((c) => c.close());
    await server.close();
  }
});
