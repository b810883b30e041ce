/**
 * Kubernetes Events about this proxy's node and Services, written as upstream kube-proxy's
 * recorder writes them: `events.k8s.io/v1` Events (kube-proxy's `events.NewBroadcaster` with
 * the `EventsV1` sink; no core `v1` fallback, as upstream) from `reportingController:
 * kube-proxy`, so that what watches kube-proxy's Events sees ours.
 *
 * The Events upstream records that apply here ({@link proxyEvents}):
 * - `Starting` (Normal, action `StartKubeProxy`) on the Node when the proxy starts;
 * - `FailedToStartServiceHealthcheck` (Warning, action `Listen`) on a Service whose
 *   health-check node port cannot be bound;
 * - `FailedToStartProxierHealthcheck` and `FailedToStartMetricServer` (Warning, action
 *   `StartKubeProxy`) on the Node, for when `bindAddressHardFail` ends the proxy because the
 *   health or metrics server cannot be bound (for the servers' hard-fail path to call).
 * Upstream records nothing when the node's IPs change (it logs and exits), and neither do we.
 *
 * Recording never blocks and never fails the caller: {@link ApiEventRecorder.record} queues the
 * Event and returns; one request at a time sends the queue. The same Event (object, type,
 * reason, action, note) again within {@link DEDUP_MS} is dropped, at most {@link MAX_PENDING}
 * wait (more are dropped), and a send that fails is logged once per distinct problem and not
 * retried. With `--from-file` there is no API server and nothing is recorded
 * ({@link NO_EVENTS}).
 *
 * @example
 * ```ts
 * const recorder = new ApiEventRecorder({
 *   send: (method, path, options) => connection.send(method, path, options),
 *   hostname: "node-a",
 * });
 * proxyEvents(recorder, "node-a").starting();
 * await recorder.close();
 * ```
 *
 * @module
 */
import { type Clock, realClock } from "../runner/clock.ts";
import type { SendOptions } from "./api_connection.ts";

/** The object an Event is about, as upstream's `ObjectReference`s name it. */
export interface EventReference {
  readonly kind: "Node" | "Service";
  /** Empty for a Node (its Events go to the `default` namespace). */
  readonly namespace: string;
  readonly name: string;
}

/** One Event, before it is addressed and timed. */
export interface ProxyEvent {
  readonly regarding: EventReference;
  readonly type: "Normal" | "Warning";
  /** Why (upstream's reason), e.g. `FailedToStartServiceHealthcheck`. */
  readonly reason: string;
  /** What was being done, e.g. `Listen`. */
  readonly action: string;
  /** The human-readable message; at most {@link MAX_NOTE_BYTES} are sent. */
  readonly note: string;
}

/** Records Events; never throws and never waits. */
export interface EventRecorder {
  record(event: ProxyEvent): void;
}

/** The recorder that records nothing (`--from-file`, one-shot runs, `explain`). */
export const NO_EVENTS: EventRecorder = Object.freeze({ record: () => {} });

/** The `reportingController` of every Event, as upstream's (`kube-proxy`). */
export const REPORTING_CONTROLLER = "kube-proxy";

/** The same Event again within this many ms is dropped. */
export const DEDUP_MS = 5 * 60_000;

/** Events waiting to be sent at most; more are dropped. */
export const MAX_PENDING = 100;

/** The longest note the API server takes (events.k8s.io/v1 validation: 1 kB). */
export const MAX_NOTE_BYTES = 1024;

/** How long one Event may take to send. */
const SEND_TIMEOUT_MS = 10_000;

/**
 * The Events upstream kube-proxy records, for the node `hostname`.
 *
 * @example
 * ```ts
 * proxyEvents(recorder, "node-a").serviceHealthCheckFailed({ namespace: "default", name: "lb" },
 *   'node node-a failed to start healthcheck "default/lb" on port 30300: address in use');
 * ```
 */
