/**
 * An in-process Kubernetes API server for tests: Services, EndpointSlices, Nodes and
 * ServiceCIDRs served over the real list/watch HTTP protocol on 127.0.0.1, with fault injection.
 *
 * What it speaks, as the real server does: one global, monotonically increasing
 * resourceVersion; LIST without `resourceVersion` as a consistent read, paginated by
 * `limit`/`continue` over one snapshot; LIST with `resourceVersion=0` (or any version with
 * `resourceVersionMatch=NotOlderThan`, or unset match) served "from the watch cache": the whole
 * list in one response, `limit` ignored, no `continue` token — as the real server did before
 * consistent lists from the cache; `labelSelector` and `fieldSelector`; WATCH (`?watch=1`) as
 * chunked newline-delimited JSON events from a bounded history, starting after `resourceVersion`
 * (or with synthetic `ADDED` events for the current state when it is empty or `0`), `ERROR` with
 * a 410 `Expired` Status when the version has been compacted away, periodic `BOOKMARK`s when
 * `allowWatchBookmarks=true`, ending after `timeoutSeconds`; the streaming watch-list
 * (`sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan`: an
 * `ADDED` per object, then a `BOOKMARK` annotated `k8s.io/initial-events-end: "true"`, then
 * changes), or, with watch-list turned off ({@link TestApiServerOptions.watchList}), the 422 an
 * older server answers it with. Parameter combinations the real server refuses are refused the
 * same way (422 `Invalid`). Objects enter and leave selectors the real way: a modification that
 * makes an object match is an `ADDED`, one that makes it stop matching a `DELETED`. Writes
 * happen only through the programmatic API ({@link TestApiServer.create},
 * {@link TestApiServer.update}, {@link TestApiServer.delete}, {@link TestApiServer.load} for
 * many objects at once); over HTTP the only write is creating an Event (`events.k8s.io/v1` or
 * core `v1`), which is kept in {@link TestApiServer.events} for the test to read.
 * ServiceCIDRs are served at `networking.k8s.io/v1`, or only at `v1beta1` as 1.31/1.32 clusters
 * do ({@link TestApiServerOptions.serviceCIDRVersion}).
 *
 * Sized for benchmarks too: stored objects are shared (never copied) by lists, snapshots and
 * watches, each object's JSON is written once and reused, and {@link TestApiServer.traffic}
 * counts the requests and response bytes served, by verb and by query shape.
 *
 * Faults: {@link TestApiServer.dropWatches}, {@link TestApiServer.stall},
 * {@link TestApiServer.failNext}, {@link TestApiServer.slow}, {@link TestApiServer.kill} /
 * {@link TestApiServer.restart}, {@link TestApiServer.compact} and
 * {@link TestApiServer.setResourceServed} (an older cluster without a resource).
 *
 * @module
 */

import type { ObjectKind, RawObject } from "../../src/source/events.ts";
import {
  parseFieldSelector,
  parseLabelSelector,
  type Selector,
  SelectorError,
} from "./selector.ts";

/** Where and how each kind is served. */
interface ResourceInfo {
  kind: ObjectKind;
  apiVersion: string;
  /** `/api/v1` or `/apis/GROUP/VERSION`. */
  prefix: string;
  plural: string;
  namespaced: boolean;
}

const RESOURCES: readonly ResourceInfo[] = [
  { kind: "Service", apiVersion: "v1", prefix: "/api/v1", plural: "services", namespaced: true },
  {
    kind: "EndpointSlice",
    apiVersion: "discovery.k8s.io/v1",
    prefix: "/apis/discovery.k8s.io/v1",
    plural: "endpointslices",
    namespaced: true,
  },
  { kind: "Node", apiVersion: "v1", prefix: "/api/v1", plural: "nodes", namespaced: false },
  {
    kind: "ServiceCIDR",
    apiVersion: "networking.k8s.io/v1",
    prefix: "/apis/networking.k8s.io/v1",
    plural: "servicecidrs",
    namespaced: false,
  },
];

/** ServiceCIDRs as 1.31 and 1.32 clusters serve them (beta, off by default there). */
const SERVICE_CIDR_V1BETA1: ResourceInfo = {
  kind: "ServiceCIDR",
  apiVersion: "networking.k8s.io/v1beta1",
  prefix: "/apis/networking.k8s.io/v1beta1",
  plural: "servicecidrs",
  namespaced: false,
};

/** Where Events are created: `events.k8s.io/v1` and core `v1`, in a namespace. */
const EVENTS_PATH = /^\/(?:apis\/events\.k8s\.io\/v1|api\/v1)\/namespaces\/([^/]+)\/events$/;

/** The largest Event body the server takes. */
const MAX_EVENT_BYTES = 1 << 20;

/** Default number of write events kept for watches to resume from. */
const DEFAULT_HISTORY_LIMIT = 1000;
/** Default period of BOOKMARK events; the real server sends them about once a minute. */
const DEFAULT_BOOKMARK_INTERVAL_MS = 1000;
/** Watch length when the client gives no `timeoutSeconds`. */
const DEFAULT_WATCH_TIMEOUT_S = 1800;
/** Paginated LIST snapshots kept for `continue` tokens. */
const MAX_SNAPSHOTS = 64;
/** Requests remembered in {@link TestApiServer.requests}. */
const MAX_RECORDED_REQUESTS = 10_000;
/** Objects per chunk when a watch-list streams the initial state. */
const INITIAL_EVENTS_PER_CHUNK = 200;
/** The annotation of the BOOKMARK that ends a watch-list's initial events. */
export const INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end";
/** Query parameters whose values decide how a request is served (the rest count by name). */
const SHAPE_VALUES = new Set([
  "limit",
  "resourceVersion",
  "resourceVersionMatch",
  "sendInitialEvents",
  "allowWatchBookmarks",
]);

/** Options of {@link TestApiServer.start}. */
export interface TestApiServerOptions {
  /** Port to listen on; default 0 (a random free port). */
  port?: number;
  /** Address to listen on; default `127.0.0.1`. */
  hostname?: string;
  /**
   * Whether watches may ask for a streaming initial list (`sendInitialEvents`), as a server
   * with the `WatchList` feature does; when off they are answered 422 like an older server.
   * Default true.
   */
  watchList?: boolean;
  /** Write events kept for watches to resume from. Default 1000. */
  historyLimit?: number;
  /** Period of BOOKMARK events on watches that allow them, ms; 0 disables. Default 1000. */
  bookmarkIntervalMs?: number;
  /**
   * The version ServiceCIDRs are served at: `v1` (1.33 and later) or only `v1beta1` (1.31 and
   * 1.32; a LIST at `v1` then answers 404). Default `v1`.
   */
  serviceCIDRVersion?: "v1" | "v1beta1";
}

