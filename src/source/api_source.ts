/**
 * The Kubernetes API source: Services, EndpointSlices, this node's Node and ServiceCIDRs, listed
 * and watched from the API server and emitted as source events.
 *
 * It selects objects exactly as upstream kube-proxy does: Services and EndpointSlices (and
 * ServiceCIDRs, which share upstream's informer factory) without the
 * `service.kubernetes.io/service-proxy-name` and `service.kubernetes.io/headless` labels, and
 * only the Node named by the hostname. ServiceCIDRs are read at `networking.k8s.io/v1`, or at
 * `v1beta1` where only that is served (1.31 and 1.32 clusters). Each kind is kept by its own
 * {@link Reflector}; the
 * configuration and credentials come from {@link connectApi}.
 *
 * @module
 */

import type { ObjectKind, RawObject, Source, SourceHandler } from "./events.ts";
import { type ApiConnection, connectApi } from "./api_connection.ts";
import { ApiEventRecorder, type EventRecorder, NO_EVENTS, proxyEvents } from "./event_recorder.ts";
import { Reflector } from "./reflector.ts";
import type { ReflectorOptions } from "./reflector_options.ts";

export { ApiConfigError } from "./api_connection.ts";

/**
 * The API server did not send the initial state within {@link ApiSourceOptions.syncTimeoutMs}:
 * unreachable, refusing us, or answering with errors. The message names the server and the last
 * problem seen.
 */
export class ApiUnreachableError extends Error {
  /** Always `"ApiUnreachableError"`. */
  override name = "ApiUnreachableError";
}

/** Upstream's selector: objects meant for another service proxy, and headless ones, are not ours. */
export const PROXY_LABEL_SELECTOR =
  "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name";

/** Options of {@link ApiSource}. */
export interface ApiSourceOptions {
  /** Path of a kubeconfig file; empty or absent means `master` or in-cluster. */
  kubeconfig?: string;
  /** API server URL; overrides the kubeconfig's server. Empty or absent: the kubeconfig's. */
  master?: string;
  /** This node's name: only the Node of this name is watched. Required. */
  hostname: string;
  /** Where log lines go. Default `console.error`. */
  log?: (line: string) => void;
  /** A LIST or WATCH on which nothing (not even a bookmark) arrives this long is restarted. Default 90 000 ms. */
  idleTimeoutMs?: number;
  /** Retry delays after errors: from `initialMs` (default 500) doubling to `maxMs` (default 30 000), jittered. */
  backoff?: { initialMs?: number; maxMs?: number };
  /** Shortest server-side watch length, s; each watch asks for 1-2 times this. Default 300. */
  watchTimeoutSeconds?: number;
  /** How often ServiceCIDRs are asked for again when the server has none (older cluster), ms. Default 300 000. */
  absentRetryMs?: number;
  /** LIST page size. Default 500. */
  pageSize?: number;
  /** The largest watch event read, bytes. Default the reflector's (16 MiB). */
  maxEventBytes?: number;
  /** The largest LIST answer read, bytes. Default the reflector's (256 MiB). */
  maxListBytes?: number;
  /**
   * When set, `start()` resolves only once the initial state is listed, and rejects with
   * {@link ApiUnreachableError} when it is not within this many ms (for one-shot runs, which
   * must not wait for ever). Default: `start()` returns at once and the source retries for ever.
   */
  syncTimeoutMs?: number;
  /**
   * Record upstream's Events through this connection ({@link ApiSource.events}): `Starting` on
   * the Node once started, and whatever the daemon records. For the daemon only: one-shot
   * runs, dry runs and `explain` leave it off. Default false.
   */
  recordEvents?: boolean;
  /** Sends requests (tests substitute it). Default the global `fetch`. */
  fetch?: typeof fetch;
  /** Prefix of the in-cluster service-account paths, for tests. Default `""`. */
  inClusterPathPrefix?: string;
}

/** What each kind is read from: the reflector's own options for it. */
type KindSpec = Pick<
  ReflectorOptions,
  "kind" | "apiVersion" | "path" | "labelSelector" | "fieldSelector" | "optional" | "fallback"
>;

/**
 * A {@link Source} backed by the Kubernetes API.
 *
 * `start()` loads the configuration (throwing {@link ApiConfigError} when it cannot) and starts
 * one list/watch loop per kind, then returns without waiting for the server. Every change is
 * emitted as it arrives; `onSynced()` is called once, when Services, EndpointSlices and the Node
 * have each been listed once and ServiceCIDRs have been asked for once (a cluster that serves
 * none, or an error, counts as an answer: ServiceCIDRs then arrive later, when they can be
 * listed).
 * Errors never end the loops: they are logged and retried with backoff until `stop()`. With
 * `syncTimeoutMs`, `start()` waits for that first listing instead, and gives up after that long.
 *
 * @example
 * ```ts
 * const source = new ApiSource({ kubeconfig: "/var/lib/kube-proxy/kubeconfig.conf", hostname: "node-a" });
 * await source.start({ onEvent: (e) => console.log(e.kind), onSynced: () => console.log("synced") });
 * // ... later
 * await source.stop();
 * ```
 */
export class ApiSource implements Source {
  readonly #options: ApiSourceOptions;
  readonly #log: (line: string) => void;
  readonly #abort = new AbortController();
  #connection?: ApiConnection;
  readonly #events: ApiEventRecorder | undefined;
  #reflectors = new Map<ObjectKind, Reflector>();
  #runs: Promise<void>[] = [];
  #started = false;

