import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import { rateLimitedFetch, TokenBucket } from "./rate_limit.ts";

/** Sends `count` requests through a limited fetch; returns when each was sent, by fake time. */
async function sendTimes(
  options: { qps: number; burst: number },
  count: number,
  runFor: number,
): Promise<number[]> {
  const clock = new FakeClock();
  const sent: number[] = [];
  const send = rateLimitedFetch(
    () => {
      sent.push(clock.now());
      return Promise.resolve(new Response("{}"));
    },
    new TokenBucket({ ...options, clock }),
  );
  const requests = Array.from({ length: count }, () => send("http://api/"));
  await clock.advanceAsync(runFor);
  await Promise.all(requests);
  return sent;
}

Deno.test("rateLimitedFetch() sends a burst at once, then qps requests a second, as client-go", async () => {
  const sent = await sendTimes({ qps: 5, burst: 3 }, 6, 2_000);
  assert.deepEqual(sent, [0, 0, 0, 200, 400, 600]);
});

Deno.test("rateLimitedFetch() refills tokens while idle, up to the burst", async () => {
  const clock = new FakeClock();
  const bucket = new TokenBucket({ qps: 10, burst: 2, clock });
  await bucket.take();
  await bucket.take();
  clock.advance(10_000);
  let taken = 0;
  for (let i = 0; i < 3; i++) bucket.take().then(() => taken++);
  await clock.advanceAsync(0);
  assert.equal(taken, 2, "two tokens held after a long idle time, not a hundred");
  await clock.advanceAsync(100);
  assert.equal(taken, 3);
});

Deno.test("rateLimitedFetch() does not limit with a qps of 0 or below", async () => {
  assert.deepEqual(await sendTimes({ qps: -1, burst: 1 }, 4, 0), [0, 0, 0, 0]);
});

Deno.test("rateLimitedFetch() gives up waiting when the request is aborted", async () => {
  const clock = new FakeClock();
  const send = rateLimitedFetch(
    () => Promise.resolve(new Response("{}")),
    new TokenBucket({ qps: 1, burst: 1, clock }),
  );
  await send("http://api/");
  const controller = new AbortController();
  const waiting = send("http://api/", { signal: controller.signal });
  controller.abort(new Error("stopped"));
  await assert.rejects(waiting, /stopped/);
});