/** Options of {@link TestApiServer.failNext}. */
export interface FailOptions {
  /** HTTP status of the injected failure. Default 500. */
  status?: number;
  /** Fail only requests for this kind. Default: any request, discovery included. */
  kind?: ObjectKind;
  /** Fail only watches (`true`) or only non-watch requests (`false`). Default: both. */
  watch?: boolean;
}

/** One request the server received, for asserting what a client asked for. */
export interface RecordedRequest {
  /** HTTP method. */
  method: string;
  /** URL path, e.g. `/api/v1/services`. */
  path: string;
  /** Query parameters. */
  params: Record<string, string>;
  /** The kind the path addresses, if any. */
  kind?: ObjectKind;
  /** Whether it was a watch. */
  watch: boolean;
  /** The `Authorization` header, if any. */
  authorization?: string;
}

/** Requests and response bytes (bodies; watch streams as sent so far). */
export interface TrafficCount {
  requests: number;
  bytes: number;
}

/**
 * What the server has served since it started or since {@link TestApiServer.resetTraffic}:
 * totals by verb, and by query shape — verb, resource and the query parameters that decide how
 * the server answers (e.g. `list endpointslices labelSelector limit=500`,
 * `watch services allowWatchBookmarks=true resourceVersionMatch=NotOlderThan resourceVersion=0
 * sendInitialEvents=true`). Selectors, `continue` and `timeoutSeconds` appear by name only.
 */
export interface Traffic {
  /** LIST requests (collections, any page). */
  list: TrafficCount;
  /** WATCH requests and the bytes their streams carried. */
  watch: TrafficCount;
  /** Everything else: GET of one object, discovery, unknown paths. */
  other: TrafficCount;
  /** By query shape. */
  shapes: Record<string, TrafficCount>;
}

/** A reference to an object: its namespace (namespaced kinds) and name. */
export interface ObjectRef {
  namespace?: string;
  name: string;
}

type EventType = "ADDED" | "MODIFIED" | "DELETED";

interface HistoryEntry {
  rv: number;
  kind: ObjectKind;
  type: EventType;
  object: RawObject;
  previous?: RawObject;
}

interface Watcher {
  kind: ObjectKind;
  namespace?: string;
  labels: Selector;
  fields: Selector;
  bookmarks: boolean;
  controller: ReadableStreamDefaultController<Uint8Array>;
  /** Lines held back while the server is stalled, or while initial events are still to send. */
  held: string[];
  /**
   * A watch-list's initial events not yet sent: chunks of lines, then the bookmark that ends
   * them. Each chunk is written only when the client's stream pulls for more, as a real API
   * server streams from its watch cache; changes meanwhile wait in `held`.
   */
  initial?: Iterator<string>;
  timer?: ReturnType<typeof setTimeout>;
  closed: boolean;
  /** The query shape the bytes this stream carries are counted under. */
  shape: string;
}

interface Snapshot {
  rv: number;
  items: RawObject[];
}

interface PendingFailure {
  remaining: number;
  status: number;
  kind?: ObjectKind;
  watch?: boolean;
}

const encoder = new TextEncoder();

/**
 * A test API server on 127.0.0.1. Start it with {@link TestApiServer.start}; close it with
 * {@link TestApiServer.close} (or `await using`).
 *
 * @example
 * ```ts
 * await using server = await TestApiServer.start();
 * server.create("Service", { metadata: { namespace: "default", name: "web" }, spec: {} });
 * const list = await (await fetch(`${server.url}/api/v1/services`)).json();
 * list.items.length; // 1
 * ```
 */
export class TestApiServer implements AsyncDisposable {
  readonly #historyLimit: number;
  readonly #bookmarkIntervalMs: number;
  readonly #hostname: string;
  #port: number;
  #watchList: boolean;
  /** What each kind is served as (ServiceCIDR's version is an option). */
  readonly #resources: readonly ResourceInfo[];
  readonly #resourceByKind: ReadonlyMap<ObjectKind, ResourceInfo>;

  #rv = 0;
  /** Watches may resume from any version at or above this one. */
  #compactedRv = 0;
  #history: HistoryEntry[] = [];
  #objects = new Map<ObjectKind, Map<string, RawObject>>();
  /** Each kind's stored objects sorted by key, until the next write of that kind. */
  #sorted = new Map<ObjectKind, RawObject[]>();
  /** JSON of stored objects as LIST items (no TypeMeta) and as watch-event objects. */
  #itemJson = new WeakMap<RawObject, string>();
  #objectJson = new WeakMap<RawObject, string>();
  #traffic = emptyTraffic();
  #watchers = new Set<Watcher>();
  #snapshots = new Map<string, Snapshot>();
  #unserved = new Set<ObjectKind>();
  #failures: PendingFailure[] = [];
  #slowMs = 0;
  #stall?: { promise: Promise<void>; release: () => void; timer?: ReturnType<typeof setTimeout> };

  #server?: Deno.HttpServer<Deno.NetAddr>;
  #generation?: AbortController;
  #bookmarkTimer?: ReturnType<typeof setInterval>;
  #closed = false;

  /** Every request received, oldest first (bounded). */
  readonly requests: RecordedRequest[] = [];

  /**
   * The Events clients created, oldest first, each as posted with its namespace (from the
   * path) and the API version it was posted to.
   */
  readonly events: { namespace: string; apiVersion: string; event: RawObject }[] = [];

