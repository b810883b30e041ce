import assert from "node:assert/strict";
import fc from "fast-check";
import { BoundedFrequencyRunner, type BoundedFrequencyRunnerOptions } from "./bounded_runner.ts";
import { FakeClock } from "./clock.ts";

const MIN = 1000;
const MAX = 30_000;

/** A function under the runner that records its start times and can be made slow or failing. */
class Recorder {
  readonly starts: number[] = [];
  active = 0;
  maxActive = 0;
  /** Results of the next calls, in order; a call with nothing queued succeeds at once. */
  readonly script: Array<"fail" | PromiseWithResolvers<void>> = [];

  constructor(readonly clock: FakeClock) {}

  fn = async (): Promise<void> => {
    this.starts.push(this.clock.now());
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    try {
      const next = this.script.shift();
      if (next === "fail") throw new Error(`sync ${this.starts.length} failed`);
      if (next) await next.promise;
    } finally {
      this.active--;
    }
  };

  /** Makes the next call wait until the returned deferred is resolved. */
  slow(): PromiseWithResolvers<void> {
    const deferred = Promise.withResolvers<void>();
    this.script.push(deferred);
    return deferred;
  }
}

function setup(options: Partial<BoundedFrequencyRunnerOptions> = {}) {
  const clock = new FakeClock();
  const recorder = new Recorder(clock);
  const errors: unknown[] = [];
  const runner = new BoundedFrequencyRunner(recorder.fn, {
    minIntervalMs: MIN,
    maxIntervalMs: MAX,
    clock,
    onError: (err) => errors.push(err),
    ...options,
  });
  return { clock, recorder, errors, runner };
}

