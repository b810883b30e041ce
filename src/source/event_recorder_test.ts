/**
 * Specs of the Event recorder: upstream's `events.k8s.io/v1` Events, sent one at a time without
 * ever holding up or failing the caller, repeats and overflow dropped.
 *
 * @module
 */
import assert from "node:assert/strict";
import { FakeClock } from "../runner/clock.ts";
import type { SendOptions } from "./api_connection.ts";
import {
  ApiEventRecorder,
  DEDUP_MS,
  eventRequest,
  eventsOf,
  MAX_NOTE_BYTES,
  MAX_PENDING,
  NO_EVENTS,
  proxyEvents,
} from "./event_recorder.ts";

/** 2024-05-01T12:00:00Z. */
const T0 = Date.UTC(2024, 4, 1, 12, 0, 0);

/** A fake API server: records each POST, answers with `status` or fails with `error`. */
function fakeServer() {
  const posted: { path: string; body: Record<string, unknown> }[] = [];
  const server = {
    posted,
    status: 201,
    error: undefined as Error | undefined,
    /** When set, sends wait for it (a server that does not answer). */
    hold: undefined as Promise<void> | undefined,
    send: async (method: string, path: string, options: SendOptions): Promise<Response> => {
      assert.equal(method, "POST");
      if (server.hold !== undefined) {
        await Promise.race([
          server.hold,
          new Promise((_, reject) =>
            options.signal.addEventListener("abort", () => reject(options.signal.reason))
          ),
        ]);
      }
      if (server.error !== undefined) throw server.error;
      posted.push({ path, body: JSON.parse(options.body!) });
      return new Response("{}", { status: server.status });
    },
  };
  return server;
}

function setup() {
  const clock = new FakeClock({ now: T0 });
  const server = fakeServer();
  const logs: string[] = [];
  const recorder = new ApiEventRecorder({
    send: server.send,
    hostname: "node-a",
    clock,
    log: (line) => logs.push(line),
  });
  return { clock, server, logs, recorder, events: proxyEvents(recorder, "node-a") };
}

Deno.test("eventRequest() writes upstream's Starting Event on the Node, in the default namespace", () => {
  const events: unknown[] = [];
  proxyEvents({ record: (e) => events.push(e) }, "node-a").starting();
  const request = eventRequest(events[0] as Parameters<typeof eventRequest>[0], {
    nowMs: T0 + 250,
    reportingInstance: "kube-proxy-node-a",
  });
  assert.equal(request.path, "/apis/events.k8s.io/v1/namespaces/default/events");
  assert.deepEqual(request.body, {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: {
      name: `node-a.${(BigInt(T0 + 250) * 1_000_000n).toString(16)}`,
      namespace: "default",
    },
    eventTime: "2024-05-01T12:00:00.250000Z",
    reportingController: "kube-proxy",
    reportingInstance: "kube-proxy-node-a",
    action: "StartKubeProxy",
    reason: "Starting",
    regarding: { kind: "Node", name: "node-a", uid: "node-a" },
    note: "",
    type: "Normal",
  });
});

Deno.test("eventRequest() puts a Service's Event in its namespace, its note cut to 1 kB", () => {
  const events: unknown[] = [];
  proxyEvents({ record: (e) => events.push(e) }, "node-a").serviceHealthCheckFailed(
    { namespace: "shop", name: "cart" },
    "é".repeat(MAX_NOTE_BYTES),
  );
  const { path, body } = eventRequest(events[0] as Parameters<typeof eventRequest>[0], {
    nowMs: T0,
    reportingInstance: "kube-proxy-node-a",
    seq: 1,
  });
  assert.equal(path, "/apis/events.k8s.io/v1/namespaces/shop/events");
  assert.deepEqual(body.regarding, {
    kind: "Service",
    namespace: "shop",
    name: "cart",
    uid: "shop/cart",
  });
  assert.equal(body.type, "Warning");
  assert.equal(body.reason, "FailedToStartServiceHealthcheck");
  assert.equal(body.action, "Listen");
  assert.equal(body.note, "é".repeat(MAX_NOTE_BYTES / 2), "cut between characters");
  assert.match((body.metadata as { name: string }).name, /^cart\.[0-9a-f]+1$/);
});

Deno.test("ApiEventRecorder sends each Event once and drops the same Event again within 5 minutes", async () => {
  const { clock, server, recorder, events } = setup();
  events.starting();
  events.starting();
  await recorder.flush();
  assert.equal(server.posted.length, 1);
  clock.advance(DEDUP_MS - 1);
  events.starting();
  events.healthServerFailed("cannot bind 0.0.0.0:10256"); // another Event
  await recorder.flush();
  assert.deepEqual(server.posted.map((p) => p.body.reason), [
    "Starting",
    "FailedToStartProxierHealthcheck",
  ]);
  clock.advance(1);
  events.starting();
  await recorder.flush();
  assert.equal(server.posted.length, 3, "sent again once 5 minutes have passed");
  assert.deepEqual(recorder.counts, { sent: 3, dropped: 2 });
});

Deno.test("ApiEventRecorder never fails or holds up the caller: a refused or failed send is logged once", async () => {
  const { server, logs, recorder, events } = setup();
  server.status = 403;
  events.starting();
  events.metricsServerFailed("cannot bind 127.0.0.1:10249");
  await recorder.flush();
  server.status = 201;
  server.error = new TypeError("connection refused");
  events.healthServerFailed("cannot bind 0.0.0.0:10256");
  await recorder.flush();
  assert.deepEqual(logs, [
    "cannot record the Starting Event: the API server answered 403",
    "cannot record the FailedToStartProxierHealthcheck Event: connection refused",
  ]);
  assert.deepEqual(recorder.counts, { sent: 0, dropped: 3 });
});

Deno.test("ApiEventRecorder.record() returns at once while the server does not answer, and keeps at most 100 waiting", async () => {
  const { server, recorder, events } = setup();
  let answer!: () => void;
  server.hold = new Promise((resolve) => answer = resolve);
  for (let i = 0; i < MAX_PENDING + 10; i++) {
    events.serviceHealthCheckFailed({ namespace: "default", name: `lb-${i}` }, "busy");
  }
  // One is in flight, MAX_PENDING wait, the rest were dropped.
  assert.equal(recorder.counts.dropped, 9);
  answer();
  await recorder.flush();
  assert.equal(server.posted.length, MAX_PENDING + 1);
});

Deno.test("ApiEventRecorder.close() aborts a send in flight and records nothing afterwards", async () => {
  const { server, logs, recorder, events } = setup();
  server.hold = new Promise(() => {}); // never answers
  events.starting();
  await recorder.close();
  events.healthServerFailed("late");
  await recorder.flush();
  assert.equal(server.posted.length, 0);
  assert.deepEqual(logs, []);
});

Deno.test("eventsOf() finds a source's recorder, and records nothing for a source without one", () => {
  const recorded: unknown[] = [];
  const recorder = { record: (e: unknown) => recorded.push(e) };
  assert.equal(eventsOf({ events: recorder }), recorder);
  assert.equal(eventsOf({}), NO_EVENTS);
  assert.equal(eventsOf({ events: "nope" }), NO_EVENTS);
});