  private constructor(options: TestApiServerOptions) {
    this.#historyLimit = options.historyLimit ?? DEFAULT_HISTORY_LIMIT;
    this.#bookmarkIntervalMs = options.bookmarkIntervalMs ?? DEFAULT_BOOKMARK_INTERVAL_MS;
    this.#hostname = options.hostname ?? "127.0.0.1";
    this.#port = options.port ?? 0;
    this.#watchList = options.watchList ?? true;
    this.#resources = options.serviceCIDRVersion === "v1beta1"
      ? RESOURCES.map((r) => r.kind === "ServiceCIDR" ? SERVICE_CIDR_V1BETA1 : r)
      : RESOURCES;
    this.#resourceByKind = new Map(this.#resources.map((r) => [r.kind, r]));
    for (const r of this.#resources) this.#objects.set(r.kind, new Map());
  }

  /** Starts a server listening on 127.0.0.1. */
  static async start(options: TestApiServerOptions = {}): Promise<TestApiServer> {
    const server = new TestApiServer(options);
    await server.#listen();
    if (server.#bookmarkIntervalMs > 0) {
      server.#bookmarkTimer = setInterval(() => server.sendBookmarks(), server.#bookmarkIntervalMs);
    }
    return server;
  }

  /** The port the server listens on (kept across {@link kill} and {@link restart}). */
  get port(): number {
    return this.#port;
  }

  /** Base URL, `http://HOSTNAME:PORT` (`127.0.0.1` when listening on every address). */
  get url(): string {
    const host = this.#hostname === "0.0.0.0" ? "127.0.0.1" : this.#hostname;
    return `http://${host.includes(":") ? `[${host}]` : host}:${this.#port}`;
  }

  /** The current (latest) resourceVersion. */
  get resourceVersion(): number {
    return this.#rv;
  }

  /** How many watch streams are open. */
  get watchCount(): number {
    return this.#watchers.size;
  }

  /**
   * Stores a new object and notifies watchers with `ADDED`. A namespaced object without a
   * namespace goes to `default`. Returns the stored object (with `resourceVersion`, `uid`,
   * `creationTimestamp`, `kind` and `apiVersion`). Throws if the object already exists.
   */
  create(kind: ObjectKind, object: RawObject): RawObject {
    const resource = this.#resourceByKind.get(kind)!;
    const stored = normalize(resource, object);
    const key = keyOf(resource, stored);
    const objects = this.#objects.get(kind)!;
    if (objects.has(key)) throw new Error(`${kind} ${key} already exists`);
    const metadata = stored.metadata as Record<string, unknown>;
    metadata.uid = crypto.randomUUID();
    metadata.creationTimestamp = new Date().toISOString();
    metadata.resourceVersion = String(++this.#rv);
    objects.set(key, stored);
    this.#sorted.delete(kind);
    this.#record({ rv: this.#rv, kind, type: "ADDED", object: stored });
    return structuredClone(stored);
  }

  /**
   * Stores many new objects of one kind at once, as {@link create} would one by one (each gets
   * its own resourceVersion; watchers see an `ADDED` each), without copying them deeply: the
   * top level and `metadata` are copied, everything below is shared with the caller, who must
   * not change it afterwards. For loading a benchmark-sized cluster quickly. Throws before
   * storing anything if an object is unnamed or exists already (or twice in `objects`).
   */
  load(kind: ObjectKind, objects: readonly RawObject[]): void {
    const resource = this.#resourceByKind.get(kind)!;
    const stored = objects.map((object) => normalizeShallow(resource, object));
    const keys = stored.map((object) => keyOf(resource, object));
    const existing = this.#objects.get(kind)!;
    const seen = new Set<string>();
    for (const key of keys) {
      if (existing.has(key) || seen.has(key)) throw new Error(`${kind} ${key} already exists`);
      seen.add(key);
    }
    const creationTimestamp = new Date().toISOString();
    const entries: HistoryEntry[] = [];
    stored.forEach((object, i) => {
      const metadata = object.metadata as Record<string, unknown>;
      metadata.uid = crypto.randomUUID();
      metadata.creationTimestamp = creationTimestamp;
      metadata.resourceVersion = String(++this.#rv);
      existing.set(keys[i], object);
      entries.push({ rv: this.#rv, kind, type: "ADDED", object });
    });
    this.#sorted.delete(kind);
    for (const entry of entries) this.#history.push(entry);
    const excess = this.#history.length - this.#historyLimit;
    if (excess > 0) {
      this.#compactedRv = this.#history[excess - 1].rv;
      this.#history.splice(0, excess);
    }
    if (this.#watchers.size === 0) return;
    for (const entry of entries) {
      for (const watcher of this.#watchers) this.#deliver(watcher, entry);
    }
  }

  /**
   * Replaces an existing object (found by namespace and name) and notifies watchers with
   * `MODIFIED`; `uid` and `creationTimestamp` are kept. Returns the stored object. Throws if the
   * object does not exist.
   */
  update(kind: ObjectKind, object: RawObject): RawObject {
    const resource = this.#resourceByKind.get(kind)!;
    const stored = normalize(resource, object);
    const key = keyOf(resource, stored);
    const objects = this.#objects.get(kind)!;
    const previous = objects.get(key);
    if (previous === undefined) throw new Error(`${kind} ${key} does not exist`);
    const before = previous.metadata as Record<string, unknown>;
    const metadata = stored.metadata as Record<string, unknown>;
    metadata.uid = before.uid;
    metadata.creationTimestamp = before.creationTimestamp;
    metadata.resourceVersion = String(++this.#rv);
    objects.set(key, stored);
    this.#sorted.delete(kind);
    this.#record({ rv: this.#rv, kind, type: "MODIFIED", object: stored, previous });
    return structuredClone(stored);
  }

  /**
   * Removes an object (given as a reference or as the object itself) and notifies watchers with
   * `DELETED`, carrying the deletion's resourceVersion. Throws if the object does not exist.
   */
  delete(kind: ObjectKind, ref: ObjectRef | RawObject): void {
    const resource = this.#resourceByKind.get(kind)!;
    const metadata: Record<string, unknown> = "metadata" in ref && isRecord(ref.metadata)
      ? ref.metadata
      : { ...ref };
    const name = String(metadata.name);
    const namespace = typeof metadata.namespace === "string" ? metadata.namespace : "default";
    const key = resource.namespaced ? `${namespace}/${name}` : name;
    const objects = this.#objects.get(kind)!;
    const previous = objects.get(key);
    if (previous === undefined) throw new Error(`${kind} ${key} does not exist`);
    objects.delete(key);
    this.#sorted.delete(kind);
    const object = structuredClone(previous);
    (object.metadata as Record<string, unknown>).resourceVersion = String(++this.#rv);
    this.#record({ rv: this.#rv, kind, type: "DELETED", object, previous });
  }

  /** The stored objects of `kind`, sorted by namespace and name (copies). */
  list(kind: ObjectKind): RawObject[] {
    return this.#stored(kind).map((object) => structuredClone(object));
  }

  /** Turns the streaming watch-list on or off (see {@link TestApiServerOptions.watchList}). */
  setWatchList(enabled: boolean): void {
    this.#watchList = enabled;
  }

  /** What was served since the start or the last {@link resetTraffic} (a copy). */
  traffic(): Traffic {
    return structuredClone(this.#traffic);
  }

  /** Starts counting {@link traffic} from zero; open watches count into the new figures. */
  resetTraffic(): void {
    this.#traffic = emptyTraffic();
  }

  /**
   * Forgets all history and all pagination snapshots: a watch from any older resourceVersion,
   * or a LIST `continue` token issued before, now gets 410 Gone (`Expired`).
   */
  compact(): void {
    this.#compactedRv = this.#rv;
    this.#history = [];
    this.#snapshots.clear();
  }

  /** Ends every open watch stream abruptly (the client sees a broken body, not a clean end). */
  dropWatches(): void {
    for (const watcher of [...this.#watchers]) {
      const error = new Error("test API server: watch dropped on purpose by dropWatches()");
      error.stack = "";
      this.#closeWatcher(watcher, error);
    }
  }

  /**
   * Stalls the server: requests are accepted but nothing is sent (new requests get no response
   * headers, open watches get no events and no bookmarks) until the returned function (or
   * {@link release}) is called, or `ms` milliseconds have passed when given. Held watch events
   * are delivered on release to the streams still open.
   */
  stall(ms?: number): () => void {
    if (this.#stall === undefined) {
      let release!: () => void;
      const promise = new Promise<void>((resolve) => (release = resolve));
      this.#stall = { promise, release };
    }
    const stall = this.#stall;
    if (ms !== undefined) {
      clearTimeout(stall.timer);
      stall.timer = setTimeout(() => this.release(), ms);
    }
    return () => this.release();
  }

  /** Ends a {@link stall}: waiting requests proceed and held watch events are sent. */
  release(): void {
    const stall = this.#stall;
    if (stall === undefined) return;
    this.#stall = undefined;
    clearTimeout(stall.timer);
    stall.release();
    for (const watcher of this.#watchers) {
      if (watcher.initial !== undefined) {
        this.#pullInitial(watcher);
        continue;
      }
      const held = watcher.held;
      watcher.held = [];
      for (const line of held) this.#write(watcher, line);
    }
  }

  /** Answers the next `n` matching requests with a `Status` error (default 500). */
  failNext(n: number, options: FailOptions = {}): void {
    this.#failures.push({
      remaining: n,
      status: options.status ?? 500,
      kind: options.kind,
      watch: options.watch,
    });
  }

  /** Forgets the failures {@link failNext} still had to inject. */
  clearFailures(): void {
    this.#failures = [];
  }

  /** Delays every response by `ms` before its headers are sent; 0 turns it off. */
  slow(ms: number): void {
    this.#slowMs = ms;
  }

  /**
   * Serves or stops serving `kind` (an older cluster without ServiceCIDRs answers 404 for
   * them). Open watches of the kind are ended when it stops being served.
   */
  setResourceServed(kind: ObjectKind, served: boolean): void {
    if (served) {
      this.#unserved.delete(kind);
      return;
    }
    this.#unserved.add(kind);
    for (const watcher of [...this.#watchers]) {
      if (watcher.kind === kind) this.#closeWatcher(watcher);
    }
  }

  /** Sends a BOOKMARK at the current resourceVersion to every watch that allows them. */
  sendBookmarks(): void {
    if (this.#stall !== undefined) return;
    for (const watcher of this.#watchers) {
      if (!watcher.bookmarks) continue;
      const resource = this.#resourceByKind.get(watcher.kind)!;
      this.#send(watcher, {
        type: "BOOKMARK",
        object: {
          kind: resource.kind,
          apiVersion: resource.apiVersion,
          metadata: { resourceVersion: String(this.#rv) },
        },
      });
    }
  }

  /**
   * Stops listening and drops every connection at once, as a killed process would; the state
   * is kept for {@link restart}. Clients get connection errors until then.
   */
  async kill(): Promise<void> {
    const server = this.#server;
    if (server === undefined) return;
    this.#server = undefined;
    for (const watcher of [...this.#watchers]) this.#closeWatcher(watcher);
    this.#generation?.abort();
    // Deno's shutdown waits for every response to end; one a client never reads out must not
    // hold a test (or the suite) for ever.
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      server.finished,
      new Promise((resolve) => timer = setTimeout(resolve, 5000)),
    ]);
    clearTimeout(timer);
  }

  /** Listens again on the same port after {@link kill}. */
  async restart(): Promise<void> {
    if (this.#closed) throw new Error("the test API server is closed");
    if (this.#server !== undefined) return;
    await this.#listen();
  }

  /** Kills the server and stops its timers; it cannot be restarted afterwards. */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#bookmarkTimer);
    this.release();
    await this.kill();
  }

  /** Same as {@link close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #listen(): Promise<void> {
    const generation = new AbortController();
    // Right after a kill the port may still be in use for a moment; retry briefly.
    for (let attempt = 0;; attempt++) {
      try {
        this.#server = Deno.serve(
          {
            hostname: this.#hostname,
            port: this.#port,
            signal: generation.signal,
            onListen: () => {},
          },
          (request, info) => this.#handle(request, { killed: generation.signal, info }),
        );
        break;
      } catch (error) {
        if (!(error instanceof Deno.errors.AddrInUse) || attempt >= 50 || this.#port === 0) {
          throw error;
        }
        await delay(20, generation.signal);
      }
    }
    this.#generation = generation;
    this.#port = this.#server.addr.port;
  }

  async #handle(
    request: Request,
    context: { killed: AbortSignal; info: Deno.ServeHandlerInfo },
  ): Promise<Response> {
    const url = new URL(request.url);
    const params = Object.fromEntries(url.searchParams);
    const watch = params.watch === "1" || params.watch === "true";
    const route = parsePath(url.pathname, this.#resources);
    if (this.requests.length < MAX_RECORDED_REQUESTS) {
      this.requests.push({
        method: request.method,
        path: url.pathname,
        params,
        kind: route?.resource?.kind,
        watch,
        authorization: request.headers.get("authorization") ?? undefined,
      });
    }
    const verb = route?.resource === undefined || route.name !== undefined
      ? "other"
      : watch
      ? "watch"
      : "list";
    const shape = shapeOf(verb, route?.resource?.plural ?? url.pathname, params);
    this.#countRequest(verb, shape);
    const response = await this.#respond(request, url, params, route, watch, shape, context);
    // Streams count their bytes as they are written; bodies here.
    this.#countBytes(verb, shape, Number(response.headers.get("content-length") ?? 0));
    return response;
  }

  async #respond(
    request: Request,
    url: URL,
    params: Record<string, string>,
    route: Route | undefined,
    watch: boolean,
    shape: string,
    context: { killed: AbortSignal; info: Deno.ServeHandlerInfo },
  ): Promise<Response> {
    const { killed, info } = context;
    while (this.#stall !== undefined) {
      const stall = this.#stall.promise;
      await Promise.race([stall, abortPromise(killed)]);
      if (killed.aborted) return new Response(null, { status: 503 });
    }
    if (this.#slowMs > 0) {
      await delay(this.#slowMs, killed);
      if (killed.aborted) return new Response(null, { status: 503 });
    }
    const failure = this.#takeFailure(route?.resource?.kind, watch);
    if (failure !== undefined) {
      return statusResponse(failure, `injected failure (${failure})`);
    }
    const eventsPath = EVENTS_PATH.exec(url.pathname);
    if (request.method === "POST" && eventsPath !== null) {
      return await this.#createEvent(request, decodeURIComponent(eventsPath[1]), url.pathname);
    }
    if (request.method !== "GET") {
      return statusResponse(405, `the test API server is read-only, ${request.method} refused`);
    }
    if (route === undefined) {
      return statusResponse(404, `the server could not find ${url.pathname}`);
    }
    if (route.discovery !== undefined) return jsonResponse(this.#discovery(route.discovery));
    const resource = route.resource!;
    if (this.#unserved.has(resource.kind)) {
      return statusResponse(404, "the server could not find the requested resource");
    }
    let labels: Selector;
    let fields: Selector;
    try {
      labels = parseLabelSelector(params.labelSelector ?? "");
      fields = parseFieldSelector(params.fieldSelector ?? "");
    } catch (error) {
      if (error instanceof SelectorError) return statusResponse(400, error.message);
      throw error;
    }
    const query: Query = { resource, namespace: route.namespace, labels, fields };
    if (route.name !== undefined) return this.#get(resource, route.namespace, route.name);
    const invalid = invalidListOptions(params, watch, this.#watchList);
    if (invalid !== undefined) return invalidResponse(invalid);
    if (watch) return this.#watch(query, params, shape, info.completed);
    return this.#list(query, params);
  }

  /** Takes an Event as the real server does: 201 with the object, 400 if not JSON. */
  async #createEvent(request: Request, namespace: string, path: string): Promise<Response> {
    const text = await request.text();
    if (text.length > MAX_EVENT_BYTES) return statusResponse(413, "the Event is too large");
    let event: unknown;
    try {
      event = JSON.parse(text);
    } catch {
      return statusResponse(400, "the Event is not JSON");
    }
    if (!isRecord(event)) return statusResponse(400, "the Event is not an object");
    const apiVersion = path.startsWith("/api/v1/") ? "v1" : "events.k8s.io/v1";
    this.events.push({ namespace, apiVersion, event });
    return new Response(JSON.stringify(event), {
      status: 201,
      headers: { "content-type": "application/json" },
    });
  }

  #countRequest(verb: keyof Omit<Traffic, "shapes">, shape: string): void {
    this.#traffic[verb].requests++;
    (this.#traffic.shapes[shape] ??= { requests: 0, bytes: 0 }).requests++;
  }

  #countBytes(verb: keyof Omit<Traffic, "shapes">, shape: string, bytes: number): void {
    if (!(bytes > 0)) return;
    this.#traffic[verb].bytes += bytes;
    (this.#traffic.shapes[shape] ??= { requests: 0, bytes: 0 }).bytes += bytes;
  }

  #takeFailure(kind: ObjectKind | undefined, watch: boolean): number | undefined {
    for (const failure of this.#failures) {
      if (failure.kind !== undefined && failure.kind !== kind) continue;
      if (failure.watch !== undefined && failure.watch !== watch) continue;
      failure.remaining--;
      if (failure.remaining <= 0) this.#failures.splice(this.#failures.indexOf(failure), 1);
      return failure.status;
    }
    return undefined;
  }

  #get(resource: ResourceInfo, namespace: string | undefined, name: string): Response {
    const key = resource.namespaced ? `${namespace}/${name}` : name;
    const object = this.#objects.get(resource.kind)!.get(key);
    if (object === undefined) {
      return statusResponse(404, `${resource.plural} "${name}" not found`);
    }
    return textResponse(this.#json(object));
  }

  /** The stored objects of `kind` sorted by key, shared (never change them). */
  #stored(kind: ObjectKind): RawObject[] {
    let sorted = this.#sorted.get(kind);
    if (sorted === undefined) {
      sorted = [...this.#objects.get(kind)!.entries()]
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, object]) => object);
      this.#sorted.set(kind, sorted);
    }
    return sorted;
  }

  /** A stored object's JSON as a watch event carries it (with TypeMeta), written once. */
  #json(object: RawObject): string {
    let json = this.#objectJson.get(object);
    if (json === undefined) this.#objectJson.set(object, json = JSON.stringify(object));
    return json;
  }

  /** A stored object's JSON as a LIST item (without TypeMeta), written once. */
  #itemJsonOf(object: RawObject): string {
    let json = this.#itemJson.get(object);
    if (json === undefined) {
      this.#itemJson.set(object, json = JSON.stringify(stripTypeMeta(object)));
    }
    return json;
  }

  #list(query: Query, params: Record<string, string>): Response {
    const { resource } = query;
    const limit = Number(params.limit ?? 0);
    if (!Number.isInteger(limit) || limit < 0) {
      return statusResponse(400, `invalid limit "${params.limit}"`);
    }
    const rvParam = params.resourceVersion ?? "";
    const match = params.resourceVersionMatch ?? "";
    if (rvParam !== "" && !/^\d+$/.test(rvParam)) {
      return statusResponse(400, `invalid resourceVersion "${rvParam}"`);
    }
    if (rvParam !== "" && match !== "Exact") {
      // From the watch cache: whole, at the latest version (which is never older than asked).
      if (Number(rvParam) > this.#rv) {
        return statusResponse(504, `Too large resource version: ${rvParam}, current: ${this.#rv}`);
      }
      return this.#listResponse(resource, String(this.#rv), this.#matching(query), {});
    }
    if (params.continue && rvParam !== "") {
      return statusResponse(400, "specifying resource version is not allowed when using continue");
    }
    if (rvParam !== "" && Number(rvParam) !== this.#rv) {
      // An exact read of a past version: this server keeps none.
      return statusResponse(410, "The resourceVersion for the provided list is too old.");
    }
    let snapshot: Snapshot;
    let start = 0;
    let id: string;
    if (params.continue) {
      const token = decodeContinue(params.continue);
      if (token === undefined) return statusResponse(400, "invalid continue token");
      const found = this.#snapshots.get(token.id);
      if (found === undefined) {
        return statusResponse(
          410,
          "The provided continue parameter is too old to display a consistent list result. " +
            "You can start a new list without the continue parameter.",
        );
      }
      snapshot = found;
      start = token.start;
      id = token.id;
    } else {
      snapshot = { rv: this.#rv, items: this.#matching(query) };
      id = crypto.randomUUID();
    }
    const end = limit > 0 ? Math.min(start + limit, snapshot.items.length) : snapshot.items.length;
    const metadata: Record<string, unknown> = {};
    if (end < snapshot.items.length) {
      this.#snapshots.set(id, snapshot);
      while (this.#snapshots.size > MAX_SNAPSHOTS) {
        this.#snapshots.delete(this.#snapshots.keys().next().value!);
      }
      metadata.continue = btoa(JSON.stringify({ id, start: end, rv: snapshot.rv }));
      metadata.remainingItemCount = snapshot.items.length - end;
    }
    const items = start === 0 && end === snapshot.items.length
      ? snapshot.items
      : snapshot.items.slice(start, end);
    return this.#listResponse(resource, String(snapshot.rv), items, metadata);
  }

  /** The stored objects `query` selects, sorted by key (shared). */
  #matching(query: Query): RawObject[] {
    const all = this.#stored(query.resource.kind);
    return all.filter((object) => matchesQuery(query, object));
  }

  #listResponse(
    resource: ResourceInfo,
    resourceVersion: string,
    items: readonly RawObject[],
    extra: Record<string, unknown>,
  ): Response {
    const head = JSON.stringify({
      kind: `${resource.kind}List`,
      apiVersion: resource.apiVersion,
      metadata: { resourceVersion, ...extra },
    });
    const body = `${head.slice(0, -1)},"items":[${
      items.map((object) => this.#itemJsonOf(object)).join(",")
    }]}`;
    return textResponse(body);
  }

  #watch(
    query: Query,
    params: Record<string, string>,
    shape: string,
    completed: Promise<void>,
  ): Response {
    const { resource } = query;
    const rvParam = params.resourceVersion ?? "";
    const from = rvParam === "" || rvParam === "0" ? undefined : Number(rvParam);
    if (from !== undefined && (!Number.isInteger(from) || from < 0)) {
      return statusResponse(400, `invalid resourceVersion "${rvParam}"`);
    }
    const timeoutS = params.timeoutSeconds
      ? Number(params.timeoutSeconds)
      : DEFAULT_WATCH_TIMEOUT_S;
    const initialEvents = params.sendInitialEvents;
    let watcher!: Watcher;
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        watcher = {
          kind: resource.kind,
          namespace: query.namespace,
          labels: query.labels,
          fields: query.fields,
          bookmarks: params.allowWatchBookmarks === "true" || params.allowWatchBookmarks === "1",
          controller,
          held: [],
          closed: false,
          shape,
        };
      },
      pull: () => this.#pullInitial(watcher),
      cancel: () => this.#closeWatcher(watcher),
    });
    if (initialEvents === "true") {
      // Watch-list: the state as ADDED events, then the bookmark that says they are complete.
      this.#watchers.add(watcher);
      watcher.initial = this.#initialEvents(this.#matching(query), {
        kind: resource.kind,
        apiVersion: resource.apiVersion,
        metadata: {
          resourceVersion: String(this.#rv),
          annotations: { [INITIAL_EVENTS_END_ANNOTATION]: "true" },
        },
      });
      // The stream pulls each chunk (the first as soon as it is set up): see #pullInitial.
    } else if (from !== undefined && from < this.#compactedRv) {
      this.#write(
        watcher,
        JSON.stringify({
          type: "ERROR",
          object: status(
            410,
            `too old resource version: ${from} (${this.#compactedRv})`,
          ),
        }) + "\n",
      );
      watcher.controller.close();
      watcher.closed = true;
      return streamResponse(body);
    } else {
      this.#watchers.add(watcher);
      if (from === undefined && initialEvents === undefined) {
        for (const object of this.#matching(query)) {
          this.#send(watcher, { type: "ADDED", object });
        }
      } else if (from !== undefined) {
        for (const entry of this.#history) {
          if (entry.rv > from) this.#deliver(watcher, entry);
        }
      }
    }
    if (Number.isFinite(timeoutS) && timeoutS > 0) {
      watcher.timer = setTimeout(() => this.#closeWatcher(watcher), timeoutS * 1000);
    }
    // Settles when the stream ended or the client went away.
    completed.catch(() => {}).finally(() => this.#closeWatcher(watcher));
    return streamResponse(body);
  }
  #discovery(path: string): unknown {
    const served = this.#resources.filter((r) => !this.#unserved.has(r.kind));
    if (path === "/api") {
      return { kind: "APIVersions", versions: ["v1"], serverAddressByClientCIDRs: [] };
    }
    if (path === "/apis") {
      const groupVersions = new Set(
        served.map((r) => r.apiVersion).filter((v) => v.includes("/")),
      );
      const groups = [...groupVersions].map((groupVersion) => {
        const [name, version] = groupVersion.split("/");
        const preferred = { groupVersion, version };
        return { name, versions: [preferred], preferredVersion: preferred };
      });
      return { kind: "APIGroupList", apiVersion: "v1", groups };
    }
    const groupVersion = path === "/api/v1" ? "v1" : path.slice("/apis/".length);
    return {
      kind: "APIResourceList",
      apiVersion: "v1",
      groupVersion,
      resources: served
        .filter((r) => r.apiVersion === groupVersion)
        .map((r) => ({
          name: r.plural,
          singularName: r.kind.toLowerCase(),
          namespaced: r.namespaced,
          kind: r.kind,
          verbs: ["get", "list", "watch"],
        })),
    };
  }

  #record(entry: HistoryEntry): void {
    this.#history.push(entry);
    while (this.#history.length > this.#historyLimit) {
      this.#compactedRv = this.#history.shift()!.rv;
    }
    for (const watcher of this.#watchers) this.#deliver(watcher, entry);
  }

  /** Sends `entry` to `watcher` as the real server would, given the watcher's selectors. */
  #deliver(watcher: Watcher, entry: HistoryEntry): void {
    if (entry.kind !== watcher.kind) return;
    const matchesNow = this.#watcherMatches(watcher, entry.object);
    if (entry.type === "MODIFIED") {
      const matchedBefore = entry.previous !== undefined &&
        this.#watcherMatches(watcher, entry.previous);
      if (matchedBefore && matchesNow) {
        this.#send(watcher, { type: "MODIFIED", object: entry.object });
      } else if (matchesNow) this.#send(watcher, { type: "ADDED", object: entry.object });
      else if (matchedBefore) this.#send(watcher, { type: "DELETED", object: entry.object });
      return;
    }
    if (matchesNow) this.#send(watcher, { type: entry.type, object: entry.object });
  }

  #watcherMatches(watcher: Watcher, object: RawObject): boolean {
    const namespace = (object.metadata as Record<string, unknown>).namespace;
    if (watcher.namespace !== undefined && namespace !== watcher.namespace) return false;
    return watcher.labels(object) && watcher.fields(object);
  }

  /** A watch-list's initial events as chunks of lines: ADDED per object, then `bookmark`. */
  *#initialEvents(objects: RawObject[], bookmark: RawObject): Generator<string> {
    for (let i = 0; i < objects.length; i += INITIAL_EVENTS_PER_CHUNK) {
      yield objects.slice(i, i + INITIAL_EVENTS_PER_CHUNK)
        .map((object) => `{"type":"ADDED","object":${this.#json(object)}}\n`).join("");
    }
    yield `{"type":"BOOKMARK","object":${JSON.stringify(bookmark)}}\n`;
  }

  /**
   * Writes the next chunk of a watch-list's initial events when its stream wants more; after
   * the last, the changes held meanwhile (unless the server is stalled: then on release).
   */
  #pullInitial(watcher: Watcher): void {
    const initial = watcher.initial;
    if (initial === undefined || watcher.closed) return;
    if (this.#stall !== undefined) return;
    const next = initial.next();
    if (!next.done) {
      this.#write(watcher, next.value);
      return;
    }
    watcher.initial = undefined;
    const held = watcher.held;
    watcher.held = [];
    for (const line of held) this.#write(watcher, line);
  }

  #send(watcher: Watcher, event: { type: string; object: RawObject }): void {
    this.#emit(
      watcher,
      `{"type":${JSON.stringify(event.type)},"object":${this.#json(event.object)}}\n`,
    );
  }

  /** Sends event lines, or holds them back while the server is stalled. */
  #emit(watcher: Watcher, lines: string): void {
    if (this.#stall !== undefined || watcher.initial !== undefined) {
      watcher.held.push(lines);
      return;
    }
    this.#write(watcher, lines);
  }

  #write(watcher: Watcher, lines: string): void {
    if (watcher.closed) return;
    try {
      const bytes = encoder.encode(lines);
      watcher.controller.enqueue(bytes);
      this.#countBytes("watch", watcher.shape, bytes.length);
    } catch {
      this.#closeWatcher(watcher);
    }
  }

  #closeWatcher(watcher: Watcher, error?: Error): void {
    this.#watchers.delete(watcher);
    clearTimeout(watcher.timer);
    if (watcher.closed) return;
    watcher.closed = true;
    try {
      if (error === undefined) watcher.controller.close();
      else watcher.controller.error(error);
    } catch {
      // The stream is already closed or cancelled by the client.
    }
  }
}

