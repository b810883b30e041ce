/**
 * An in-process Kubernetes API server for tests: Services, EndpointSlices, Nodes and
 * ServiceCIDRs served over the real list/watch HTTP protocol on 127.0.0.1, with fault injection.
 *
 * What it speaks, as the real server does: one global, monotonically increasing
 * resourceVersion; LIST with `limit`/`continue` pagination over a consistent snapshot,
 * `labelSelector` and `fieldSelector`; WATCH (`?watch=1`) as chunked newline-delimited JSON
 * events from a bounded history, starting after `resourceVersion` (or with synthetic `ADDED`
 * events for the current state when it is empty or `0`), `ERROR` with a 410 `Expired` Status
 * when the version has been compacted away, periodic `BOOKMARK`s when
 * `allowWatchBookmarks=true`, ending after `timeoutSeconds`. Objects enter and leave selectors
 * the real way: a modification that makes an object match is an `ADDED`, one that makes it stop
 * matching a `DELETED`. Writes happen only through the programmatic API
 * ({@link TestApiServer.create}, {@link TestApiServer.update}, {@link TestApiServer.delete});
 * HTTP is read-only.
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

const RESOURCE_BY_KIND = new Map(RESOURCES.map((r) => [r.kind, r]));

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

/** Options of {@link TestApiServer.start}. */
export interface TestApiServerOptions {
  /** Port to listen on; default 0 (a random free port). */
  port?: number;
  /** Write events kept for watches to resume from. Default 1000. */
  historyLimit?: number;
  /** Period of BOOKMARK events on watches that allow them, ms; 0 disables. Default 1000. */
  bookmarkIntervalMs?: number;
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
  /** Lines held back while the server is stalled. */
  held: string[];
  timer?: ReturnType<typeof setTimeout>;
  closed: boolean;
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
  #port: number;

  #rv = 0;
  /** Watches may resume from any version at or above this one. */
  #compactedRv = 0;
  #history: HistoryEntry[] = [];
  #objects = new Map<ObjectKind, Map<string, RawObject>>();
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

