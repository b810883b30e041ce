/**
 * Binding a `Request → Response` handler to an address: the one place the health, metrics and
 * health-check servers open sockets. HTTP/1.1 is served here over `Deno.listen`, not
 * `Deno.serve`, because the proxy must outlive any client of these ports (issue 23):
 * `Deno.serve` bounds neither the connections it holds nor how long a client may take to send
 * its request, and an accept error (EMFILE at the descriptor limit) in its loop is an uncaught
 * error that ends the process.
 *
 * Bounds of every listener ({@link ConnectionLimits}):
 * - accept errors (EMFILE, ENFILE, ECONNABORTED, …) are temporary, as in Go's server: back off
 *   5 ms doubling to 1 s, log one line per {@link ACCEPT_ERROR_LOG_INTERVAL_MS} with the count,
 *   keep serving;
 * - a request head must arrive within `headerTimeoutMs` and fit in `maxHeaderBytes`; a kept-alive
 *   connection may wait `idleTimeoutMs` for its next request; a response must be taken within
 *   `writeTimeoutMs`;
 * - at most `maxConnections` per listener, and over all listeners the budget of a shared
 *   {@link ConnectionPool}; at the cap a half-open or idle connection is closed for the new one:
 *   the oldest of the client address holding the most (see `connection_pool.ts`).
 *
 * Handlers stay pure and are tested without a socket; the parsing is in `http1.ts`.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import { splitHostPort } from "../config/address_syntax.ts";
import { type Clock, realClock } from "../runner/clock.ts";
import { ConnectionPool, type PooledConnection, type PoolListener } from "./connection_pool.ts";
import {
  errorResponse,
  findHeadEnd,
  parseRequestHead,
  RequestHeadError,
  responseBytes,
} from "./http1.ts";

/** A server bound by {@link serveHttp}. */
export interface HttpServer {
  /** The bound address; `port` is the real one when 0 was asked for. */
  readonly addr: { readonly hostname: string; readonly port: number };
  /** Stops accepting connections and resolves once in-flight requests are answered. */
  close(): Promise<void>;
}

/** The address could not be parsed or bound. */
export class ServeError extends Error {
  /** The bind address as given. */
  readonly address: string;

  constructor(message: string, options: { address: string; cause?: unknown }) {
    super(message, { cause: options.cause });
    this.name = "ServeError";
    this.address = options.address;
  }
}

/** The part of a `Deno.Conn` the server uses. */
export interface ServerConn {
  /** The client's address: connections are evicted per client address first. */
  readonly remoteAddr: Deno.Addr;
  read(p: Uint8Array): Promise<number | null>;
  write(p: Uint8Array): Promise<number>;
  close(): void;
  setNoDelay?(noDelay?: boolean): void;
}

/** The part of a `Deno.Listener` the server uses. */
export interface ServerListener {
  readonly addr: Deno.Addr;
  accept(): Promise<ServerConn>;
  close(): void;
}

/** How long and how many: the bounds of one listener. */
export interface ConnectionLimits {
  /** Most connections this listener holds (also bounded by the pool). Default 128. */
  readonly maxConnections: number;
  /** From accept (or a kept-alive request's first byte) to the end of the head. Default 5 s. */
  readonly headerTimeoutMs: number;
  /** How long a kept-alive connection may wait for its next request. Default 30 s. */
  readonly idleTimeoutMs: number;
  /** How long writing one response may take. Default 10 s. */
  readonly writeTimeoutMs: number;
  /** Longest request head, request line included. Default 8 KiB. */
  readonly maxHeaderBytes: number;
}

/** The defaults of {@link ConnectionLimits}. */
export const DEFAULT_LIMITS: ConnectionLimits = {
  maxConnections: 128,
  headerTimeoutMs: 5_000,
  idleTimeoutMs: 30_000,
  writeTimeoutMs: 10_000,
  maxHeaderBytes: 8 * 1024,
};

/** At most one accept-error line per listener in this long (the count of the others follows). */
export const ACCEPT_ERROR_LOG_INTERVAL_MS = 60_000;