interface Query {
  resource: ResourceInfo;
  namespace?: string;
  labels: Selector;
  fields: Selector;
}

interface Route {
  /** Set for discovery documents: `/api`, `/apis`, `/api/v1`, `/apis/GROUP/VERSION`. */
  discovery?: string;
  resource?: ResourceInfo;
  namespace?: string;
  name?: string;
}

/** Maps a URL path to a discovery document or a (namespaced) resource collection or object. */
function parsePath(path: string, resources: readonly ResourceInfo[]): Route | undefined {
  const trimmed = path.replace(/\/+$/, "") || "/";
  if (trimmed === "/api" || trimmed === "/apis" || trimmed === "/api/v1") {
    return { discovery: trimmed };
  }
  for (const resource of resources) {
    if (resource.prefix !== "/api/v1" && trimmed === resource.prefix) {
      return { discovery: trimmed };
    }
    if (!trimmed.startsWith(resource.prefix + "/")) continue;
    const rest = trimmed.slice(resource.prefix.length + 1).split("/");
    let namespace: string | undefined;
    if (rest[0] === "namespaces" && rest.length >= 3 && resource.namespaced) {
      namespace = decodeURIComponent(rest[1]);
      rest.splice(0, 2);
    }
    if (rest[0] !== resource.plural || rest.length > 2) continue;
    const name = rest[1] === undefined ? undefined : decodeURIComponent(rest[1]);
    if (name !== undefined && resource.namespaced && namespace === undefined) continue;
    return { resource, namespace, name };
  }
  return undefined;
}

