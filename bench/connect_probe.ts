/**
 * The data-plane benchmark's client: opens TCP connections to one address, one after another,
 * and reports how long each connection setup took (SYN sent → SYN-ACK received, as seen by
 * `Deno.connect`), in microseconds.
 *
 * Run inside a network namespace as
 * `deno run --no-config --no-lock --allow-net connect_probe.ts IP:PORT --count 500 [--warmup 50]`,
 * or with `--until-stop` to keep connecting until a `stop` line arrives on stdin (it prints
 * `#started` once the warm-up is done; `--max-ms` bounds the run either way, `--interval-ms`
 * paces it).
 * The last stdout line is one JSON object ({@link ConnectReport}).
 *
 * No imports: it must start inside a namespace without reaching any registry.
 *
 * @module
 */

/** What one probe run observed. */
export interface ConnectReport {
  /** Setup time of every successful connection after the warm-up, in microseconds. */
  samplesUs: number[];
  /** Connections that were refused, timed out or failed otherwise. */
  failures: { refused: number; timeout: number; error: number };
  /** Connections attempted after the warm-up. */
  attempts: number;
  /** Wall time of the measured part, in milliseconds. */
  elapsedMs: number;
}

/** Parsed command line. */
export interface ConnectProbeArgs {
  hostname: string;
  port: number;
  count: number;
  warmup: number;
  timeoutMs: number;
  untilStop: boolean;
  maxMs: number;
  /** Pause between two connections, in milliseconds. */
  intervalMs: number;
}

/** Most connections one run may attempt. */
export const MAX_CONNECTIONS = 20_000;
/** Longest run. */
export const MAX_RUN_MS = 120_000;

/** Parses the command line (see the module doc); throws on anything unexpected. */
export function parseConnectProbeArgs(args: readonly string[]): ConnectProbeArgs {
  const parsed: Omit<ConnectProbeArgs, "hostname" | "port"> = {
    count: 100,
    warmup: 20,
    timeoutMs: 1000,
    untilStop: false,
    maxMs: 60_000,
    intervalMs: 0,
  };
  let target: string | undefined;
  const int = (flag: string, value: string | undefined, min: number, max: number) => {
    const n = Number(value);
    if (value === undefined || !Number.isInteger(n) || n < min || n > max) {
      throw new Error(`cannot use ${flag} ${value}: must be an integer ${min}-${max}`);
    }
    return n;
  };
  for (let i = 0; i < args.length; i++) {
    const flag = args[i];
    if (flag === "--until-stop") parsed.untilStop = true;
    else if (flag === "--count") parsed.count = int(flag, args[++i], 1, MAX_CONNECTIONS);
    else if (flag === "--warmup") parsed.warmup = int(flag, args[++i], 0, 1000);
    else if (flag === "--timeout-ms") parsed.timeoutMs = int(flag, args[++i], 1, 10_000);
    else if (flag === "--max-ms") parsed.maxMs = int(flag, args[++i], 1, MAX_RUN_MS);
    else if (flag === "--interval-ms") parsed.intervalMs = int(flag, args[++i], 0, 1000);
    else if (!flag.startsWith("--") && target === undefined) target = flag;
    else throw new Error(`cannot use argument ${flag}`);
  }
  const match = /^(\d+\.\d+\.\d+\.\d+):(\d{1,5})$/.exec(target ?? "");
  if (!match) throw new Error(`cannot connect to ${target}: expected IPv4:port`);
  return { ...parsed, hostname: match[1], port: Number(match[2]) };
}

type Outcome = "ok" | "refused" | "timeout" | "error";

async function connectOnce(args: ConnectProbeArgs): Promise<{ outcome: Outcome; us: number }> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const attempt = Deno.connect({ hostname: args.hostname, port: args.port });
  const timeout = new Promise<"timeout">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), args.timeoutMs);
  });
  try {
    const result = await Promise.race([attempt, timeout]);
    const us = Math.round((performance.now() - started) * 1000);
    if (result === "timeout") {
      // Close the connection if it completes after all.
      attempt.then((conn) => conn.close(), () => {});
      return { outcome: "timeout", us };
    }
    result.close();
    return { outcome: "ok", us };
  } catch (err) {
    const us = Math.round((performance.now() - started) * 1000);
    return { outcome: err instanceof Deno.errors.ConnectionRefused ? "refused" : "error", us };
  } finally {
    clearTimeout(timer);
  }
}

/** Watches stdin for a `stop` line; the returned flag turns true when it arrives or stdin ends. */
function watchStop(): { stopped: () => boolean } {
  let stopped = false;
  (async () => {
    let text = "";
    for await (const chunk of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
      text += chunk;
      if (text.includes("stop")) break;
    }
    stopped = true;
  })().catch(() => stopped = true);
  return { stopped: () => stopped };
}

/** Runs the probe: warm-up connections, then the measured ones. */
export async function runConnectProbe(args: ConnectProbeArgs): Promise<ConnectReport> {
  for (let i = 0; i < args.warmup; i++) await connectOnce(args);
  const stop = args.untilStop ? watchStop() : undefined;
  if (args.untilStop) console.log("#started");
  const report: ConnectReport = {
    samplesUs: [],
    failures: { refused: 0, timeout: 0, error: 0 },
    attempts: 0,
    elapsedMs: 0,
  };
  const started = performance.now();
  const limit = args.untilStop ? MAX_CONNECTIONS : args.count;
  while (report.attempts < limit && performance.now() - started < args.maxMs) {
    if (stop?.stopped()) break;
    const { outcome, us } = await connectOnce(args);
    report.attempts++;
    if (outcome === "ok") report.samplesUs.push(us);
    else report.failures[outcome]++;
    if (args.intervalMs > 0) await new Promise((r) => setTimeout(r, args.intervalMs));
  }
  report.elapsedMs = Math.round(performance.now() - started);
  return report;
}

if (import.meta.main) {
  try {
    const report = await runConnectProbe(parseConnectProbeArgs(Deno.args));
    console.log(JSON.stringify(report));
    Deno.exit(0);
  } catch (err) {
    console.error(`connect probe: ${err instanceof Error ? err.message : err}`);
    Deno.exit(2);
  }
}
