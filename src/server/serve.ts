/**
 * Binding a `Request → Response` handler to an address with `Deno.serve`: the one place the
 * health and metrics servers open sockets.
 *
 * Addresses are kube-proxy's bind addresses (`0.0.0.0:10256`, `[::]:10256`, `127.0.0.1:10249`);
 * an empty address disables the server. Handlers stay pure and are tested without a socket.
 *
 * @module
 */
import ipaddr from "ipaddr.js";
import { splitHostPort } from "../config/address_syntax.ts";

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

/** Options of {@link serveHttp}. */
export interface ServeOptions {
  /** What the server is, for error messages (`health`, `metrics`). Default `http`. */
  name?: string;
  /** Called with an error a handler threw; the client then gets a 500. Default: ignore. */
  onError?: (err: unknown) => void;
}

/**
 * Splits a bind address `ip:port` or `[ipv6]:port` (port 0-65535; 0 picks a free port) into
 * the hostname and port `Deno.serve` takes. Throws {@link ServeError} on anything else.
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
 * {@link ServeError} when the address is malformed or cannot be bound (e.g. in use).
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
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({
      hostname,
      port,
      onListen: () => {},
      onError: (err) => {
        options.onError?.(err);
        return new Response("internal error\n", { status: 500 });
      },
    }, handler);
  } catch (err) {
    throw new ServeError(
      `cannot serve ${name} on ${address}: ${(err as Error).message}`,
      { address, cause: err },
    );
  }
  let closing: Promise<void> | undefined;
  return {
    addr: { hostname: server.addr.hostname, port: server.addr.port },
    close: () => closing ??= server.shutdown(),
  };
}