function matchesQuery(query: Query, object: RawObject): boolean {
  const namespace = (object.metadata as Record<string, unknown>).namespace;
  if (query.namespace !== undefined && namespace !== query.namespace) return false;
  return query.labels(object) && query.fields(object);
}

/** A deep copy with `kind`, `apiVersion` and (namespaced kinds) a namespace filled in. */
function normalize(resource: ResourceInfo, object: RawObject): RawObject {
  const copy = structuredClone(object);
  if (!isRecord(copy.metadata) || typeof copy.metadata.name !== "string" || !copy.metadata.name) {
    throw new Error(`a ${resource.kind} needs metadata.name`);
  }
  if (resource.namespaced) {
    if (typeof copy.metadata.namespace !== "string" || copy.metadata.namespace === "") {
      copy.metadata.namespace = "default";
    }
  } else {
    delete copy.metadata.namespace;
  }
  return { kind: resource.kind, apiVersion: resource.apiVersion, ...copy };
}

/**
 * Like {@link normalize} without the deep copy: the top level and `metadata` are new objects,
 * everything below is the caller's.
 */
function normalizeShallow(resource: ResourceInfo, object: RawObject): RawObject {
  const source = object.metadata;
  if (!isRecord(source) || typeof source.name !== "string" || !source.name) {
    throw new Error(`a ${resource.kind} needs metadata.name`);
  }
  const metadata: Record<string, unknown> = { ...source };
  if (resource.namespaced) {
    if (typeof metadata.namespace !== "string" || metadata.namespace === "") {
      metadata.namespace = "default";
    }
  } else {
    delete metadata.namespace;
  }
  return { kind: resource.kind, apiVersion: resource.apiVersion, ...object, metadata };
}

