/**
 * The reflector: keeps a local copy of one kind of API object in step with the API server by
 * LIST then WATCH, and turns what changes into add/update/delete source events.
 *
 * It owns the loop client-go's reflector owns: the initial state, diffed against the store (a
 * relist emits deletes for objects that vanished and updates only for objects that changed), a
 * WATCH resumed from the last resourceVersion seen (bookmarks advance it), a relist after
 * `410 Gone`, an idle watchdog that aborts a connection on which nothing arrives, and retries
 * with jittered exponential backoff for ever. Requests go through the function it is given, so
 * it knows nothing of credentials or TLS.
 *
 * The initial state is read the way client-go reads it, so that a DaemonSet restarting every
 * node's proxy at once costs the API server no etcd read per node:
 * - a watch-list first (`sendInitialEvents=true`): the server streams every object as an
 *   `ADDED` event from its watch cache, then a bookmark annotated `k8s.io/initial-events-end`,
 *   and the same connection goes on as the watch. A server that refuses it (422 before 1.27 or
 *   with the WatchList feature off) or ends the stream before that bookmark is not asked again:
 *   the reflector falls back to LIST. The first initial state is handed on object by object as
 *   it streams in (nothing syncs before every kind is listed, and each object's JSON is let go
 *   as soon as it is converted); a later one (a relist after `410 Gone`) is taken in whole at
 *   its end bookmark, as client-go's watch-list does, so a running proxy never syncs half of it.
 * - LIST semantics by `resourceVersion`, as client-go's `relistResourceVersion`: the first
 *   LIST asks for `resourceVersion=0` (any version, from the watch cache); a relist after a
 *   watch expired asks for the last version seen (not older than it, also from the cache,
 *   unpaginated); only when the server says that version is too old too (410) does the next
 *   LIST read consistently (no resourceVersion, paginated by `limit`).
 *
 * @module
 */

import type { ObjectEvent, RawObject } from "./events.ts";
import { objectKey } from "./object_key.ts";
import {
  ApiStatusError,
  Backoff,
  errorMessage,
  IdleTimeoutError,
  isRecord,
  problemReason,
  readLineBatches,
  readText,
  reportApiProblem,
  ResponseTooLargeError,
  sleep,
  statusError,
  watchedRequest,
} from "./api_http.ts";
import {
  DEFAULT_MAX_EVENT_BYTES,
  DEFAULT_MAX_LIST_BYTES,
  type ReflectorOptions,
} from "./reflector_options.ts";
import { Slices } from "../slices.ts";
import {
  BadWatchEventError,
  initialEventsEnd,
  parseWatchEvent,
  relistEvents,
  remembered,
  resourceVersionOf,
  sameVersion,
  watchError,
} from "./watch_events.ts";

export { ApiStatusError, Backoff, IdleTimeoutError, relistEvents, remembered };
export { DEFAULT_MAX_EVENT_BYTES, DEFAULT_MAX_LIST_BYTES, type ReflectorOptions };

/**
 * Lists and watches one kind until its signal aborts; see the module doc. Create it, then
 * `await run()`.
 */
export class Reflector {
  readonly #o: ReflectorOptions;
  readonly #backoff: Backoff;
  #store = new Map<string, RawObject>();
  /** Last resourceVersion seen; undefined means "LIST first". */
  #rv?: string;
  /** The optional resource was absent at the last LIST. */
  #absent = false;
  /** The version read now: the options' own, or their `fallback` when the server lacks it. */
  #served: { readonly apiVersion: string; readonly path: string };
  /** When the last watch expired (410), ms since the epoch. */
  #expiredAt = 0;
  /** The last resourceVersion seen from a LIST, a watch event or a bookmark. */
  #lastSyncRV?: string;
  /** The server said {@link #lastSyncRV} is too old for a LIST: the next reads consistently. */
  #lastSyncRVUnavailable = false;
  /** Whether the next initial state is asked for as a watch-list. */
  #watchListUsable: boolean;
  /** An initial state has been taken in (listed or streamed) at least once. */
  #listedOnce = false;

  /** Creates the reflector; nothing happens until {@link run}. */
  constructor(options: ReflectorOptions) {
    this.#o = options;
    this.#backoff = new Backoff(options.backoff);
    this.#watchListUsable = options.watchList ?? true;
    this.#served = { apiVersion: options.apiVersion, path: options.path };
  }

