/**
 * The API server of the daemon benchmark: the test API server (`tests/apiserver/server.ts`)
 * holding a synthetic cluster, run as its own process inside a `knp-bench-` namespace and
 * driven over stdin/stdout, one JSON line per command.
 *
 * Why a process in a namespace: the proxy under test runs in a throwaway namespace and cannot
 * reach the machine's 127.0.0.1, and nothing may be added to the machine's own namespace. The
 * server's namespace is joined to each run's node namespace by a veth pair, so the proxy lists
 * and watches over a real (virtual) link, and this process can also time `GET /metrics` on the
 * node, which the benchmark's own process cannot reach.
 *
 * The process generates the cluster itself (same options, same objects as the benchmark's own
 * copy: the generator is deterministic) and loads it in bulk, so nothing large crosses the pipe.
 *
 * @example
 * ```ts
 * const api = await startBenchApiServer("knp-bench-1a2b3c-api", { services: 10_000, endpoints: 10, seed: 1 });
 * await api.change(42, true); // one more endpoint in service 42's first slice
 * const traffic = await api.traffic();
 * await api.close();
 * ```
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { TestApiServer, type Traffic } from "../tests/apiserver/server.ts";
import { commandLine } from "../tests/netns/netns.ts";
import { openCommandChannel } from "../tests/apiserver/command_channel.ts";
import { extraEndpointIP, generateCluster, withExtraEndpoint } from "./cluster.ts";
import { DENO_ENV } from "./probe_runner.ts";

const SCRIPT = fileURLToPath(import.meta.url);
const DENO_CONFIG = fileURLToPath(new URL("../deno.json", import.meta.url));

/** The port the server listens on inside its namespace (any address). */
export const BENCH_API_PORT = 6443;

/** What the server process is started with. */
export interface BenchApiOptions {
  services: number;
  endpoints: number;
  seed: number;
  /** Whether watch-list is served (off: a 422 as from an older server). Default true. */
  watchList?: boolean;
}

/** One timed GET made from the server's namespace. */
export interface TimedFetch {
  /** HTTP status, or 0 when the request failed (then `error` says why). */
  status: number;
  /** Body bytes. */
  bytes: number;
  /** Request sent → whole body read, ms. */
  ms: number;
  error?: string;
}

/** The server process; every method is one round trip over its stdin/stdout. */
export interface BenchApiServer {
  /** Objects loaded (Node, ServiceCIDR, Services, EndpointSlices). */
  readonly objects: number;
  /**
   * Changes service `index`'s first EndpointSlice on the server: `add` gives it one more
   * endpoint, otherwise it goes back to its generated content. Resolves once stored (watchers
   * have been sent the event).
   */
  change(index: number, add: boolean): Promise<void>;
  /** What the server served since the start or the last {@link resetTraffic}. */
  traffic(): Promise<Traffic>;
  resetTraffic(): Promise<void>;
  /** GETs `url` from the server's namespace and times it (`timeoutMs`, default 30 000). */
  fetch(url: string, timeoutMs?: number): Promise<TimedFetch>;
  /** Stops the server and its process. */
  close(): Promise<void>;
}

/** Longest wait for one command's answer (a fetch has its own, shorter limit). */
const CALL_TIMEOUT_MS = 60_000;
/** Longest wait for the process to generate and load the cluster. */
const START_TIMEOUT_MS = 120_000;

/**
 * Starts the server process in namespace `ns`, listening on every address of it at
 * {@link BENCH_API_PORT}, and waits until it holds the cluster. Dependencies must be cached
 * already (the process runs with `--cached-only`: a namespace cannot reach a registry).
 */
export async function startBenchApiServer(
  ns: string,
  options: BenchApiOptions,
): Promise<BenchApiServer> {
  const argv = commandLine([
    Deno.execPath(),
    "run",
    "--cached-only",
    `--config=${DENO_CONFIG}`,
    "-A",
    SCRIPT,
    `--services=${options.services}`,
    `--endpoints=${options.endpoints}`,
    `--seed=${options.seed}`,
    `--watch-list=${options.watchList ?? true}`,
  ], ns);
  const channel = await openCommandChannel<{ objects: number }>(argv, { ...DENO_ENV }, {
    name: "the benchmark's API server",
    startTimeoutMs: START_TIMEOUT_MS,
    callTimeoutMs: CALL_TIMEOUT_MS,
    killAfterMs: 5000,
  });
  const { objects } = channel.ready;
  const call = channel.call;
  return {
    objects,
    change: async (index, add) => void await call("change", index, add),
    traffic: () => call("traffic") as Promise<Traffic>,
    resetTraffic: async () => void await call("resetTraffic"),
    fetch: (url, timeoutMs = 30_000) => call("fetch", url, timeoutMs) as Promise<TimedFetch>,
    close: channel.close,
  };
}

/** The script side: holds the cluster and answers commands until `close` or end of input. */
async function serve(): Promise<void> {
  const flags = new Map(
    Deno.args.map((arg) => /^--([a-z-]+)=(.*)$/.exec(arg)).filter((m) => m !== null)
      .map((m) => [m![1], m![2]]),
  );
  const cluster = generateCluster({
    services: Number(flags.get("services")),
    endpoints: Number(flags.get("endpoints")),
    seed: Number(flags.get("seed") ?? 1),
  });
  // Bookmarks about once a minute, as the real server sends them.
  const server = await TestApiServer.start({
    hostname: "0.0.0.0",
    port: BENCH_API_PORT,
    bookmarkIntervalMs: 60_000,
    watchList: flags.get("watch-list") !== "false",
  });
  const slices = cluster.slices.flat();
  server.load("Node", [cluster.node]);
  server.load("ServiceCIDR", [cluster.serviceCIDR]);
  server.load("Service", cluster.services);
  server.load("EndpointSlice", slices);
  const out = (message: unknown) => console.log(JSON.stringify(message));
  out({ ready: true, objects: 2 + cluster.services.length + slices.length });

  const execute = async (method: string, args: unknown[]): Promise<unknown> => {
    switch (method) {
      case "change": {
        const [index, add] = args as [number, boolean];
        const original = cluster.slices[index][0];
        const slice = add ? withExtraEndpoint(original, extraEndpointIP(index % 65536)) : original;
        server.update("EndpointSlice", slice);
        return undefined;
      }
      case "traffic":
        return server.traffic();
      case "resetTraffic":
        return server.resetTraffic();
      case "fetch":
        return await timedFetch(args[0] as string, args[1] as number);
      case "close":
        return await server.close();
      default:
        throw new Error(`unknown command ${method}`);
    }
  };
  let pending = "";
  for await (const text of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const { id, method, args } = JSON.parse(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
      try {
        out({ id, ok: true, result: await execute(method, args) });
      } catch (err) {
        out({ id, ok: false, error: String((err as Error).message ?? err) });
      }
      if (method === "close") Deno.exit(0);
    }
  }
  await server.close();
  Deno.exit(0);
}

async function timedFetch(url: string, timeoutMs: number): Promise<TimedFetch> {
  const started = performance.now();
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = await response.arrayBuffer();
    return { status: response.status, bytes: body.byteLength, ms: performance.now() - started };
  } catch (err) {
    return {
      status: 0,
      bytes: 0,
      ms: performance.now() - started,
      error: String((err as Error).message ?? err),
    };
  }
}

if (import.meta.main) await serve();