function keyOf(resource: ResourceInfo, object: RawObject): string {
  const metadata = object.metadata as Record<string, string>;
  return resource.namespaced ? `${metadata.namespace}/${metadata.name}` : metadata.name;
}

/** LIST items carry no `kind`/`apiVersion`, as in the real API. */
function stripTypeMeta(object: RawObject): RawObject {
  const { kind: _kind, apiVersion: _apiVersion, ...rest } = object;
  return rest;
}

function decodeContinue(token: string): { id: string; start: number } | undefined {
  try {
    const parsed: unknown = JSON.parse(atob(token));
    if (!isRecord(parsed) || typeof parsed.id !== "string") return undefined;
    if (typeof parsed.start !== "number" || !Number.isInteger(parsed.start)) return undefined;
    return { id: parsed.id, start: parsed.start };
  } catch {
    return undefined;
  }
}

const REASONS: Record<number, string> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  409: "Conflict",
  410: "Expired",
  422: "Invalid",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

/** A `meta/v1 Status` failure object. */
function status(code: number, message: string): RawObject {
  return {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason: REASONS[code] ?? "Unknown",
    code,
  };
}

function statusResponse(code: number, message: string): Response {
  return jsonResponse(status(code, message), code);
}

function jsonResponse(body: unknown, code = 200): Response {
  return textResponse(JSON.stringify(body), code);
}