  /** Checks the options; nothing is loaded or sent until `start()`. */
  constructor(options: ApiSourceOptions) {
    if (options.hostname === "") {
      throw new RangeError("ApiSource needs the node's hostname to select its Node object");
    }
    this.#options = options;
    this.#log = options.log ?? ((line) => console.error(line));
    this.#events = options.recordEvents
      ? new ApiEventRecorder({
        send: (method, path, sendOptions) =>
          this.#connection?.send(method, path, sendOptions) ??
            Promise.reject(new Error("not connected to the API server")),
        hostname: options.hostname,
        log: this.#log,
      })
      : undefined;
  }

  /**
   * Where the daemon records Events (see `event_recorder.ts`): through this source's
   * connection with `recordEvents`, else nowhere ({@link NO_EVENTS}).
   */
  get events(): EventRecorder {
    return this.#events ?? NO_EVENTS;
  }

  /** The objects of `kind` as the source last saw them, by object key (empty before start). */
  store(kind: ObjectKind): ReadonlyMap<string, RawObject> {
    return this.#reflectors.get(kind)?.store ?? new Map();
  }

  /**
   * The resourceVersion the watch of `kind` resumes from (advanced by events and bookmarks),
   * or undefined before its first list. For tests that must know what the source has seen.
   */
  resourceVersion(kind: ObjectKind): string | undefined {
    return this.#reflectors.get(kind)?.resourceVersion;
  }

  /** Loads the API configuration and starts listing and watching; see the class doc. */
  async start(handler: SourceHandler): Promise<void> {
    if (this.#started) throw new Error("ApiSource was already started");
    this.#started = true;
    const o = this.#options;
    const connection = await connectApi({
      kubeconfig: o.kubeconfig,
      master: o.master,
      log: this.#log,
      fetch: o.fetch,
      inClusterPathPrefix: o.inClusterPathPrefix,
    });
    this.#connection = connection;
    if (this.#abort.signal.aborted) {
      connection.close();
      return;
    }
    this.#log(`watching the API server at ${connection.server} for node ${o.hostname}`);
    const specs = kindSpecs(o.hostname);
    const unlisted = new Set(specs.map((s) => s.kind));
    let synced!: () => void;
    const listed = new Promise<void>((resolve) => synced = resolve);
    let lastProblem = "";
    for (const spec of specs) {
      const reflector = new Reflector({
        ...spec,
        get: (path, signal) => connection.get(path, signal),
        onEvent: (event) => handler.onEvent(event),
        onListed: () => {
          if (!unlisted.delete(spec.kind) || unlisted.size > 0) return;
          handler.onSynced();
          synced();
        },
        onRetry: (problem) => lastProblem = problem,
        log: this.#log,
        idleTimeoutMs: o.idleTimeoutMs ?? 90_000,
        backoff: { initialMs: o.backoff?.initialMs ?? 500, maxMs: o.backoff?.maxMs ?? 30_000 },
        watchTimeoutSeconds: o.watchTimeoutSeconds ?? 300,
        absentRetryMs: o.absentRetryMs ?? 300_000,
        pageSize: o.pageSize ?? 500,
        maxEventBytes: o.maxEventBytes,
        maxListBytes: o.maxListBytes,
        signal: this.#abort.signal,
      });
      this.#reflectors.set(spec.kind, reflector);
      this.#runs.push(reflector.run());
    }
    proxyEvents(this.events, o.hostname).starting();
    if (o.syncTimeoutMs === undefined) return;
    const timeoutMs = o.syncTimeoutMs;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<"expired">((resolve) => {
      timer = setTimeout(() => resolve("expired"), timeoutMs);
    });
    const stopped = new Promise<"stopped">((resolve) => {
      this.#abort.signal.addEventListener("abort", () => resolve("stopped"), { once: true });
    });
    const outcome = await Promise.race([listed.then(() => "listed" as const), expired, stopped]);
    clearTimeout(timer);
    if (outcome !== "expired") return;
    await this.stop();
    throw new ApiUnreachableError(
      `the API server at ${connection.server} did not send the initial state within ` +
        `${timeoutMs / 1000} s${lastProblem === "" ? "" : `: ${lastProblem}`}`,
    );
  }

  /** Aborts every request and loop; resolves once all have ended. No events follow. */
  async stop(): Promise<void> {
    this.#abort.abort();
    await Promise.allSettled([...this.#runs, this.#events?.close()]);
    this.#connection?.close();
  }
}

/** What each kind is read from, with upstream's selectors. */
function kindSpecs(hostname: string): KindSpec[] {
  return [
    {
      kind: "Service",
      apiVersion: "v1",
      path: "/api/v1/services",
      labelSelector: PROXY_LABEL_SELECTOR,
    },
    {
      kind: "EndpointSlice",
      apiVersion: "discovery.k8s.io/v1",
      path: "/apis/discovery.k8s.io/v1/endpointslices",
      labelSelector: PROXY_LABEL_SELECTOR,
    },
    {
      kind: "Node",
      apiVersion: "v1",
      path: "/api/v1/nodes",
      fieldSelector: `metadata.name=${hostname}`,
    },
    {
      kind: "ServiceCIDR",
      apiVersion: "networking.k8s.io/v1",
      path: "/apis/networking.k8s.io/v1/servicecidrs",
      labelSelector: PROXY_LABEL_SELECTOR,
      optional: true,
      fallback: {
        apiVersion: "networking.k8s.io/v1beta1",
        path: "/apis/networking.k8s.io/v1beta1/servicecidrs",
      },
    },
  ];
}