/** Back-off after an accept error: from this, doubling, to {@link MAX_ACCEPT_DELAY_MS}. */
const FIRST_ACCEPT_DELAY_MS = 5;
const MAX_ACCEPT_DELAY_MS = 1_000;
/** Bytes asked of one `read`. */
const READ_CHUNK = 2048;

/** Options of {@link serveHttp}. */
export interface ServeOptions {
  /** What the server is, for log lines and the connection metrics (`health`, `metrics`). */
  name?: string;
  /** Called with an error a handler threw; the client then gets a 500. Default: ignore. */
  onError?: (err: unknown) => void;
  /** Where accept errors are reported (rate-limited). Default: nothing. */
  log?: (line: string) => void;
  /** Called with each accept error and the server's name (e.g. to count it). */
  onAcceptError?: (err: unknown, server: string) => void;
  /** The shared connection budget. Default: a pool of this listener's own. */
  pool?: ConnectionPool;
  /** Bounds; unset fields take {@link DEFAULT_LIMITS}. */
  limits?: Partial<ConnectionLimits>;
  /** Timeouts and back-off. Default {@link realClock}. */
  clock?: Clock;
  /** Opens the listening socket. Default `Deno.listen` (TCP). Tests substitute it. */
  listen?: (options: { hostname: string; port: number }) => ServerListener;
}

/**
 * Splits a bind address `ip:port` or `[ipv6]:port` (port 0-65535; 0 picks a free port) into
 * the hostname and port to listen on. Throws {@link ServeError} on anything else.
 *
 * @example
 * ```ts
 * parseBindAddress("[::]:10256"); // { hostname: "::", port: 10256 }
 * ```
 */
export function parseBindAddress(address: string): { hostname: string; port: number } {
  const parts = splitHostPort(address);
  const port = Number(parts?.port);
  if (
    parts === undefined || !ipaddr.isValid(parts.host) || !/^\d{1,5}$/.test(parts.port) ||
    port > 65535
  ) {
    throw new ServeError(
      `cannot use bind address ${JSON.stringify(address)}: must be IP:port, e.g. 0.0.0.0:10256`,
      { address },
    );
  }
  return { hostname: parts.host, port };
}

/**
 * Serves `handler` on `address`; returns null when `address` is empty (disabled). Throws
 * {@link ServeError} when the address is malformed or cannot be bound (e.g. in use). Never
 * throws or rejects afterwards: see the module doc for what each listener survives.
 *
 * @example
 * ```ts
 * const server = serveHttp("127.0.0.1:0", () => new Response("ok"), { name: "test" });
 * console.log(server?.addr.port);
 * await server?.close();
 * ```
 */
export function serveHttp(
  address: string,
  handler: (req: Request) => Response | Promise<Response>,
  options: ServeOptions = {},
): HttpServer | null {
  if (address === "") return null;
  const { hostname, port } = parseBindAddress(address);
  const name = options.name ?? "http";
  const limits = { ...DEFAULT_LIMITS, ...options.limits };
  const listen = options.listen ?? ((o) => Deno.listen({ ...o, transport: "tcp" }));
  let listener: ServerListener;
  try {
    listener = listen({ hostname, port });
  } catch (err) {
    throw new ServeError(
      `cannot serve ${name} on ${address}: ${(err as Error).message}`,
      { address, cause: err },
    );
  }
  const addr = listener.addr as Deno.NetAddr;
  const pool = options.pool ?? new ConnectionPool({ maxConnections: limits.maxConnections });
  const server = new Listening(listener, handler, {
    name,
    where: `${name} server on ${address}`,
    base: `http://${
      addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname
    }:${addr.port}`,
    limits,
    share: pool.listener(name, limits.maxConnections),
    clock: options.clock ?? realClock,
    log: options.log ?? (() => {}),
    onError: options.onError ?? (() => {}),
    onAcceptError: options.onAcceptError ?? (() => {}),
  });
  return {
    addr: { hostname: addr.hostname, port: addr.port },
    close: () => server.close(),
  };
}

