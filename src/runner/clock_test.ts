import assert from "node:assert/strict";
import { FakeClock, realClock } from "./clock.ts";

Deno.test("FakeClock starts at the given time and does not move by itself", () => {
  assert.equal(new FakeClock().now(), 0);
  const clock = new FakeClock({ now: 5000 });
  assert.equal(clock.now(), 5000);
  assert.equal(clock.now(), 5000);
});

Deno.test("FakeClock.advance() fires due timers in time order, ties in the order they were set", () => {
  const clock = new FakeClock();
  const fired: string[] = [];
  clock.setTimeout(() => fired.push("c@30"), 30);
  clock.setTimeout(() => fired.push("a@10"), 10);
  clock.setTimeout(() => fired.push("b1@20"), 20);
  clock.setTimeout(() => fired.push("b2@20"), 20);
  clock.advance(30);
  assert.deepEqual(fired, ["a@10", "b1@20", "b2@20", "c@30"]);
  assert.equal(clock.now(), 30);
});

Deno.test("FakeClock.advance() leaves timers beyond the window pending", () => {
  const clock = new FakeClock();
  let fired = 0;
  clock.setTimeout(() => fired++, 1000);
  clock.advance(999);
  assert.equal(fired, 0);
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(1);
  assert.equal(fired, 1);
  assert.equal(clock.pendingTimers(), 0);
});

Deno.test("FakeClock.advance() shows each timer its own due time while it runs", () => {
  const clock = new FakeClock({ now: 100 });
  const seen: number[] = [];
  clock.setTimeout(() => seen.push(clock.now()), 5);
  clock.setTimeout(() => seen.push(clock.now()), 50);
  clock.advance(1000);
  assert.deepEqual(seen, [105, 150]);
  assert.equal(clock.now(), 1100);
});

Deno.test("FakeClock.advance() fires timers set by fired timers inside the window", () => {
  const clock = new FakeClock();
  const fired: number[] = [];
  clock.setTimeout(() => {
    fired.push(clock.now());
    clock.setTimeout(() => fired.push(clock.now()), 10);
    clock.setTimeout(() => fired.push(clock.now()), 100);
  }, 10);
  clock.advance(50);
  assert.deepEqual(fired, [10, 20]);
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(60);
  assert.deepEqual(fired, [10, 20, 110]);
});

Deno.test("FakeClock.advance(0) fires timers due now, including zero-delay ones", () => {
  const clock = new FakeClock();
  let fired = 0;
  clock.setTimeout(() => fired++, 0);
  clock.setTimeout(() => fired++, -5);
  assert.equal(fired, 0);
  clock.advance(0);
  assert.equal(fired, 2);
});

Deno.test("FakeClock.clearTimeout() cancels a timer and ignores unknown ids", () => {
  const clock = new FakeClock();
  let fired = 0;
  const id = clock.setTimeout(() => fired++, 10);
  clock.setTimeout(() => fired++, 20);
  assert.equal(clock.pendingTimers(), 2);
  clock.clearTimeout(id);
  clock.clearTimeout(id);
  clock.clearTimeout(12345);
  assert.equal(clock.pendingTimers(), 1);
  clock.advance(100);
  assert.equal(fired, 1);
});

Deno.test("FakeClock.advance() stops a timer that reschedules itself with no delay", () => {
  const clock = new FakeClock({ maxFiringsPerAdvance: 100 });
  function again(): void {
    clock.setTimeout(again, 0);
  }
  clock.setTimeout(again, 0);
  assert.throws(() => clock.advance(1), /reschedules itself with no delay/);
});

Deno.test("FakeClock.advance() rejects a negative step", () => {
  const clock = new FakeClock();
  assert.throws(() => clock.advance(-1), RangeError);
  assert.throws(() => clock.advance(Number.NaN), RangeError);
});

Deno.test("FakeClock.advanceAsync() lets async callbacks set the next timer before moving on", async () => {
  const clock = new FakeClock();
  const fired: number[] = [];
  clock.setTimeout(async () => {
    await Promise.resolve();
    await Promise.resolve();
    clock.setTimeout(() => fired.push(clock.now()), 10);
  }, 10);

  const sync = new FakeClock();
  const syncFired: number[] = [];
  sync.setTimeout(async () => {
    await Promise.resolve();
    sync.setTimeout(() => syncFired.push(sync.now()), 10);
  }, 10);
  sync.advance(50);
  assert.deepEqual(syncFired, [], "advance() gives async callbacks no chance to run");

  await clock.advanceAsync(50);
  assert.deepEqual(fired, [20]);
  assert.equal(clock.now(), 50);
});

Deno.test("FakeClock.flush() settles resolved promise chains without moving time", async () => {
  const clock = new FakeClock();
  let done = false;
  void (async () => {
    for (let i = 0; i < 5; i++) await Promise.resolve();
    done = true;
  })();
  await clock.flush();
  assert.equal(done, true);
  assert.equal(clock.now(), 0);
});

Deno.test("realClock reads the wall clock", () => {
  const before = Date.now();
  const now = realClock.now();
  assert.ok(now >= before && now <= Date.now());
});

Deno.test("realClock.clearTimeout() cancels a real timer", async () => {
  let fired = false;
  const id = realClock.setTimeout(() => fired = true, 0);
  realClock.clearTimeout(id);
  realClock.clearTimeout(id);
  const { promise, resolve } = Promise.withResolvers<void>();
  realClock.setTimeout(resolve, 0);
  await promise;
  assert.equal(fired, false);
});
