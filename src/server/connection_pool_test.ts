/**
 * Specs of the connection budget: which connection goes when a listener or the pool is full.
 *
 * @module
 */
import assert from "node:assert/strict";
import { ConnectionPool, type PooledConnection } from "./connection_pool.ts";

/** A pool whose closes and counts are recorded. */
function setup(maxConnections: number) {
  const closed: string[] = [];
  const evicted: string[] = [];
  const refused: string[] = [];
  const pool = new ConnectionPool({
    maxConnections,
    onEvicted: (s) => evicted.push(s),
    onRefused: (s) => refused.push(s),
  });
  const open = (
    listener: ReturnType<ConnectionPool["listener"]>,
    id: string,
    source = "192.168.77.2",
  ): PooledConnection | null => listener.admit(source, () => closed.push(id));
  return { pool, closed, evicted, refused, open };
}

Deno.test("ConnectionPool: a full listener closes its oldest waiting connection for a new one", () => {
  const { pool, closed, evicted, open } = setup(100);
  const health = pool.listener("health", 3);
  open(health, "a");
  open(health, "b");
  open(health, "c");
  assert.ok(open(health, "d"));
  assert.deepEqual(closed, ["a"]);
  assert.deepEqual(evicted, ["health"]);
  assert.equal(health.size, 3);
});

Deno.test("ConnectionPool: a connection being answered is never evicted; when all are, the new one is refused", () => {
  const { pool, closed, refused, open } = setup(100);
  const health = pool.listener("health", 2);
  open(health, "a")!.setState("active");
  open(health, "b");
  open(health, "c")!.setState("active");
  assert.deepEqual(closed, ["b"], "b was the only waiting one");
  assert.equal(open(health, "d"), null);
  assert.deepEqual(refused, ["health"]);
  assert.deepEqual(closed, ["b"]);
  assert.equal(health.size, 2);
});

Deno.test("ConnectionPool: a state change makes a connection the newest; idle and half-open are both waiting", () => {
  const { pool, closed, open } = setup(100);
  const health = pool.listener("health", 3);
  const a = open(health, "a")!;
  open(health, "b");
  open(health, "c");
  a.setState("active");
  a.setState("idle"); // answered, now kept alive: newer than b and c
  open(health, "d");
  open(health, "e");
  assert.deepEqual(closed, ["b", "c"]);
  open(health, "f");
  assert.deepEqual(closed, ["b", "c", "a"], "an idle connection goes like a half-open one");
});

Deno.test("ConnectionPool: the address holding the most connections loses one first", () => {
  const { pool, closed, open } = setup(100);
  const health = pool.listener("health", 4);
  open(health, "prober", "192.168.77.1"); // the oldest, but alone on its address
  open(health, "flood-1");
  open(health, "flood-2");
  open(health, "flood-3");
  for (let i = 4; i <= 10; i++) open(health, `flood-${i}`);
  assert.deepEqual(closed, [
    "flood-1",
    "flood-2",
    "flood-3",
    "flood-4",
    "flood-5",
    "flood-6",
    "flood-7",
  ]);
  assert.equal(health.size, 4);
});

Deno.test("ConnectionPool: at the shared budget, the oldest waiting connection of any listener goes", () => {
  const { pool, closed, evicted, open } = setup(4);
  const health = pool.listener("health", 3);
  const check = pool.listener("health-check", 3);
  open(check, "check-1");
  open(check, "check-2");
  open(health, "health-1");
  open(health, "health-2");
  assert.equal(pool.size, 4);
  open(health, "health-3");
  assert.deepEqual(closed, ["check-1"]);
  assert.deepEqual(evicted, ["health-check"]);
  assert.deepEqual(pool.sizes(), new Map([["health-check", 1], ["health", 3]]));
});

Deno.test("ConnectionPool: release frees a place once; a listener's cap is at most the pool's", () => {
  const { pool, closed, open } = setup(2);
  const metrics = pool.listener("metrics", 50);
  assert.equal(metrics.maxConnections, 2);
  const a = open(metrics, "a")!;
  open(metrics, "b");
  a.release();
  a.release();
  a.setState("idle"); // no effect once released
  open(metrics, "c");
  assert.deepEqual(closed, []);
  assert.equal(pool.size, 2);
});

Deno.test("ConnectionPool refuses a budget under 1", () => {
  assert.throws(() => new ConnectionPool({ maxConnections: 0 }), RangeError);
});
