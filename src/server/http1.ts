/**
 * The little of HTTP/1.1 the health, metrics and health-check ports speak: finding the end of a
 * request head in a byte buffer, parsing it strictly into a `Request`, and writing a `Response`
 * as bytes. Pure: no sockets, no timers; `serve.ts` does the I/O.
 *
 * What is accepted: a request line `METHOD SP origin-form-or-absolute-URL SP HTTP/1.0|1.1` and
 * header lines `name: value`, each ending in CRLF (or a bare LF, as Go's server accepts), the head
 * no longer than the given limit. What is not: obsolete line folding, header names that are not
 * tokens, `Content-Length` together with `Transfer-Encoding`, and a request body — the endpoints
 * are GET-only; a request announcing a body is answered and its connection closed (the body is
 * never read), so no body can be smuggled in as the next request.
 *
 * @example
 * ```ts
 * const bytes = new TextEncoder().encode("GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n");
 * const end = findHeadEnd(bytes); // bytes.length
 * const head = parseRequestHead(bytes.subarray(0, end), { base: "http://0.0.0.0:10256" });
 * // head.request.url === "http://node/healthz", head.keepAlive === true
 * ```
 *
 * @module
 */

/** A request head that cannot be served; {@link status} is what to answer before closing. */
export class RequestHeadError extends Error {
  /** The status to answer: 400, 405 or 505 (431 is the reader's, for a head too long). */
  readonly status: number;

  constructor(message: string, status = 400) {
    super(message);
    this.name = "RequestHeadError";
    this.status = status;
  }
}

/** A parsed request head. */
export interface RequestHead {
  /** The request, without a body. */
  readonly request: Request;
  /** HTTP/1.1 without `Connection: close`, and no body announced: the connection may be reused. */
  readonly keepAlive: boolean;
}

/** Options of {@link parseRequestHead}. */
export interface ParseOptions {
  /** URL base for origin-form targets when the `Host` header is missing or unusable. */
  readonly base: string;
}

const LF = 0x0a;
const CR = 0x0d;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const REQUEST_LINE = /^([A-Z]{1,20}) (\S+) HTTP\/1\.([01])$/;

/**
 * The length of the request head at the start of `bytes` (up to and including the empty line),
 * or -1 when the empty line has not arrived yet. Lines end in LF, optionally preceded by CR.
 */
export function findHeadEnd(bytes: Uint8Array): number {
  let lineStart = 0;
  // Empty lines before the request line are skipped (RFC 9112 §2.2), as Go's server does.
  let started = false;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] !== LF) continue;
    const lineLength = i - lineStart - (i > lineStart && bytes[i - 1] === CR ? 1 : 0);
    if (lineLength === 0 && started) return i + 1;
    if (lineLength > 0) started = true;
    lineStart = i + 1;
  }
  return -1;
}

/**
 * Parses a complete request head (as delimited by {@link findHeadEnd}). Throws
 * {@link RequestHeadError} for anything outside the strict subset described in the module doc.
 */