interface ListeningContext {
  readonly name: string;
  /** `health server on 0.0.0.0:10256`, for log lines. */
  readonly where: string;
  /** URL base of origin-form request targets without a usable Host. */
  readonly base: string;
  readonly limits: ConnectionLimits;
  readonly share: PoolListener;
  readonly clock: Clock;
  readonly log: (line: string) => void;
  readonly onError: (err: unknown) => void;
  readonly onAcceptError: (err: unknown, server: string) => void;
}

/** One listening socket: its accept loop and its connections. */
class Listening {
  readonly #listener: ServerListener;
  readonly #handler: (req: Request) => Response | Promise<Response>;
  readonly #ctx: ListeningContext;
  readonly #connections = new Map<ServerConn, { entry: PooledConnection; done: Promise<void> }>();
  readonly #accepting: Promise<void>;
  #closing: Promise<void> | undefined;
  #closed = false;
  #wake: (() => void) | undefined;
  /** Accept errors not yet logged, and when the last line was written. */
  #unlogged = 0;
  #loggedAt: number | undefined;

  constructor(
    listener: ServerListener,
    handler: (req: Request) => Response | Promise<Response>,
    ctx: ListeningContext,
  ) {
    this.#listener = listener;
    this.#handler = handler;
    this.#ctx = ctx;
    this.#accepting = this.#acceptLoop();
  }