/** A JSON body already written; its length is set, so the traffic counters can read it. */
function textResponse(json: string, code = 200): Response {
  const bytes = encoder.encode(json);
  return new Response(bytes, {
    status: code,
    headers: { "content-type": "application/json", "content-length": String(bytes.length) },
  });
}

/** One refused list or watch option: the field and why, as the real server words it. */
interface InvalidOption {
  field: string;
  reason: "FieldValueForbidden" | "FieldValueNotSupported";
  message: string;
}

/**
 * What the real server's list-options validation refuses (422 Invalid): a
 * `resourceVersionMatch` without a `resourceVersion` on a LIST, or on a WATCH without
 * `sendInitialEvents`; `sendInitialEvents` on a LIST, without `resourceVersionMatch=NotOlderThan`
 * or (when true) without bookmarks, or at all when the server has no watch-list.
 */
function invalidListOptions(
  params: Record<string, string>,
  watch: boolean,
  watchList: boolean,
): InvalidOption | undefined {
  const match = params.resourceVersionMatch;
  const initial = params.sendInitialEvents;
  const forbidden = (field: string, message: string): InvalidOption => ({
    field,
    reason: "FieldValueForbidden",
    message,
  });
  if (match !== undefined && !["", "NotOlderThan", "Exact"].includes(match)) {
    return {
      field: "resourceVersionMatch",
      reason: "FieldValueNotSupported",
      message: `Unsupported value: "${match}": supported values: "Exact", "NotOlderThan", ""`,
    };
  }
  if (initial !== undefined) {
    if (!watch) return forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list");
    if (!watchList) {
      return forbidden(
        "sendInitialEvents",
        "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
      );
    }
    if (match !== "NotOlderThan") {
      return forbidden(
        "resourceVersionMatch",
        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
      );
    }
    const bookmarks = params.allowWatchBookmarks === "true" || params.allowWatchBookmarks === "1";
    if (initial === "true" && !bookmarks) {
      return forbidden(
        "allowWatchBookmarks",
        "sendInitialEvents requires setting allowWatchBookmarks to true",
      );
    }
    return undefined;
  }
  if (match === undefined || match === "") return undefined;
  if (watch) {
    return forbidden(
      "resourceVersionMatch",
      "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
    );
  }
  if ((params.resourceVersion ?? "") === "") {
    return forbidden(
      "resourceVersionMatch",
      "resourceVersionMatch is forbidden unless resourceVersion is provided",
    );
  }
  if (match === "Exact" && params.resourceVersion === "0") {
    return forbidden(
      "resourceVersionMatch",
      `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`,
    );
  }
  return undefined;
}

