/**
 * The probe: a script run inside a namespace that tries to reach `ip:port` a bounded number of
 * times, each time over a NEW connection, and prints one JSON array of classified outcomes.
 *
 * ```
 * deno run --allow-net probe.ts 10.96.0.10:80 --proto tcp --count 5 --timeout-ms 500
 * deno run --allow-net probe.ts '[fd00:10:96::10]:80' --proto udp --source-port 40000
 * deno run --allow-net probe.ts 10.96.0.10:80 --source-address 192.168.77.10 --count 50
 * ```
 *
 * TCP: connect, send `GET / HTTP/1.0`, read the body. UDP: send one datagram, await one reply.
 * Each attempt ends as `ok` (with the body), `refused` (RST, or ICMP destination unreachable),
 * `timeout` or `error`. Only TCP learns about ICMP from its socket: Deno cannot open a connected
 * UDP socket, so an unconnected one never sees ICMP errors. With `--icmp-from-stdin` the probe
 * instead takes hints from its parent, which watches the namespace's ICMP counters (see
 * `probe()` in `topology.ts`): it prints `#ready`, waits for `go`, and treats each `icmp` line as
 * "a destination-unreachable arrived" for the UDP attempt in flight. Without it, a rejected UDP
 * attempt reads as `timeout`.
 *
 * No imports beyond `node:` built-ins: it must start inside a namespace without a registry.
 *
 * @module
 */

import dgram from "node:dgram";
import net from "node:net";

/** Transport of a probe. */
export type ProbeProto = "tcp" | "udp";

/** What the server is asked: its name (default) or the client address it saw. */
export type ProbeAsk = "name" | "client";

/**
 * How one attempt ended: `ok` with the reply body; `refused` with what said no (`ECONNREFUSED`
 * for a TCP RST or ICMP port-unreachable, `EHOSTUNREACH`/`ENETUNREACH`/`EACCES` for other ICMP
 * errors, `icmp-unreachable` for UDP); `timeout` when nothing came back; `error` otherwise.
 */
export type AttemptOutcome =
  | { outcome: "ok"; body: string }
  | { outcome: "refused"; detail: string }
  | { outcome: "timeout" }
  | { outcome: "error"; message: string };

/** The outcome of one attempt, with `ms`: how long the attempt took. */
export type ProbeResult = AttemptOutcome & { ms: number };

/** Parsed probe arguments. */
export interface ProbeArgs {
  host: string;
  port: number;
  proto: ProbeProto;
  count: number;
  timeoutMs: number;
  sourcePort?: number;
  /** Local address of every attempt (one of the namespace's), so one namespace is many clients. */
  sourceAddress?: string;
  ask: ProbeAsk;
  icmpFromStdin: boolean;
}

/** Upper bounds keeping every probe run short. */
export const MAX_COUNT = 1000;
/** Longest wait of one attempt. */
export const MAX_TIMEOUT_MS = 30_000;

/**
 * Splits a target `ip:port` or `[ipv6]:port` into host and port.
 *
 * @example
 * ```ts
 * parseTarget("[fd00:10:96::10]:80"); // { host: "fd00:10:96::10", port: 80 }
 * ```
 */
export function parseTarget(target: string): { host: string; port: number } {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([0-9.]+)):(\d{1,5})$/.exec(target);
  const port = Number(match?.[3]);
  if (!match || port < 1 || port > 65535) {
    throw new Error(`cannot probe ${target}: expected ip:port or [ipv6]:port`);
  }
  return { host: match[1] ?? match[2], port };
}