  close(): Promise<void> {
    return this.#closing ??= (async () => {
      this.#closed = true;
      closeQuietly(this.#listener);
      this.#wake?.();
      await this.#accepting;
      // Waiting connections go now; those being answered finish their response first.
      for (const [conn, c] of this.#connections) if (c.entry.state !== "active") closeQuietly(conn);
      await Promise.all([...this.#connections.values()].map((c) => c.done));
    })();
  }

  async #acceptLoop(): Promise<void> {
    let delay = 0;
    while (!this.#closed) {
      let conn: ServerConn;
      try {
        conn = await this.#listener.accept();
      } catch (err) {
        if (this.#closed) return;
        if (err instanceof Deno.errors.BadResource) {
          this.#ctx.log(`${this.#ctx.where}: stopped accepting: ${(err as Error).message}`);
          return;
        }
        delay = delay === 0 ? FIRST_ACCEPT_DELAY_MS : Math.min(2 * delay, MAX_ACCEPT_DELAY_MS);
        this.#acceptFailed(err, delay);
        await this.#sleep(delay);
        continue;
      }
      delay = 0;
      if (this.#closed) {
        closeQuietly(conn);
        return;
      }
      this.#admit(conn);
    }
  }

  #admit(conn: ServerConn): void {
    const remote = conn.remoteAddr;
    const source = "hostname" in remote ? remote.hostname : "";
    const entry = this.#ctx.share.admit(source, () => closeQuietly(conn));
    if (entry === null) {
      closeQuietly(conn);
      return;
    }
    try {
      conn.setNoDelay?.(true);
    } catch {
      // a connection already reset by its peer: the first read says so
    }
    const done = this.#serve(conn, entry).finally(() => {
      entry.release();
      closeQuietly(conn);
      this.#connections.delete(conn);
    });
    this.#connections.set(conn, { entry, done });
  }

  /** Answers requests on `conn` until it closes, times out, errs, or asks to close. */
  async #serve(conn: ServerConn, entry: PooledConnection): Promise<void> {
    const { limits, clock } = this.#ctx;
    let buffered: Uint8Array<ArrayBuffer> = new Uint8Array(0);
    const chunk = new Uint8Array(READ_CHUNK);
    let timer: number | undefined;
    const arm = (ms: number) => {
      if (timer !== undefined) clock.clearTimeout(timer);
      timer = clock.setTimeout(() => closeQuietly(conn), ms);
    };
    try {
      let waitingForFirstByte = false; // the first request's timeout runs from accept
      arm(limits.headerTimeoutMs);
      while (!this.#closed) {
        let end = findHeadEnd(buffered);
        while (end < 0) {
          if (buffered.length >= limits.maxHeaderBytes) {
            await this.#write(conn, await responseBytes(errorResponse(431), { keepAlive: false }));
            return;
          }
          const n = await conn.read(chunk);
          if (n === null) return;
          if (waitingForFirstByte && n > 0) {
            waitingForFirstByte = false;
            entry.setState("reading");
            arm(limits.headerTimeoutMs);
          }
          buffered = concat(buffered, chunk.subarray(0, n));
          end = findHeadEnd(buffered);
        }
        if (end > limits.maxHeaderBytes) {
          await this.#write(conn, await responseBytes(errorResponse(431), { keepAlive: false }));
          return;
        }
        if (timer !== undefined) clock.clearTimeout(timer);
        timer = undefined;
        const head = buffered.subarray(0, end);
        buffered = buffered.slice(end);
        entry.setState("active");
        const keepAlive = await this.#answer(conn, head);
        if (!keepAlive || this.#closed) return;
        entry.setState("idle");
        waitingForFirstByte = true;
        arm(limits.idleTimeoutMs);
        if (buffered.length > 0) { // a pipelined request is already here
          waitingForFirstByte = false;
          entry.setState("reading");
          arm(limits.headerTimeoutMs);
        }
      }
    } catch {
      // closed by a timeout, an eviction or close(), or reset by the peer: nothing to answer
    } finally {
      if (timer !== undefined) clock.clearTimeout(timer);
    }
  }

  /** Answers one request; resolves with whether the connection may be reused. */
  async #answer(conn: ServerConn, head: Uint8Array): Promise<boolean> {
    let request: Request;
    let keepAlive: boolean;
    try {
      ({ request, keepAlive } = parseRequestHead(head, { base: this.#ctx.base }));
    } catch (err) {
      if (!(err instanceof RequestHeadError)) throw err;
      await this.#write(conn, await responseBytes(errorResponse(err.status), { keepAlive: false }));
      return false;
    }
    keepAlive &&= !this.#closed;
    let response: Response;
    try {
      response = await this.#handler(request);
    } catch (err) {
      this.#ctx.onError(err);
      response = new Response("internal error\n", { status: 500 });
    }
    const bytes = await responseBytes(response, { keepAlive, head: request.method === "HEAD" });
    await this.#write(conn, bytes);
    return keepAlive;
  }

  /** Writes all of `bytes`, closing the connection if that takes longer than the limit. */
  async #write(conn: ServerConn, bytes: Uint8Array): Promise<void> {
    const { clock, limits } = this.#ctx;
    const timer = clock.setTimeout(() => closeQuietly(conn), limits.writeTimeoutMs);
    try {
      let written = 0;
      while (written < bytes.length) written += await conn.write(bytes.subarray(written));
    } finally {
      clock.clearTimeout(timer);
    }
  }

  #acceptFailed(err: unknown, delay: number): void {
    this.#ctx.onAcceptError(err, this.#ctx.name);
    const now = this.#ctx.clock.now();
    if (this.#loggedAt !== undefined && now - this.#loggedAt < ACCEPT_ERROR_LOG_INTERVAL_MS) {
      this.#unlogged++;
      return;
    }
    const earlier = this.#unlogged === 0
      ? ""
      : ` (${this.#unlogged} more accept errors since the last report)`;
    this.#unlogged = 0;
    this.#loggedAt = now;
    const code = (err as { code?: string }).code;
    this.#ctx.log(
      `${this.#ctx.where}: cannot accept a connection: ${(err as Error).message}` +
        `${code === undefined ? "" : ` [${code}]`}${earlier}; backing off ${delay} ms and ` +
        `still serving (reported at most once in ${ACCEPT_ERROR_LOG_INTERVAL_MS / 1000} s)`,
    );
  }

  /** Waits `ms` on the clock, or until {@link close}. */
  #sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = this.#ctx.clock.setTimeout(() => {
        this.#wake = undefined;
        resolve();
      }, ms);
      this.#wake = () => {
        this.#ctx.clock.clearTimeout(timer);
        this.#wake = undefined;
        resolve();
      };
    });
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array<ArrayBuffer> {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function closeQuietly(closable: { close(): void }): void {
  try {
    closable.close();
  } catch {
    // already closed
  }
}