/** The 422 `Invalid` Status the real server answers refused list options with. */
function invalidResponse(invalid: InvalidOption): Response {
  const body = {
    ...status(
      422,
      `ListOptions.meta.k8s.io "" is invalid: ${invalid.field}: ` +
        `${invalid.reason === "FieldValueForbidden" ? "Forbidden" : "Unsupported value"}: ` +
        invalid.message,
    ),
    details: {
      kind: "ListOptions",
      group: "meta.k8s.io",
      causes: [{ reason: invalid.reason, message: invalid.message, field: invalid.field }],
    },
  };
  return jsonResponse(body, 422);
}

function emptyTraffic(): Traffic {
  return {
    list: { requests: 0, bytes: 0 },
    watch: { requests: 0, bytes: 0 },
    other: { requests: 0, bytes: 0 },
    shapes: {},
  };
}

/**
 * A request's query shape: the verb, the resource (or path), then the query parameters sorted,
 * with their values where they decide how the request is served.
 */
function shapeOf(verb: string, resource: string, params: Record<string, string>): string {
  const parts = Object.keys(params)
    .filter((name) => name !== "watch")
    .sort()
    .map((name) => SHAPE_VALUES.has(name) ? `${name}=${params[name]}` : name);
  return [verb, resource, ...parts].join(" ");
}

function streamResponse(body: ReadableStream<Uint8Array>): Response {
  return new Response(body, {
    status: 200,
    headers: { "content-type": "application/json", "cache-control": "no-cache, private" },
  });
}

function abortPromise(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) =>
    signal.addEventListener("abort", () => resolve(), { once: true })
  );
}

/** Waits `ms`, or less when `signal` aborts first (the timer is cleared then). */
function delay(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
