/**
 * Specs of the proxy's `/healthz` and `/livez`: upstream's rules on a fake clock, answered
 * from `Request` objects; one test binds a real socket on loopback.
 *
 * @module
 */
import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import { advanceUntil, emfile, FakeListener } from "../../tests/fixtures/fake_sockets.ts";
import {
  formatJsonTime,
  healthHandler,
  type HealthPath,
  healthTimeoutMs,
  ProxyHealth,
  ServeError,
  serveHealth,
} from "./health.ts";

const SYNC_PERIOD_MS = 30_000;
const TIMEOUT_MS = healthTimeoutMs(SYNC_PERIOD_MS);
/** 2024-05-01T12:00:00Z: a readable start for the fake clock. */
const T0 = Date.UTC(2024, 4, 1, 12, 0, 0);

function setup() {
  const clock = new FakeClock({ now: T0 });
  const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, clock });
  const served: [HealthPath, number][] = [];
  const handle = healthHandler(health, { onServed: (path, status) => served.push([path, status]) });
  const get = async (path: string) => {
    const res = handle(new Request(`http://node:10256${path}`));
    return { status: res.status, body: await res.text(), type: res.headers.get("content-type") };
  };
  return { clock, health, get, served };
}

Deno.test("healthTimeoutMs() is twice the sync period, like upstream", () => {
  assert.equal(healthTimeoutMs(30_000), 60_000);
});

Deno.test("formatJsonTime() prints times as Go's json.Marshal does a UTC time.Time", () => {
  assert.equal(formatJsonTime(T0), "2024-05-01T12:00:00Z");
  assert.equal(formatJsonTime(T0 + 250), "2024-05-01T12:00:00.25Z");
  assert.equal(formatJsonTime(T0 + 7), "2024-05-01T12:00:00.007Z");
  assert.equal(formatJsonTime(undefined), "0001-01-01T00:00:00Z");
});

Deno.test("healthHandler() answers 200 with upstream's JSON bodies while starting up", async () => {
  const { get } = setup();
  const healthz = await get("/healthz");
  assert.equal(healthz.status, 200);
  assert.equal(healthz.type, "application/json");
  // Upstream's ProxyHealth through json.Marshal: no status per family before the loop runs.
  assert.equal(
    healthz.body,
    '{"lastUpdated":"2024-05-01T12:00:00Z","currentTime":"2024-05-01T12:00:00Z",' +
      '"nodeEligible":true,"healthy":true}',
  );
  const livez = await get("/livez");
  assert.equal(livez.status, 200);
  assert.equal(
    livez.body,
    '{"lastUpdated":"2024-05-01T12:00:00Z","currentTime":"2024-05-01T12:00:00Z","healthy":true}',
  );
});

Deno.test("healthHandler() reports each IP family's last sync under status, as upstream", async () => {
  const clock = new FakeClock({ now: T0 });
  const health = new ProxyHealth({
    healthTimeoutMs: TIMEOUT_MS,
    clock,
    families: ["IPv6", "IPv4"],
  });
  const handle = healthHandler(health);
  health.started();
  health.syncNode({ deleting: false });
  clock.advance(1500);
  const ok = handle(new Request("http://node:10256/healthz"));
  assert.equal(
    await ok.text(),
    '{"lastUpdated":"2024-05-01T12:00:01.5Z","currentTime":"2024-05-01T12:00:01.5Z",' +
      '"nodeEligible":true,"healthy":true,"status":{' +
      '"IPv4":{"lastUpdated":"2024-05-01T12:00:00Z","healthy":true},' +
      '"IPv6":{"lastUpdated":"2024-05-01T12:00:00Z","healthy":true}}}',
  );
  health.queued();
  clock.advance(TIMEOUT_MS);
  const late = handle(new Request("http://node:10256/livez"));
  assert.equal(late.status, 503);
  assert.deepEqual(JSON.parse(await late.text()), {
    lastUpdated: "2024-05-01T12:00:00Z",
    currentTime: formatJsonTime(T0 + 1500 + TIMEOUT_MS),
    healthy: false,
    status: {
      IPv4: { lastUpdated: "2024-05-01T12:00:00Z", healthy: false },
      IPv6: { lastUpdated: "2024-05-01T12:00:00Z", healthy: false },
    },
  });
});

Deno.test("healthHandler() stays healthy before the sync loop starts, however long changes wait", async () => {
  const { clock, health, get } = setup();
  health.queued();
  clock.advance(10 * TIMEOUT_MS);
  assert.equal((await get("/healthz")).status, 200);
  assert.equal((await get("/livez")).status, 200);
});

Deno.test("healthHandler() turns 503 when changes listed before the start are not synced within the timeout of the start", async () => {
  const { clock, health, get } = setup();
  health.queued(); // listing the initial state
  clock.advance(5 * 60_000); // a slow initial list does not count
  health.started();
  clock.advance(TIMEOUT_MS - 1);
  assert.equal((await get("/healthz")).status, 200);
  clock.advance(1);
  const late = await get("/healthz");
  assert.equal(late.status, 503);
  // Unhealthy: lastUpdated is the last success (here the loop's start), not "now".
  assert.equal(JSON.parse(late.body).lastUpdated, formatJsonTime(T0 + 5 * 60_000));
  assert.equal((await get("/livez")).status, 503);
  health.updated();
  assert.equal((await get("/healthz")).status, 200);
});

Deno.test("healthHandler() is healthy after the start while nothing is queued, even with no sync for long", async () => {
  const { clock, health, get } = setup();
  health.started();
  clock.advance(100 * TIMEOUT_MS);
  const res = await get("/healthz");
  assert.equal(res.status, 200);
  assert.equal(JSON.parse(res.body).lastUpdated, JSON.parse(res.body).currentTime);
});