  private constructor(options: TestApiServerOptions) {
    this.#historyLimit = options.historyLimit ?? DEFAULT_HISTORY_LIMIT;
    this.#bookmarkIntervalMs = options.bookmarkIntervalMs ?? DEFAULT_BOOKMARK_INTERVAL_MS;
    this.#port = options.port ?? 0;
    for (const r of RESOURCES) this.#objects.set(r.kind, new Map());
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

  /** Base URL, `http://127.0.0.1:PORT`. */
  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
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
    const resource = RESOURCE_BY_KIND.get(kind)!;
    const stored = normalize(resource, object);
    const key = keyOf(resource, stored);
    const objects = this.#objects.get(kind)!;
    if (objects.has(key)) throw new Error(`${kind} ${key} already exists`);
    const metadata = stored.metadata as Record<string, unknown>;
    metadata.uid = crypto.randomUUID();
    metadata.creationTimestamp = new Date().toISOString();
    metadata.resourceVersion = String(++this.#rv);
    objects.set(key, stored);
    this.#record({ rv: this.#rv, kind, type: "ADDED", object: stored });
    return structuredClone(stored);
  }

  /**
   * Replaces an existing object (found by namespace and name) and notifies watchers with
   * `MODIFIED`; `uid` and `creationTimestamp` are kept. Returns the stored object. Throws if the
   * object does not exist.
   */
  update(kind: ObjectKind, object: RawObject): RawObject {
    const resource = RESOURCE_BY_KIND.get(kind)!;
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
    this.#record({ rv: this.#rv, kind, type: "MODIFIED", object: stored, previous });
    return structuredClone(stored);
  }

  /**
   * Removes an object (given as a reference or as the object itself) and notifies watchers with
   * `DELETED`, carrying the deletion's resourceVersion. Throws if the object does not exist.
   */
  delete(kind: ObjectKind, ref: ObjectRef | RawObject): void {
    const resource = RESOURCE_BY_KIND.get(kind)!;
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
    const object = structuredClone(previous);
    (object.metadata as Record<string, unknown>).resourceVersion = String(++this.#rv);
    this.#record({ rv: this.#rv, kind, type: "DELETED", object, previous });
  }

  /** The stored objects of `kind`, sorted by namespace and name (copies). */
  list(kind: ObjectKind): RawObject[] {
    return [...this.#objects.get(kind)!.entries()]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, object]) => structuredClone(object));
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
      const resource = RESOURCE_BY_KIND.get(watcher.kind)!;
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
    await server.finished;
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
            hostname: "127.0.0.1",
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
    const { killed, info } = context;
    const url = new URL(request.url);
    const params = Object.fromEntries(url.searchParams);
    const watch = params.watch === "1" || params.watch === "true";
    const route = parsePath(url.pathname);
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
    if (watch) return this.#watch(query, params, info.completed);
    return this.#list(query, params);
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
    return jsonResponse(object);
  }

  #list(query: Query, params: Record<string, string>): Response {
    const { resource } = query;
    const limit = Number(params.limit ?? 0);
    if (!Number.isInteger(limit) || limit < 0) {
      return statusResponse(400, `invalid limit "${params.limit}"`);
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
      const items = this.list(resource.kind)
        .filter((object) => matchesQuery(query, object))
        .map(stripTypeMeta);
      snapshot = { rv: this.#rv, items };
      id = crypto.randomUUID();
    }
    const end = limit > 0 ? Math.min(start + limit, snapshot.items.length) : snapshot.items.length;
    const metadata: Record<string, unknown> = { resourceVersion: String(snapshot.rv) };
    if (end < snapshot.items.length) {
      this.#snapshots.set(id, snapshot);
      while (this.#snapshots.size > MAX_SNAPSHOTS) {
        this.#snapshots.delete(this.#snapshots.keys().next().value!);
      }
      metadata.continue = btoa(JSON.stringify({ id, start: end, rv: snapshot.rv }));
      metadata.remainingItemCount = snapshot.items.length - end;
    }
    return jsonResponse({
      kind: `${resource.kind}List`,
      apiVersion: resource.apiVersion,
      metadata,
      items: snapshot.items.slice(start, end),
    });
  }

  #watch(query: Query, params: Record<string, string>, completed: Promise<void>): Response {
    const { resource } = query;
    const rvParam = params.resourceVersion ?? "";
    const from = rvParam === "" || rvParam === "0" ? undefined : Number(rvParam);
    if (from !== undefined && (!Number.isInteger(from) || from < 0)) {
      return statusResponse(400, `invalid resourceVersion "${rvParam}"`);
    }
    const timeoutS = params.timeoutSeconds
      ? Number(params.timeoutSeconds)
      : DEFAULT_WATCH_TIMEOUT_S;
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
        };
      },
      cancel: () => this.#closeWatcher(watcher),
    });
    if (from !== undefined && from < this.#compactedRv) {
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
    }
    this.#watchers.add(watcher);
    if (from === undefined) {
      for (const object of this.list(resource.kind)) {
        if (matchesQuery(query, object)) this.#send(watcher, { type: "ADDED", object });
      }
    } else {
      for (const entry of this.#history) {
        if (entry.rv > from) this.#deliver(watcher, entry);
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
    const served = RESOURCES.filter((r) => !this.#unserved.has(r.kind));
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

  #send(watcher: Watcher, event: { type: string; object: unknown }): void {
    const line = JSON.stringify(event) + "\n";
    if (this.#stall !== undefined) {
      watcher.held.push(line);
      return;
    }
    this.#write(watcher, line);
  }

  #write(watcher: Watcher, line: string): void {
    if (watcher.closed) return;
    try {
      watcher.controller.enqueue(encoder.encode(line));
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
function parsePath(path: string): Route | undefined {
  const trimmed = path.replace(/\/+$/, "") || "/";
  if (trimmed === "/api" || trimmed === "/apis" || trimmed === "/api/v1") {
    return { discovery: trimmed };
  }
  for (const resource of RESOURCES) {
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
  return new Response(JSON.stringify(body), {
    status: code,
    headers: { "content-type": "application/json" },
  });
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