export function proxyEvents(recorder: EventRecorder, hostname: string) {
  const node: EventReference = { kind: "Node", namespace: "", name: hostname };
  return {
    /** The proxy started (upstream's "birth cry"). */
    starting: () =>
      recorder.record({
        regarding: node,
        type: "Normal",
        reason: "Starting",
        action: "StartKubeProxy",
        note: "",
      }),
    /** A Service's health-check node port cannot be bound. */
    serviceHealthCheckFailed: (
      service: { readonly namespace: string; readonly name: string },
      message: string,
    ) =>
      recorder.record({
        regarding: { kind: "Service", namespace: service.namespace, name: service.name },
        type: "Warning",
        reason: "FailedToStartServiceHealthcheck",
        action: "Listen",
        note: message,
      }),
    /** `bindAddressHardFail`: the health server (`/healthz`) cannot be bound. */
    healthServerFailed: (message: string) =>
      recorder.record({
        regarding: node,
        type: "Warning",
        reason: "FailedToStartProxierHealthcheck",
        action: "StartKubeProxy",
        note: message,
      }),
    /** `bindAddressHardFail`: the metrics server cannot be bound. */
    metricsServerFailed: (message: string) =>
      recorder.record({
        regarding: node,
        type: "Warning",
        reason: "FailedToStartMetricServer",
        action: "StartKubeProxy",
        note: message,
      }),
  };
}

/** Where an Event is created and what is sent: the path and the `events.k8s.io/v1` object. */
export interface EventRequest {
  readonly path: string;
  readonly body: Record<string, unknown>;
}

/**
 * The request that creates `event`: in the regarded object's namespace (`default` for a Node),
 * named `NAME.HEXNANOS` like client-go's, stamped with `nowMs` (microseconds, as `MicroTime`).
 * `seq` tells apart Events of the same object in the same millisecond. Pure.
 *
 * @example
 * ```ts
 * eventRequest(event, { nowMs: Date.UTC(2024, 4, 1, 12), reportingInstance: "kube-proxy-node-a" });
 * // { path: "/apis/events.k8s.io/v1/namespaces/default/events", body: { … } }
 * ```
 */
export function eventRequest(
  event: ProxyEvent,
  options: { nowMs: number; reportingInstance: string; seq?: number },
): EventRequest {
  const { regarding } = event;
  const namespace = regarding.namespace === "" ? "default" : regarding.namespace;
  const nanos = BigInt(options.nowMs) * 1_000_000n + BigInt((options.seq ?? 0) % 1_000_000);
  const objectRef = regarding.kind === "Node"
    ? { kind: "Node", name: regarding.name, uid: regarding.name }
    : {
      kind: "Service",
      namespace: regarding.namespace,
      name: regarding.name,
      uid: `${regarding.namespace}/${regarding.name}`,
    };
  return {
    path: `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/events`,
    body: {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: `${regarding.name}.${nanos.toString(16)}`, namespace },
      eventTime: microTime(options.nowMs),
      reportingController: REPORTING_CONTROLLER,
      reportingInstance: options.reportingInstance,
      action: event.action,
      reason: event.reason,
      regarding: objectRef,
      note: truncateUtf8(event.note, MAX_NOTE_BYTES),
      type: event.type,
    },
  };
}

/** Options of an {@link ApiEventRecorder}. */
export interface ApiEventRecorderOptions {
  /** Sends one request to the API server (`ApiConnection.send`). */
  send(method: string, path: string, options: SendOptions): Promise<Response>;
  /** This node's name: `reportingInstance` is `kube-proxy-HOSTNAME`, as upstream's. */
  hostname: string;
  /** Where a failed send is reported (once per distinct problem). Default: nowhere. */
  log?: (line: string) => void;
  /** Default {@link realClock}. */
  clock?: Clock;
}

/** An {@link EventRecorder} that creates the Events through the API server; see the module doc. */
export class ApiEventRecorder implements EventRecorder {
  readonly #o: ApiEventRecorderOptions;
  readonly #clock: Clock;
  readonly #abort = new AbortController();
  readonly #pending: ProxyEvent[] = [];
  /** When each recent Event (by its identity) was last queued. */
  readonly #recent = new Map<string, number>();
  #sending: Promise<void> | undefined;
  #seq = 0;
  #lastProblem = "";
  #sent = 0;
  #dropped = 0;