Deno.test("BoundedFrequencyRunner runs nothing before start()", async () => {
  const { clock, recorder, runner } = setup();
  runner.run();
  runner.retryAfter(0);
  await clock.advanceAsync(10 * MAX);
  assert.deepEqual(recorder.starts, []);
  assert.equal(clock.pendingTimers(), 0);
  assert.equal(runner.pending, true, "the request is remembered");
  runner.start();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [10 * MAX]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner start() runs fn at once and then every maxIntervalMs", async () => {
  const { clock, recorder, runner } = setup();
  runner.start();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0]);
  await clock.advanceAsync(MAX - 1);
  assert.deepEqual(recorder.starts, [0]);
  await clock.advanceAsync(1);
  assert.deepEqual(recorder.starts, [0, MAX]);
  await clock.advanceAsync(2 * MAX);
  assert.deepEqual(recorder.starts, [0, MAX, 2 * MAX, 3 * MAX]);
  assert.equal(runner.runs, 4);
  assert.equal(runner.lastSuccessAt, 3 * MAX);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner counts maxIntervalMs from the end of the last run", async () => {
  const { clock, recorder, runner } = setup();
  const first = recorder.slow();
  runner.start();
  await clock.advanceAsync(5000);
  first.resolve();
  await clock.advanceAsync(MAX - 1);
  assert.deepEqual(recorder.starts, [0]);
  await clock.advanceAsync(1);
  assert.deepEqual(recorder.starts, [0, 5000 + MAX]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner never starts runs closer than minIntervalMs", async () => {
  const { clock, recorder, runner } = setup();
  runner.start();
  await clock.advanceAsync(100);
  runner.run();
  await clock.advanceAsync(MIN - 101);
  assert.deepEqual(recorder.starts, [0]);
  assert.equal(runner.pending, true);
  await clock.advanceAsync(1);
  assert.deepEqual(recorder.starts, [0, MIN]);
  assert.equal(runner.pending, false);
  assert.equal(runner.lastRunStartedAt, MIN);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner run() after minIntervalMs has passed runs at once", async () => {
  const { clock, recorder, runner } = setup();
  runner.start();
  await clock.advanceAsync(5000);
  runner.run();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0, 5000]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner coalesces a burst of run() calls into one run", async () => {
  const { clock, recorder, runner } = setup();
  runner.start();
  await clock.advanceAsync(0);
  for (let i = 0; i < 1000; i++) runner.run();
  await clock.advanceAsync(MAX - 1);
  assert.deepEqual(recorder.starts, [0, MIN]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner turns run() calls during a run into one following run", async () => {
  const { clock, recorder, runner } = setup();
  const first = recorder.slow();
  runner.start();
  await clock.advanceAsync(0);
  for (let i = 0; i < 1000; i++) {
    runner.run();
    await clock.advanceAsync(5);
  }
  assert.deepEqual(recorder.starts, [0], "nothing starts while the first run is in progress");
  assert.equal(runner.pending, true);
  first.resolve();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0, 5000]);
  await clock.advanceAsync(MAX - 1);
  assert.equal(recorder.starts.length, 2, "a burst costs at most two runs");
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner never runs fn concurrently with itself when fn is slow", async () => {
  const { clock, recorder, runner } = setup();
  const first = recorder.slow();
  runner.start();
  await clock.advanceAsync(0);
  runner.run();
  runner.retryAfter(0);
  await clock.advanceAsync(3 * MAX);
  assert.equal(runner.running, true);
  assert.deepEqual(recorder.starts, [0], "neither run(), retryAfter() nor maxIntervalMs overlap");
  first.resolve();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0, 3 * MAX]);
  assert.equal(recorder.maxActive, 1);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner retries a failed run after retryIntervalMs and reports the error", async () => {
  const { clock, recorder, errors, runner } = setup({ retryIntervalMs: 5000 });
  recorder.script.push("fail");
  runner.start();
  await clock.advanceAsync(0);
  assert.equal(runner.failures, 1);
  assert.equal(runner.lastSuccessAt, undefined);
  assert.equal(errors.length, 1);
  assert.match(String(errors[0]), /sync 1 failed/);
  await clock.advanceAsync(4999);
  assert.deepEqual(recorder.starts, [0]);
  await clock.advanceAsync(1);
  assert.deepEqual(recorder.starts, [0, 5000]);
  assert.equal(runner.lastSuccessAt, 5000);
  await clock.advanceAsync(MAX - 1);
  assert.deepEqual(recorder.starts, [0, 5000], "after the retry succeeds, back to maxIntervalMs");
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner retries after maxIntervalMs when retryIntervalMs is not set", async () => {
  const { clock, recorder, runner } = setup();
  recorder.script.push("fail");
  runner.start();
  await clock.advanceAsync(MAX);
  assert.deepEqual(recorder.starts, [0, MAX]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner waits minIntervalMs before retrying even when retryIntervalMs is shorter", async () => {
  const { clock, recorder, runner } = setup({ retryIntervalMs: 10 });
  recorder.script.push("fail", "fail");
  runner.start();
  await clock.advanceAsync(2 * MIN);
  assert.deepEqual(recorder.starts, [0, MIN, 2 * MIN]);
  assert.equal(runner.failures, 2);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner run() brings a retry forward, but not before minIntervalMs", async () => {
  const { clock, recorder, runner } = setup({ retryIntervalMs: 20_000 });
  recorder.script.push("fail");
  runner.start();
  await clock.advanceAsync(10);
  runner.run();
  await clock.advanceAsync(MIN - 11);
  assert.deepEqual(recorder.starts, [0]);
  await clock.advanceAsync(1);
  assert.deepEqual(recorder.starts, [0, MIN]);
  await clock.advanceAsync(20_000);
  assert.deepEqual(recorder.starts, [0, MIN], "the run replaced the retry");
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner retryAfter() called by fn schedules one more run", async () => {
  const clock = new FakeClock();
  const starts: number[] = [];
  const runner: BoundedFrequencyRunner = new BoundedFrequencyRunner(() => {
    starts.push(clock.now());
    if (starts.length === 1) runner.retryAfter(2500);
    return Promise.resolve();
  }, { minIntervalMs: MIN, maxIntervalMs: MAX, clock });
  runner.start();
  await clock.advanceAsync(2499);
  assert.deepEqual(starts, [0]);
  await clock.advanceAsync(1);
  assert.deepEqual(starts, [0, 2500]);
  await clock.advanceAsync(MAX - 1);
  assert.deepEqual(starts, [0, 2500]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner retryAfter() keeps the earlier of two retries", async () => {
  const { clock, recorder, runner } = setup();
  runner.start();
  await clock.advanceAsync(0);
  runner.retryAfter(8000);
  runner.retryAfter(3000);
  runner.retryAfter(9000);
  await clock.advanceAsync(10_000);
  assert.deepEqual(recorder.starts, [0, 3000]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner treats a synchronous throw from fn as a failure", async () => {
  const clock = new FakeClock();
  const errors: unknown[] = [];
  let calls = 0;
  const runner = new BoundedFrequencyRunner(() => {
    calls++;
    throw new Error("boom");
  }, {
    minIntervalMs: MIN,
    maxIntervalMs: MAX,
    retryIntervalMs: 2000,
    clock,
    onError: (e) => errors.push(e),
  });
  runner.start();
  await clock.advanceAsync(2000);
  assert.equal(calls, 2);
  assert.equal(runner.failures, 2);
  assert.equal(errors.length, 2);
  assert.equal(runner.running, false);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner with burst 2 lets two runs start back to back", async () => {
  const { clock, recorder, runner } = setup({ burst: 2 });
  runner.start();
  await clock.advanceAsync(0);
  runner.run();
  await clock.advanceAsync(0);
  runner.run();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0, 0]);
  await clock.advanceAsync(MIN);
  assert.deepEqual(recorder.starts, [0, 0, MIN]);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner stop() waits for the run in progress and no run starts after it", async () => {
  const { clock, recorder, runner } = setup();
  const first = recorder.slow();
  runner.start();
  await clock.advanceAsync(0);
  runner.run();
  let stopped = false;
  const stopping = runner.stop().then(() => stopped = true);
  await clock.advanceAsync(MIN);
  assert.equal(stopped, false, "stop() waits for the run in progress");
  runner.run();
  runner.start();
  first.resolve();
  await stopping;
  assert.equal(stopped, true);
  await clock.advanceAsync(10 * MAX);
  assert.deepEqual(recorder.starts, [0]);
  assert.equal(clock.pendingTimers(), 0);
  assert.equal(runner.pending, false);
});

