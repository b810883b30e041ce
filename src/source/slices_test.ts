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