export function parseRequestHead(head: Uint8Array, options: ParseOptions): RequestHead {
  const text = new TextDecoder("latin1").decode(head);
  const lines = text.split("\n").map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  while (lines.length > 0 && lines[0] === "") lines.shift();
  while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  const match = REQUEST_LINE.exec(lines[0] ?? "");
  if (match === null) {
    if (/ HTTP\/\d/.test(lines[0] ?? "") && !/ HTTP\/1\.[01]$/.test(lines[0])) {
      throw new RequestHeadError("unsupported HTTP version", 505);
    }
    throw new RequestHeadError("malformed request line");
  }
  const [, method, target, minor] = match;
  const headers = new Headers();
  for (const line of lines.slice(1)) {
    if (line.startsWith(" ") || line.startsWith("\t")) {
      throw new RequestHeadError("obsolete header line folding");
    }
    const colon = line.indexOf(":");
    const name = colon < 0 ? "" : line.slice(0, colon);
    if (!TOKEN.test(name)) throw new RequestHeadError("malformed header line");
    try {
      headers.append(name, line.slice(colon + 1).trim());
    } catch {
      throw new RequestHeadError(`malformed value of header ${name}`);
    }
  }
  const length = headers.get("content-length");
  const chunked = headers.has("transfer-encoding");
  if (length !== null && chunked) {
    throw new RequestHeadError("both Content-Length and Transfer-Encoding");
  }
  if (length !== null && !/^\d{1,15}$/.test(length)) {
    throw new RequestHeadError("malformed Content-Length");
  }
  const hasBody = chunked || (length !== null && Number(length) > 0);
  const url = requestURL(target, headers.get("host"), options.base);
  const connection = (headers.get("connection") ?? "").toLowerCase().split(",").map((t) =>
    t.trim()
  );
  const keepAlive = minor === "1" && !connection.includes("close") && !hasBody;
  if (FORBIDDEN_METHODS.has(method)) throw new RequestHeadError(`method ${method}`, 405);
  // The body is never read; the handlers ignore it.
  return { request: new Request(url, { method, headers }), keepAlive };
}

/** Methods a `Request` cannot carry (fetch's forbidden methods). */
const FORBIDDEN_METHODS = new Set(["CONNECT", "TRACE", "TRACK"]);

function requestURL(target: string, host: string | null, base: string): string {
  if (target.startsWith("/")) {
    for (const origin of [host === null ? undefined : `http://${host}`, base]) {
      if (origin === undefined) continue;
      try {
        const url = new URL(target, origin);
        if (url.origin === new URL(origin).origin) return url.href;
      } catch {
        // try the next base
      }
    }
    throw new RequestHeadError("malformed request target");
  }
  if (/^https?:\/\//i.test(target)) {
    try {
      return new URL(target).href;
    } catch {
      // fall through
    }
  }
  throw new RequestHeadError("malformed request target");
}

const REASONS: Record<number, string> = {
  200: "OK",
  400: "Bad Request",
  404: "Not Found",
  405: "Method Not Allowed",
  408: "Request Timeout",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  503: "Service Unavailable",
  505: "HTTP Version Not Supported",
};

/** Headers {@link responseBytes} writes itself. */
const FRAMING = new Set([
  "content-length",
  "transfer-encoding",
  "connection",
  "date",
  "keep-alive",
]);

/** Options of {@link responseBytes}. */
export interface ResponseOptions {
  /** Leave the connection open after this response (else `Connection: close`). */
  readonly keepAlive: boolean;
  /** Answering a `HEAD`: the headers of the body but not the body. */
  readonly head?: boolean;
  /** The `Date` header's time, in ms. Default: now. */
  readonly now?: number;
}

/**
 * The bytes of `res` as an HTTP/1.1 response: status line, the response's headers, `Date`,
 * `Content-Length` and `Connection: close` unless kept alive, then the body (whole: the
 * endpoints' bodies are small). Reads the body.
 */
export async function responseBytes(res: Response, options: ResponseOptions): Promise<Uint8Array> {
  const whole = new Uint8Array(await res.arrayBuffer());
  const body = options.head ? new Uint8Array(0) : whole;
  const length = whole.length;
  const lines = [`HTTP/1.1 ${res.status} ${REASONS[res.status] ?? ""}`];
  res.headers.forEach((value, name) => {
    if (!FRAMING.has(name)) lines.push(`${name}: ${value}`);
  });
  lines.push(`date: ${new Date(options.now ?? Date.now()).toUTCString()}`);
  lines.push(`content-length: ${length}`);
  if (!options.keepAlive) lines.push("connection: close");
  const head = new TextEncoder().encode(`${lines.join("\r\n")}\r\n\r\n`);
  const bytes = new Uint8Array(head.length + body.length);
  bytes.set(head);
  bytes.set(body, head.length);
  return bytes;
}

/** A plain-text error response for a request that never reached a handler. */
export function errorResponse(status: number): Response {
  return new Response(`${REASONS[status] ?? "error"}\n`, {
    status,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}