Deno.test("BoundedFrequencyRunner stop() cancels its timer and resolves at once when idle", async () => {
  const { clock, runner } = setup();
  runner.start();
  await clock.advanceAsync(0);
  runner.run();
  assert.equal(clock.pendingTimers(), 1);
  await runner.stop();
  assert.equal(clock.pendingTimers(), 0);
});

Deno.test("BoundedFrequencyRunner keeps running when onError throws", async () => {
  const { clock, recorder, runner } = setup({
    retryIntervalMs: MIN,
    onError: () => {
      throw new Error("bad handler");
    },
  });
  recorder.script.push("fail");
  const logged: unknown[] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => logged.push(args);
  try {
    runner.start();
    await clock.advanceAsync(MIN);
  } finally {
    console.error = original;
  }
  assert.deepEqual(recorder.starts, [0, MIN]);
  assert.equal(logged.length, 1);
  await runner.stop();
});

Deno.test("BoundedFrequencyRunner rejects invalid intervals with a message naming the option", () => {
  const fn = () => Promise.resolve();
  assert.throws(
    () => new BoundedFrequencyRunner(fn, { minIntervalMs: 5000, maxIntervalMs: 1000 }),
    { name: "RangeError", message: /maxIntervalMs is 1000, must be >= minIntervalMs \(5000\)/ },
  );
  assert.throws(
    () => new BoundedFrequencyRunner(fn, { minIntervalMs: -1, maxIntervalMs: 1000 }),
    /minIntervalMs is -1/,
  );
  assert.throws(
    () => new BoundedFrequencyRunner(fn, { minIntervalMs: 0, maxIntervalMs: 1, burst: 0 }),
    /burst is 0, must be an integer >= 1/,
  );
  assert.throws(
    () => new BoundedFrequencyRunner(fn, { minIntervalMs: 0, maxIntervalMs: Number.NaN }),
    /maxIntervalMs is NaN/,
  );
});