  /** Creates the recorder; nothing is sent until an Event is recorded. */
  constructor(options: ApiEventRecorderOptions) {
    this.#o = options;
    this.#clock = options.clock ?? realClock;
  }

  /** Events created so far, and those dropped (repeats, overflow, failed sends). */
  get counts(): { readonly sent: number; readonly dropped: number } {
    return { sent: this.#sent, dropped: this.#dropped };
  }

  /** Queues `event` (unless it repeats a recent one or the queue is full) and returns. */
  record(event: ProxyEvent): void {
    if (this.#abort.signal.aborted) return;
    const now = this.#clock.now();
    for (const [key, at] of this.#recent) if (now - at >= DEDUP_MS) this.#recent.delete(key);
    const key = JSON.stringify([
      event.regarding,
      event.type,
      event.reason,
      event.action,
      event.note,
    ]);
    if (this.#recent.has(key) || this.#pending.length >= MAX_PENDING) {
      this.#dropped++;
      return;
    }
    this.#recent.set(key, now);
    this.#pending.push(event);
    this.#sending ??= this.#drain().finally(() => this.#sending = undefined);
  }

  /** Resolves once every queued Event has been sent (or has failed). */
  async flush(): Promise<void> {
    while (this.#sending !== undefined) await this.#sending;
  }

  /** Drops what is queued and aborts a send in flight; nothing is recorded afterwards. */
  async close(): Promise<void> {
    this.#pending.length = 0;
    this.#abort.abort();
    await this.#sending;
  }

  async #drain(): Promise<void> {
    for (let event = this.#pending.shift(); event !== undefined; event = this.#pending.shift()) {
      const { path, body } = eventRequest(event, {
        nowMs: this.#clock.now(),
        reportingInstance: `${REPORTING_CONTROLLER}-${this.#o.hostname}`,
        seq: this.#seq++,
      });
      const signal = AbortSignal.any([this.#abort.signal, AbortSignal.timeout(SEND_TIMEOUT_MS)]);
      let problem = "";
      try {
        const response = await this.#o.send("POST", path, { body: JSON.stringify(body), signal });
        await response.body?.cancel();
        if (!response.ok) problem = `the API server answered ${response.status}`;
      } catch (error) {
        if (this.#abort.signal.aborted) return;
        problem = error instanceof Error ? error.message : String(error);
      }
      if (problem === "") {
        this.#sent++;
        this.#lastProblem = "";
        continue;
      }
      this.#dropped++;
      if (problem !== this.#lastProblem) {
        this.#o.log?.(`cannot record the ${event.reason} Event: ${problem}`);
      }
      this.#lastProblem = problem;
    }
  }
}

/**
 * The recorder `source` offers: an `ApiSource`'s {@link EventRecorder} (which records only with
 * `recordEvents`), else {@link NO_EVENTS} (the file source has no API server).
 */
export function eventsOf(source: object): EventRecorder {
  const events = (source as { events?: unknown }).events;
  return typeof events === "object" && events !== null &&
      typeof (events as EventRecorder).record === "function"
    ? events as EventRecorder
    : NO_EVENTS;
}

/**
 * What a `ServiceHealthServer` needs to record `FailedToStartServiceHealthcheck` through
 * `source`'s recorder (its `hostname` and `onOpenFailed` options), for the daemon's wiring.
 *
 * @example
 * ```ts
 * new ServiceHealthServer({ proxyHealthy, ...healthCheckEvents(parts.source, config.hostname) });
 * ```
 */
export function healthCheckEvents(source: object, hostname: string): {
  hostname: string;
  onOpenFailed: (service: { namespace: string; name: string }, message: string) => void;
} {
  const events = proxyEvents(eventsOf(source), hostname);
  return {
    hostname,
    onOpenFailed: (service, message) => events.serviceHealthCheckFailed(service, message),
  };
}

/** A `MicroTime`: RFC 3339 with six fraction digits, UTC. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/Z$/, "000Z");
}

/** `text` cut to at most `maxBytes` of UTF-8, never inside a character. */
function truncateUtf8(text: string, maxBytes: number): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= maxBytes) return text;
  return new TextDecoder().decode(bytes.subarray(0, maxBytes)).replace(/\uFFFD+$/, "");
}
