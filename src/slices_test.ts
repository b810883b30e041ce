import assert from "node:assert/strict";
import { Slices } from "./slices.ts";

Deno.test("Slices.pause() lets timers run once a slice is used up, and only then", async () => {
  const slices = new Slices(20);
  let fired = 0;
  const timer = setInterval(() => fired++, 0);
  try {
    await slices.pause();
    assert.equal(fired, 0, "no turn while the slice lasts");
    const busyUntil = performance.now() + 25;
    while (performance.now() < busyUntil) {
      // Work that uses the slice up.
    }
    await slices.pause();
    assert.ok(fired > 0, "a turn once it is used up");
  } finally {
    clearInterval(timer);
  }
});

Deno.test("Slices.pause() counts a turn the event loop took meanwhile as the start of a new slice", async () => {
  const slices = new Slices(20);
  const work = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until) {
      // Work that uses part of the slice.
    }
  };
  work(15);
  await slices.pause();
  // The work awaits something (I/O, a timer): the event loop has its turn here.
  await new Promise((resolve) => setTimeout(resolve, 5));
  work(15);
  let turned = false;
  const timer = setTimeout(() => turned = true, 0);
  try {
    await slices.pause();
    assert.equal(turned, false, "no turn 15 ms after the last one");
    work(25);
    await slices.pause();
    assert.equal(turned, true, "a turn once 25 ms went by without one");
  } finally {
    clearTimeout(timer);
  }
});