Deno.test("BoundedFrequencyRunner with maxIntervalMs Infinity runs only on request", async () => {
  const { clock, recorder, runner } = setup({ maxIntervalMs: Infinity });
  runner.start();
  await clock.advanceAsync(100 * MAX);
  assert.deepEqual(recorder.starts, [0]);
  assert.equal(clock.pendingTimers(), 0);
  runner.run();
  await clock.advanceAsync(0);
  assert.deepEqual(recorder.starts, [0, 100 * MAX]);
  await runner.stop();
});

type Step =
  | { kind: "run" }
  | { kind: "retryAfter"; ms: number }
  | { kind: "advance"; ms: number }
  | { kind: "duration"; ms: number }
  | { kind: "fail" };

/** The property's periodic interval and retry delay. */
const MAX_INTERVAL = 10_000;
const RETRY = 2000;

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  fc.constant<Step>({ kind: "run" }),
  fc.integer({ min: 0, max: 5000 }).map((ms): Step => ({ kind: "retryAfter", ms })),
  fc.integer({ min: 0, max: 3000 }).map((ms): Step => ({ kind: "advance", ms })),
  fc.integer({ min: 0, max: 4000 }).map((ms): Step => ({ kind: "duration", ms })),
  fc.constant<Step>({ kind: "fail" }),
);

Deno.test("BoundedFrequencyRunner keeps its bounds under any mix of requests, failures and slow runs", async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(stepArb, { maxLength: 60 }), async (steps) => {
      const clock = new FakeClock();
      const starts: number[] = [];
      /** When each run ended, and whether it failed. */
      const ends: Array<{ at: number; failed: boolean }> = [];
      /** For each run() call, how many runs had started when it was made. */
      const requests: number[] = [];
      const outcomes: Array<{ ms: number; fail: boolean }> = [];
      let active = 0;
      let maxActive = 0;
      const runner = new BoundedFrequencyRunner(async () => {
        starts.push(clock.now());
        maxActive = Math.max(maxActive, ++active);
        const outcome = outcomes.shift() ?? { ms: 0, fail: false };
        await new Promise<void>((resolve) => clock.setTimeout(resolve, outcome.ms));
        active--;
        ends.push({ at: clock.now(), failed: outcome.fail });
        if (outcome.fail) throw new Error("scripted failure");
      }, {
        minIntervalMs: MIN,
        maxIntervalMs: MAX_INTERVAL,
        retryIntervalMs: RETRY,
        clock,
        onError() {},
      });
      runner.start();
      for (const step of steps) {
        if (step.kind === "run") {
          requests.push(starts.length);
          runner.run();
        } else if (step.kind === "retryAfter") runner.retryAfter(step.ms);
        else if (step.kind === "advance") await clock.advanceAsync(step.ms);
        else if (step.kind === "duration") outcomes.push({ ms: step.ms, fail: false });
        else outcomes.push({ ms: 0, fail: true });
      }
      outcomes.length = 0;
      await clock.advanceAsync(20_000);
      const stoppedAt = clock.now();
      await runner.stop();

      for (let i = 1; i < starts.length; i++) {
        assert.ok(starts[i] - starts[i - 1] >= MIN, `starts ${starts} closer than ${MIN}`);
      }
      // The upper bounds: the next run starts at most MAX_INTERVAL after a run ends, and at most
      // RETRY after a failed one (wherever the runner was still running by then).
      assert.ok(starts.length > 0, "start() runs at once");
      for (const [i, end] of ends.entries()) {
        const bound = end.at + (end.failed ? RETRY : MAX_INTERVAL);
        if (bound > stoppedAt) continue;
        const next = starts[i + 1];
        assert.ok(
          next !== undefined && next <= bound,
          `run ${i} ended at ${end.at}${end.failed ? " (failed)" : ""}; the next began at ` +
            `${next ?? "never"}, after ${bound}: starts ${starts}`,
        );
      }
      assert.equal(maxActive, 1, "fn never runs concurrently with itself");
      for (const startedBefore of requests) {
        assert.ok(starts.length > startedBefore, `a run() after run ${startedBefore} was dropped`);
      }
      assert.equal(clock.pendingTimers(), 0);
    }),
    { numRuns: 200 },
  );
});