  /** The API version objects are read at now (the fallback's when the server lacks the other). */
  get apiVersion(): string {
    return this.#served.apiVersion;
  }

  /**
   * What the reflector remembers of each object, by {@link objectKey}: its kind, name,
   * namespace and resourceVersion (see {@link remembered}). A delete or relist event's
   * `previous` is this record.
   */
  get store(): ReadonlyMap<string, RawObject> {
    return this.#store;
  }

  /** The resourceVersion a watch would resume from, if any. */
  get resourceVersion(): string | undefined {
    return this.#rv;
  }

  /** Lists and watches until the signal aborts; never rejects. */
  async run(): Promise<void> {
    const { signal, kind } = this.#o;
    while (!signal.aborted) {
      let phase = "list";
      try {
        if (this.#rv === undefined && this.#watchListUsable) {
          phase = "watch-list";
          if (await this.#watchList()) continue;
          phase = "list";
        }
        if (this.#rv === undefined) {
          const found = await this.#list();
          if (signal.aborted) break;
          this.#o.onListed();
          if (!found) {
            await sleep(this.#o.absentRetryMs, signal);
            continue;
          }
          this.#backoff.reset();
        }
        phase = "watch";
        await this.#watch();
      } catch (error) {
        if (signal.aborted) break;
        reportApiProblem(kind, problemReason(error));
        if (
          error instanceof ApiStatusError && error.status === 410 && phase === "list" &&
          !this.#lastSyncRVUnavailable
        ) {
          this.#o.log(
            `${kind} list at resourceVersion ${this.#lastSyncRV} expired; reading consistently`,
          );
          this.#lastSyncRVUnavailable = true;
          continue;
        }
        if (error instanceof ApiStatusError && error.status === 410) {
          this.#o.log(`${kind} watch from resourceVersion ${this.#rv} expired; listing again`);
          this.#rv = undefined;
          // Relist at once, unless the last expiry was just now (a server expiring every watch).
          const now = Date.now();
          const again = now - this.#expiredAt < 1000;
          this.#expiredAt = now;
          if (again) await sleep(this.#backoff.next(), signal);
          continue;
        }
        if (
          error instanceof ApiStatusError && error.status === 400 && phase === "list" &&
          !this.#lastSyncRVUnavailable && this.#lastSyncRV !== undefined
        ) {
          // A version the server cannot read (a bookmark it sent, garbled): read consistently.
          this.#o.log(
            `${kind} list at resourceVersion ${this.#lastSyncRV} refused (${error.message}); ` +
              "reading consistently",
          );
          this.#lastSyncRVUnavailable = true;
          continue;
        }
        if (error instanceof ApiStatusError && error.status === 404) this.#rv = undefined;
        // A version the server cannot watch from will not become readable: list instead.
        if (error instanceof ApiStatusError && error.status === 400 && phase === "watch") {
          this.#rv = undefined;
        }
        // Watching again from the same version would meet the same event: list instead, which
        // takes the objects one by one.
        if (phase === "watch" && isUnreadable(error)) this.#rv = undefined;
        if (phase !== "watch" && this.#o.optional) this.#o.onListed();
        const delayMs = this.#backoff.next();
        const problem = `cannot ${phase} ${kind}s: ${errorMessage(error)}`;
        this.#o.onRetry?.(problem);
        this.#o.log(`${problem}; retrying in ${delayMs} ms`);
        await sleep(delayMs, signal);
      }
    }
  }

  /** LISTs every page; false when an optional resource is absent (treated as empty). */
  async #list(): Promise<boolean> {
    const items: RawObject[] = [];
    let resourceVersion: string | undefined;
    const listRV = this.#lastSyncRVUnavailable ? "" : this.#lastSyncRV ?? "0";
    // client-go pages only reads that go to etcd; the watch cache answers in one piece.
    let limit = listRV === "" || listRV === "0" ? this.#o.pageSize : 0;
    let token = "";
    const wasFallback = this.#served.path !== this.#o.path;
    this.#served = { apiVersion: this.#o.apiVersion, path: this.#o.path };
    for (;;) {
      const query = this.#query({
        resourceVersion: token === "" ? listRV : "",
        limit: limit > 0 ? String(limit) : "",
        continue: token,
      });
      const page = await this.#request(query, async (response): Promise<Page> => {
        if (!response.ok) return { error: await statusError(response) };
        const text = await readText(response, this.#kick, { maxBytes: this.#maxListBytes });
        try {
          return { body: JSON.parse(text) as unknown };
        } catch (error) {
          throw new Error(`LIST ${this.#o.path} answered with text that is not JSON`, {
            cause: error,
          });
        }
      });
      if ("error" in page) {
        const { status } = page.error;
        const { fallback } = this.#o;
        if (
          status === 404 && token === "" && fallback !== undefined &&
          this.#served.path !== fallback.path
        ) {
          if (!wasFallback) {
            this.#o.log(
              `${this.#o.kind}s are not served at ${this.#o.apiVersion} ` +
                `(${page.error.message}); reading ${fallback.apiVersion}`,
            );
          }
          this.#served = fallback;
          continue;
        }
        if (this.#o.optional && (status === 404 || status === 403)) {
          if (!this.#absent) {
            this.#o.log(
              `${this.#o.kind}s are not served here (${page.error.message}); using none, ` +
                `asking again every ${this.#o.absentRetryMs} ms`,
            );
          }
          this.#absent = true;
          await this.#replace(new Map(), undefined);
          return false;
        }
        if (status === 410 && token !== "") {
          // The snapshot behind the continue token is gone: list again, in one piece.
          this.#o.log(`${this.#o.kind} list continuation expired; listing again without paging`);
          items.length = 0;
          token = "";
          limit = 0;
          continue;
        }
        throw page.error;
      }
      const body = page.body;
      if (!isRecord(body) || !Array.isArray(body.items)) {
        throw new Error(`LIST ${this.#o.path} answered without an items list`);
      }
      const metadata = isRecord(body.metadata) ? body.metadata : {};
      resourceVersion = typeof metadata.resourceVersion === "string"
        ? metadata.resourceVersion
        : undefined;
      if (resourceVersion === undefined || resourceVersion === "") {
        throw new Error(`LIST ${this.#o.path} answered without a resourceVersion`);
      }
      for (const item of body.items) if (isRecord(item)) items.push(item);
      token = typeof metadata.continue === "string" ? metadata.continue : "";
      if (token === "") break;
    }
    const next = new Map<string, RawObject>();
    for (const item of items) {
      const object = this.#typed(item, "listed");
      if (object === undefined) continue;
      const key = objectKey(this.#o.kind, object);
      if (key === undefined) {
        this.#o.log(`skipping a listed ${this.#o.kind} without a name or namespace`);
        continue;
      }
      next.set(key, object);
    }
    await this.#replace(next, resourceVersion);
    this.#lastSyncRVUnavailable = false;
    this.#absent = false;
    if (wasFallback && this.#served.path === this.#o.path) {
      this.#o.log(`${this.#o.kind}s are served at ${this.#o.apiVersion} now; reading it`);
    }
    return true;
  }

  /**
   * Reads the initial state as a watch-list and goes on watching on the same connection;
   * resolves true when the stream ended normally after the initial events (watch again from
   * {@link #rv}). Resolves false, never to be tried again, when the server refused the
   * watch-list or ended it before the initial events were complete. Errors after that are
   * thrown, as a watch's are.
   */
  async #watchList(): Promise<boolean> {
    this.#served = { apiVersion: this.#o.apiVersion, path: this.#o.path };
    const timeoutSeconds = Math.floor(this.#o.watchTimeoutSeconds * (1 + Math.random()));
    const query = this.#query({
      watch: "1",
      sendInitialEvents: "true",
      allowWatchBookmarks: "true",
      resourceVersionMatch: "NotOlderThan",
      timeoutSeconds: String(timeoutSeconds),
    });
    const initial = new Map<string, RawObject>();
    // The first initial state is handed on as it arrives: nothing can sync before every kind
    // is listed, and each object is converted (and its JSON let go) while the rest streams in.
    // Later ones (a relist after 410) are taken in whole at the end bookmark, as client-go's
    // watch-list does, so that a running proxy never syncs a half-read relist.
    const streamed = this.#store.size === 0 && !this.#listedOnce;
    let complete = false;
    const fallBack = (why: string) => {
      this.#watchListUsable = false;
      this.#o.log(
        `the API server does not stream ${this.#o.kind}s as a watch-list (${why}); listing instead`,
      );
      return false;
    };
    try {
      return await this.#request(query, async (response) => {
        if (!response.ok) return fallBack((await statusError(response)).message);
        const maxLineBytes = this.#maxEventBytes;
        for await (const lines of readLineBatches(response.body!, { maxLineBytes })) {
          for (const line of lines) {
            if (line.trim() === "") continue;
            this.#kick();
            if (complete) {
              this.#handleWatchEvent(line);
              continue;
            }
            const event = parseWatchEvent(line);
            if (event.type === "ERROR") throw watchError(event.object);
            const rv = resourceVersionOf(event.object);
            if (event.type === "BOOKMARK") {
              if (!initialEventsEnd(event.object) || rv === undefined) continue;
              complete = true;
              if (streamed) this.#took(rv);
              else await this.#replace(initial, rv);
              this.#lastSyncRVUnavailable = false;
              this.#absent = false;
              this.#backoff.reset();
              this.#o.onListed();
              continue;
            }
            if (event.type !== "ADDED") {
              return fallBack(`a ${event.type} event before the list ended`);
            }
            const typed = this.#typed(event.object, "listed");
            if (typed === undefined) continue;
            const key = objectKey(this.#o.kind, typed);
            if (key === undefined) {
              this.#o.log(`skipping a listed ${this.#o.kind} without a name or namespace`);
            } else if (streamed) this.#arrived(key, typed);
            else initial.set(key, typed);
          }
        }
        return complete || fallBack("the stream ended before its initial-events-end bookmark");
      });
    } catch (error) {
      // Once listed, errors are a watch's; before, only a server that answered but never ended
      // its initial events (an idle stream, a bad event) means it does not speak watch-list.
      const answered = error instanceof IdleTimeoutError || isUnreadable(error);
      if (complete || this.#o.signal.aborted || !answered) throw error;
      reportApiProblem(this.#o.kind, problemReason(error));
      return fallBack(errorMessage(error));
    }
  }

  /**
   * Takes a complete list in: the store becomes `next`, and the events that lead there are
   * emitted in slices, so that a list of 50,000 objects never holds the event loop.
   */
  async #replace(next: Map<string, RawObject>, resourceVersion: string | undefined): Promise<void> {
    this.#listedOnce = true;
    const events = relistEvents(this.#o.kind, this.#store, next);
    this.#store = new Map([...next].map(([key, object]) => [key, remembered(object)]));
    this.#rv = resourceVersion;
    if (resourceVersion !== undefined) this.#lastSyncRV = resourceVersion;
    const slices = new Slices();
    for (const event of events) {
      if (this.#o.signal.aborted) return;
      this.#emit(event);
      await slices.pause();
    }
  }

  /**
   * One object of a streamed first initial state: remembered and handed on at once, as an add
   * (or, should the server send it twice, as the update a relist would make of it).
   */
  #arrived(key: string, object: RawObject): void {
    const old = this.#store.get(key);
    this.#store.set(key, remembered(object));
    if (old === undefined) this.#emit({ kind: this.#o.kind, current: object });
    else if (!sameVersion(old, object)) {
      this.#emit({ kind: this.#o.kind, previous: old, current: object });
    }
  }

  /** A streamed first initial state is complete at `resourceVersion`: the store holds it. */
  #took(resourceVersion: string): void {
    this.#listedOnce = true;
    this.#rv = this.#lastSyncRV = resourceVersion;
  }

  /** One WATCH from {@link #rv}, until the server ends it; throws on anything else. */
  async #watch(): Promise<void> {
    const rv = this.#rv!;
    const timeoutSeconds = Math.floor(this.#o.watchTimeoutSeconds * (1 + Math.random()));
    const query = this.#query({
      watch: "1",
      allowWatchBookmarks: "true",
      resourceVersion: rv,
      timeoutSeconds: String(timeoutSeconds),
    });
    const started = Date.now();
    const received = await this.#request(query, async (response) => {
      if (!response.ok) throw await statusError(response);
      let count = 0;
      const maxLineBytes = this.#maxEventBytes;
      for await (const lines of readLineBatches(response.body!, { maxLineBytes })) {
        for (const line of lines) {
          if (line.trim() === "") continue;
          this.#kick();
          this.#handleWatchEvent(line);
          if (count++ === 0) this.#backoff.reset();
        }
      }
      return count;
    });
    if (received === 0 && Date.now() - started < 1000) {
      throw new Error("the watch ended at once without an event");
    }
  }

  #handleWatchEvent(line: string): void {
    const { type, object } = parseWatchEvent(line);
    if (type === "ERROR") throw watchError(object);
    const rv = resourceVersionOf(object);
    if (rv !== undefined) this.#rv = this.#lastSyncRV = rv;
    if (type === "BOOKMARK") return;
    if (type !== "ADDED" && type !== "MODIFIED" && type !== "DELETED") {
      reportApiProblem(this.#o.kind, "bad_event");
      this.#o.log(`ignoring a ${this.#o.kind} watch event of unknown type ${String(type)}`);
      return;
    }
    const typed = this.#typed(object, "watched");
    if (typed === undefined) return;
    const key = objectKey(this.#o.kind, typed);
    if (key === undefined) {
      this.#o.log(`skipping a watched ${this.#o.kind} without a name or namespace`);
      return;
    }
    const old = this.#store.get(key);
    if (type === "DELETED") {
      if (old === undefined) return;
      this.#store.delete(key);
      this.#emit({ kind: this.#o.kind, previous: old });
      return;
    }
    this.#store.set(key, remembered(typed));
    if (old === undefined) this.#emit({ kind: this.#o.kind, current: typed });
    else if (!sameVersion(old, typed)) {
      this.#emit({ kind: this.#o.kind, previous: old, current: typed });
    }
  }

  /** Kicks the idle watchdog of the request in flight. */
  #kick: () => void = () => {};

  /**
   * Sends a GET for `query` and hands the response to `consume` ({@link watchedRequest}),
   * with {@link #kick} the watchdog's while it runs.
   */
  #request<T>(query: string, consume: (response: Response) => Promise<T>): Promise<T> {
    return watchedRequest(
      this.#o.get,
      `${this.#served.path}?${query}`,
      this.#o,
      (response, kick) => {
        this.#kick = kick;
        return consume(response).finally(() => this.#kick = () => {});
      },
    );
  }

  #query(params: Record<string, string>): string {
    const query = new URLSearchParams();
    if (this.#o.labelSelector) query.set("labelSelector", this.#o.labelSelector);
    if (this.#o.fieldSelector) query.set("fieldSelector", this.#o.fieldSelector);
    for (const [name, value] of Object.entries(params)) if (value !== "") query.set(name, value);
    return query.toString();
  }

  /**
   * The object with `kind` and `apiVersion` set (LIST items come without them); undefined,
   * with a log line, for an object that says it is of another kind.
   */
  #typed(object: RawObject, how: "listed" | "watched"): RawObject | undefined {
    if (object.kind === this.#o.kind && typeof object.apiVersion === "string") return object;
    if (object.kind !== undefined && object.kind !== null && object.kind !== "") {
      const kind = typeof object.kind === "string" ? object.kind : JSON.stringify(object.kind);
      reportApiProblem(this.#o.kind, "wrong_kind");
      this.#o.log(
        `skipping a ${how} object of kind ${kind.slice(0, 100)} among ${this.#o.kind}s`,
      );
      return undefined;
    }
    return { ...object, kind: this.#o.kind, apiVersion: this.#served.apiVersion };
  }

  get #maxEventBytes(): number {
    return this.#o.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
  }

  get #maxListBytes(): number {
    return this.#o.maxListBytes ?? DEFAULT_MAX_LIST_BYTES;
  }

  #emit(event: ObjectEvent): void {
    try {
      this.#o.onEvent(event);
    } catch (error) {
      this.#o.log(`the ${this.#o.kind} event handler failed: ${errorMessage(error)}`);
    }
  }
}

/** One LIST page, or the error the server answered with instead. */
type Page = { error: ApiStatusError } | { body: unknown };

/** A watch sent what cannot be read: not an event, or too large. */
function isUnreadable(error: unknown): boolean {
  return error instanceof BadWatchEventError || error instanceof ResponseTooLargeError;
}