Deno.test("healthHandler() counts from the oldest queued change, not the latest", async () => {
  const { clock, health, get } = setup();
  health.started();
  health.queued();
  clock.advance(TIMEOUT_MS / 2);
  health.queued(); // a second change does not restart the timer
  clock.advance(TIMEOUT_MS / 2);
  assert.equal((await get("/healthz")).status, 503);
});

Deno.test("healthHandler() recovers once a sync succeeds, and a new change starts a new timer", async () => {
  const { clock, health, get } = setup();
  health.started();
  health.queued();
  clock.advance(TIMEOUT_MS);
  assert.equal((await get("/livez")).status, 503);
  health.updated();
  const ok = await get("/livez");
  assert.equal(ok.status, 200);
  clock.advance(1000);
  health.queued();
  clock.advance(TIMEOUT_MS - 1);
  assert.equal((await get("/livez")).status, 200);
});

Deno.test("healthHandler() answers /healthz 503 while the Node is being deleted, but /livez 200", async () => {
  const { health, get } = setup();
  health.started();
  health.syncNode({ deleting: true });
  const healthz = await get("/healthz");
  assert.equal(healthz.status, 503);
  assert.equal(JSON.parse(healthz.body).nodeEligible, false);
  assert.equal(JSON.parse(healthz.body).healthy, true, "the proxy itself is fine");
  assert.equal((await get("/livez")).status, 200);
  health.syncNode({ deleting: false });
  assert.equal((await get("/healthz")).status, 200);
});

Deno.test("healthHandler() answers /healthz 503 when the Node is missing, as upstream; /livez 200", async () => {
  const { health, get } = setup();
  health.started();
  health.syncNode(null);
  const healthz = await get("/healthz");
  assert.equal(healthz.status, 503);
  assert.equal(JSON.parse(healthz.body).nodeEligible, false);
  assert.equal((await get("/livez")).status, 200);
  health.syncNode({ deleting: false }); // the Node appears
  assert.equal((await get("/healthz")).status, 200);
});

Deno.test("healthHandler() reports each answer for upstream's healthz/livez counters", async () => {
  const { health, get, served } = setup();
  await get("/healthz");
  health.syncNode({ deleting: true });
  await get("/healthz");
  await get("/livez");
  await get("/metrics");
  assert.deepEqual(served, [["/healthz", 200], ["/healthz", 503], ["/livez", 200]]);
});

Deno.test("healthHandler() answers 404 for other paths", async () => {
  const { get } = setup();
  assert.equal((await get("/")).status, 404);
  assert.equal((await get("/healthz/extra")).status, 404);
});

Deno.test("ProxyHealth() refuses a timeout that is not positive", () => {
  assert.throws(() => new ProxyHealth({ healthTimeoutMs: 0 }), /must be greater than 0/);
});

Deno.test("serveHealth() returns null for an empty address (disabled)", () => {
  assert.equal(serveHealth("", () => new Response()), null);
});

Deno.test("serveHealth() refuses a malformed address", () => {
  assert.throws(() => serveHealth("localhost:10256", () => new Response()), ServeError);
  assert.throws(() => serveHealth("0.0.0.0", () => new Response()), /must be IP:port/);
  assert.throws(() => serveHealth("0.0.0.0:70000", () => new Response()), /must be IP:port/);
});

Deno.test("serveHealth() answers real HTTP on loopback and closes", async () => {
  const clock = new FakeClock({ now: T0 });
  const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, clock });
  const server = serveHealth("127.0.0.1:0", healthHandler(health));
  assert.ok(server);
  try {
    assert.equal(server.addr.hostname, "127.0.0.1");
    assert.ok(server.addr.port > 0);
    const base = `http://127.0.0.1:${server.addr.port}`;
    const ok = await fetch(`${base}/healthz`);
    assert.equal(ok.status, 200);
    assert.equal(JSON.parse(await ok.text()).nodeEligible, true);
    health.syncNode({ deleting: true });
    const unavailable = await fetch(`${base}/healthz`);
    assert.equal(unavailable.status, 503);
    await unavailable.body?.cancel();
    assert.throws(
      () => serveHealth(`127.0.0.1:${server.addr.port}`, () => new Response()),
      (err) =>
        err instanceof ServeError && /cannot serve health on 127\.0\.0\.1:/.test(err.message),
    );
  } finally {
    await server.close();
  }
});

Deno.test("serveHealth() survives accept errors, logs them once, and answers /healthz after", async () => {
  const clock = new FakeClock({ now: T0 });
  const health = new ProxyHealth({ healthTimeoutMs: TIMEOUT_MS, clock });
  const listener = new FakeListener();
  const logs: string[] = [];
  const server = serveHealth("0.0.0.0:10256", healthHandler(health), {
    listen: () => listener,
    clock,
    log: (line) => logs.push(line),
  })!;
  try {
    for (let i = 0; i < 3; i++) listener.fail(emfile());
    const conn = listener.connect();
    conn.send("GET /healthz HTTP/1.1\r\nHost: node:10256\r\n\r\n");
    await advanceUntil(clock, () => conn.written().includes('"nodeEligible":true'));
    assert.match(conn.written(), /^HTTP\/1\.1 200 OK\r\n/);
    assert.equal(logs.length, 1);
    assert.match(logs[0], /^health server on 0\.0\.0\.0:10256: cannot accept .*\[EMFILE\]/);
  } finally {
    await server.close();
  }
});
