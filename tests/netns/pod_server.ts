/**
 * The program every test pod runs: a tiny server that names itself, on TCP (HTTP) and UDP.
 *
 * Run inside a pod namespace as
 * `deno run --allow-net pod_server.ts --name pod-a --ports 8080,9090`. On every port it listens
 * on TCP and UDP, all addresses, both families:
 * - HTTP `GET /` answers with the pod's name as the body; `GET /client` answers with the
 *   address the request came from as `ip:port` (`[ip]:port` for IPv6), which shows whether the
 *   node masqueraded it.
 * - a UDP datagram `client` is answered with that same address; any other datagram with the
 *   pod's name.
 *
 * It prints `ready` on stdout once every socket is bound. No imports: it must start inside a
 * namespace without reaching any registry.
 *
 * @module
 */

import dgram from "node:dgram";

/** Longest request head read before answering; the probe sends a one-line request. */
const MAX_REQUEST_BYTES = 8192;
/** A connection that sends no complete request head within this time is closed. */
const REQUEST_TIMEOUT_MS = 5000;

/** Server settings parsed from the command line. */
export interface PodServerArgs {
  name: string;
  ports: number[];
}

/** Parses `--name NAME --ports P1,P2`; throws with a usage message on bad input. */
export function parsePodServerArgs(args: readonly string[]): PodServerArgs {
  let name = "";
  let ports: number[] = [];
  for (let i = 0; i < args.length; i++) {
    const value = args[i + 1];
    if (args[i] === "--name" && value !== undefined) {
      name = value;
      i++;
    } else if (args[i] === "--ports" && value !== undefined) {
      ports = value.split(",").map(Number);
      i++;
    } else {
      throw new Error(`cannot use argument ${args[i]}: usage: --name NAME --ports P1,P2`);
    }
  }
  if (name === "") throw new Error("cannot start the pod server: --name is required");
  if (ports.length === 0 || ports.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) {
    throw new Error(`cannot start the pod server: --ports must be 1-65535, got ${ports}`);
  }
  return { name, ports };
}

/** `ip:port` or `[ip]:port`, with IPv4-mapped IPv6 (`::ffff:a.b.c.d`) shown as plain IPv4. */
export function formatPeer(hostname: string, port: number): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(hostname);
  const host = mapped ? mapped[1] : hostname;
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** The HTTP/1.0 response for a request path: the name, or the peer address for `/client`. */
export function httpResponse(path: string, name: string, peer: string): string {
  const body = path === "/client" ? peer : name;
  const length = new TextEncoder().encode(body).length;
  return `HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: ${length}\r\n` +
    `Connection: close\r\n\r\n${body}`;
}

async function serveConnection(conn: Deno.TcpConn, name: string): Promise<void> {
  const timer = setTimeout(() => conn.close(), REQUEST_TIMEOUT_MS);
  try {
    const buf = new Uint8Array(MAX_REQUEST_BYTES);
    let used = 0;
    let head = "";
    while (used < buf.length && !head.includes("\r\n\r\n") && !head.includes("\n\n")) {
      const n = await conn.read(buf.subarray(used));
      if (n === null) break;
      used += n;
      head = new TextDecoder().decode(buf.subarray(0, used));
    }
    const path = head.split(" ")[1] ?? "/";
    const remote = conn.remoteAddr;
    const reply = httpResponse(path, name, formatPeer(remote.hostname, remote.port));
    const bytes = new TextEncoder().encode(reply);
    for (let off = 0; off < bytes.length;) off += await conn.write(bytes.subarray(off));
  } catch {
    // the client went away; nothing to answer
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // closed by the timer
    }
  }
}

async function serveTcp(listener: Deno.TcpListener, name: string): Promise<void> {
  for await (const conn of listener) serveConnection(conn, name);
}

function serveUdp(port: number, name: string): Promise<void> {
  const socket = dgram.createSocket({ type: "udp6" });
  socket.on("message", (msg, rinfo) => {
    const asked = new TextDecoder().decode(msg).trim();
    const answer = asked === "client" ? formatPeer(rinfo.address, rinfo.port) : name;
    socket.send(answer, rinfo.port, rinfo.address);
  });
  return new Promise((resolve, reject) => {
    socket.once("error", reject);
    socket.bind(port, "::", () => resolve());
  });
}

async function main(): Promise<void> {
  const { name, ports } = parsePodServerArgs(Deno.args);
  // "::" is dual-stack on Linux (bindv6only=0): one socket takes IPv4 and IPv6.
  const listeners = ports.map((port) => Deno.listen({ hostname: "::", port, transport: "tcp" }));
  await Promise.all(ports.map((p) => serveUdp(p, name)));
  console.log("ready");
  await Promise.all(listeners.map((l) => serveTcp(l, name)));
}

if (import.meta.main) {
  main().catch((err) => {
    console.error(`pod server: ${err}`);
    Deno.exit(1);
  });
}