/** Formats host and port as a probe target (brackets around IPv6). */
export function formatTarget(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

function intArg(name: string, value: string | undefined, min: number, max: number): number {
  const n = Number(value);
  if (value === undefined || !Number.isInteger(n) || n < min || n > max) {
    throw new Error(`cannot use ${name} ${value}: must be an integer ${min}-${max}`);
  }
  return n;
}

/** Parses the probe's command line (see the module doc); throws on anything unexpected. */
export function parseProbeArgs(args: readonly string[]): ProbeArgs {
  let target: string | undefined;
  const parsed: Omit<ProbeArgs, "host" | "port"> = {
    proto: "tcp",
    count: 1,
    timeoutMs: 1000,
    ask: "name",
    icmpFromStdin: false,
  };
  for (let i = 0; i < args.length; i++) {
    const flag = args[i];
    const value = args[i + 1];
    if (flag === "--icmp-from-stdin") {
      parsed.icmpFromStdin = true;
      continue;
    }
    if (!flag.startsWith("--")) {
      if (target !== undefined) throw new Error(`cannot use a second target ${flag}`);
      target = flag;
      continue;
    }
    i++;
    if (flag === "--proto" && (value === "tcp" || value === "udp")) parsed.proto = value;
    else if (flag === "--ask" && (value === "name" || value === "client")) parsed.ask = value;
    else if (flag === "--count") parsed.count = intArg(flag, value, 1, MAX_COUNT);
    else if (flag === "--timeout-ms") parsed.timeoutMs = intArg(flag, value, 1, MAX_TIMEOUT_MS);
    else if (flag === "--source-port") parsed.sourcePort = intArg(flag, value, 1, 65535);
    else if (flag === "--source-address" && net.isIP(value ?? "") !== 0) {
      parsed.sourceAddress = value;
    } else throw new Error(`cannot use ${flag} ${value ?? ""}`.trim());
  }
  if (target === undefined) throw new Error("cannot probe: no target ip:port given");
  return { ...parseTarget(target), ...parsed };
}

/**
 * Errors that mean "the far side (or a router) said no": RST or ICMP unreachable. IPv6
 * administratively-prohibited arrives as EACCES. Linux treats some ICMP errors as soft for TCP
 * (e.g. ICMPv6 "no route"): the SYN is retried and the attempt ends as `timeout`.
 */
const REFUSED_CODES = new Set([
  "ECONNREFUSED",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EHOSTDOWN",
  "EACCES",
]);

function errorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** The body of an HTTP response, or an error result when it is not a 200. */
function httpBody(raw: string): { body: string } | { message: string } {
  const split = raw.indexOf("\r\n\r\n");
  const status = raw.slice(0, raw.indexOf("\r\n"));
  if (split < 0 || !/^HTTP\/1\.[01] 200 /.test(status)) {
    return { message: `unexpected response ${JSON.stringify(raw.slice(0, 80))}` };
  }
  return { body: raw.slice(split + 4) };
}

function tcpAttempt(args: ProbeArgs): Promise<ProbeResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let settled = false;
    const chunks: Uint8Array[] = [];
    const socket = net.connect({
      host: args.host,
      port: args.port,
      ...(args.sourcePort === undefined ? {} : { localPort: args.sourcePort }),
      ...(args.sourceAddress === undefined ? {} : { localAddress: args.sourceAddress }),
    });
    const finish = (r: AttemptOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ ...r, ms: Math.round(performance.now() - started) });
    };
    const timer = setTimeout(() => finish({ outcome: "timeout" }), args.timeoutMs);
    const path = args.ask === "client" ? "/client" : "/";
    socket.on("connect", () => socket.write(`GET ${path} HTTP/1.0\r\n\r\n`));
    socket.on("data", (chunk: Uint8Array) => chunks.push(chunk));
    socket.on("end", () => {
      const raw = new TextDecoder().decode(concat(chunks));
      const parsed = httpBody(raw);
      finish(
        "body" in parsed ? { outcome: "ok", body: parsed.body } : {
          outcome: "error",
          message: parsed.message,
        },
      );
    });
    socket.on("error", (err: unknown) => {
      const code = errorCode(err);
      if (code !== undefined && REFUSED_CODES.has(code)) {
        finish({ outcome: "refused", detail: code });
      } else finish({ outcome: "error", message: code ?? String(err) });
    });
  });
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

/** Called by the stdin reader when the parent reports an ICMP destination-unreachable. */
let onIcmp: (() => void) | undefined;

function udpAttempt(args: ProbeArgs): Promise<ProbeResult> {
  const started = performance.now();
  return new Promise((resolve) => {
    let settled = false;
    const socket = dgram.createSocket({ type: args.host.includes(":") ? "udp6" : "udp4" });
    const finish = (r: AttemptOutcome) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      onIcmp = undefined;
      try {
        socket.close();
      } catch {
        // not bound yet
      }
      resolve({ ...r, ms: Math.round(performance.now() - started) });
    };
    const timer = setTimeout(() => finish({ outcome: "timeout" }), args.timeoutMs);
    socket.on("message", (msg: Uint8Array) => {
      finish({ outcome: "ok", body: new TextDecoder().decode(msg) });
    });
    socket.on("error", (err: unknown) => {
      const code = errorCode(err);
      if (code !== undefined && REFUSED_CODES.has(code)) {
        finish({ outcome: "refused", detail: code });
      } else finish({ outcome: "error", message: code ?? String(err) });
    });
    socket.bind(args.sourcePort ?? 0, args.sourceAddress, () => {
      onIcmp = () => finish({ outcome: "refused", detail: "icmp-unreachable" });
      socket.send(args.ask === "client" ? "client" : "name", args.port, args.host);
    });
  });
}

/** Reads the parent's lines from stdin; resolves once `go` arrived. */
function listenToParent(): Promise<void> {
  return new Promise((resolve, reject) => {
    (async () => {
      let pending = "";
      for await (const text of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
        pending += text;
        let nl: number;
        while ((nl = pending.indexOf("\n")) >= 0) {
          const line = pending.slice(0, nl).trim();
          pending = pending.slice(nl + 1);
          if (line === "go") resolve();
          else if (line === "icmp") onIcmp?.();
        }
      }
      reject(new Error("stdin closed before the parent said go"));
    })().catch(reject);
  });
}

/** Runs every attempt of a probe in order and returns their outcomes. */
export async function runProbe(args: ProbeArgs): Promise<ProbeResult[]> {
  const results: ProbeResult[] = [];
  for (let i = 0; i < args.count; i++) {
    results.push(await (args.proto === "tcp" ? tcpAttempt(args) : udpAttempt(args)));
  }
  return results;
}

async function main(): Promise<void> {
  const args = parseProbeArgs(Deno.args);
  if (args.icmpFromStdin) {
    const go = listenToParent();
    console.log("#ready");
    await go;
  }
  console.log(JSON.stringify(await runProbe(args)));
}

if (import.meta.main) {
  main().then(() => Deno.exit(0), (err) => {
    console.error(`probe: ${err instanceof Error ? err.message : err}`);
    Deno.exit(2);
  });
}
