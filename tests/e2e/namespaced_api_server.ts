/**
 * The test API server (`tests/apiserver/server.ts`) run inside a topology's namespace, driven
 * from the test over the process's stdin and stdout.
 *
 * Why: a proxy inside a network namespace cannot reach 127.0.0.1 of the machine's namespace,
 * and nothing may be added to the machine's own namespace. So the API server runs where the
 * proxy runs (the node namespace, on its own 127.0.0.1), and the test sends it commands — create,
 * update, delete, every fault — as JSON lines. The same process also fetches URLs from inside the
 * namespace (`/healthz`, `/metrics`, health-check node ports), which the test cannot reach either.
 *
 * Run as a script (`deno run --no-config --no-lock --allow-net namespaced_api_server.ts`), it
 * starts the server, prints `{"ready":true,"port":N}` and answers one JSON line per command.
 * It imports no npm package, so it starts inside a namespace without a registry.
 *
 * @example
 * ```ts
 * const api = await startNamespacedApiServer(topo.node.ns);
 * await api.create("Service", service({ name: "web", clusterIPs: ["10.96.0.10"] }));
 * await api.dropWatches();
 * const { status } = await api.fetch("http://127.0.0.1:10256/healthz");
 * await api.close();
 * ```
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import type { ObjectKind, RawObject } from "../../src/source/events.ts";
import { type FailOptions, type ObjectRef, TestApiServer } from "../apiserver/server.ts";
import { commandLine } from "../netns/netns.ts";
import { openCommandChannel } from "../apiserver/command_channel.ts";

const SCRIPT = fileURLToPath(import.meta.url);

/** What {@link NamespacedApiServer.fetch} saw: a status and body, or the error. */
export type FetchResult =
  | { readonly status: number; readonly body: string }
  | { readonly error: string };

/** The test API server running in a namespace; every method is one round trip. */
export interface NamespacedApiServer {
  /** Its port on the namespace's 127.0.0.1. */
  readonly port: number;
  /** `http://127.0.0.1:PORT`, valid inside the namespace. */
  readonly url: string;
  create(kind: ObjectKind, object: RawObject): Promise<RawObject>;
  update(kind: ObjectKind, object: RawObject): Promise<RawObject>;
  delete(kind: ObjectKind, ref: ObjectRef | RawObject): Promise<void>;
  /** Ends every open watch abruptly. */
  dropWatches(): Promise<void>;
  /** Stalls every response and watch until {@link release}. */
  stall(): Promise<void>;
  release(): Promise<void>;
  /** Answers the next `n` matching requests with an error status (default 500). */
  failNext(n: number, options?: FailOptions): Promise<void>;
  /** Forgets all history: older watches get 410 Gone. */
  compact(): Promise<void>;
  /** Drops every connection and stops listening, keeping the objects. */
  kill(): Promise<void>;
  restart(): Promise<void>;
  /** How many watch streams are open. */
  watchCount(): Promise<number>;
  /** Fetches `url` from inside the namespace (3 s limit). */
  fetch(url: string): Promise<FetchResult>;
  /** Stops the server and its process. */
  close(): Promise<void>;
}

/** Longest wait for one command's answer. */
const CALL_TIMEOUT_MS = 10_000;

/**
 * Starts the test API server inside namespace `ns` (a `knp-` namespace of a topology) and
 * returns its driver. The topology's cleanup kills the process if {@link NamespacedApiServer.close}
 * was not called.
 */
export async function startNamespacedApiServer(
  ns: string,
  options: { bookmarkIntervalMs?: number } = {},
): Promise<NamespacedApiServer> {
  const argv = commandLine([
    Deno.execPath(),
    "run",
    "--no-config",
    "--no-lock",
    "--allow-net",
    SCRIPT,
    `--bookmark-interval-ms=${options.bookmarkIntervalMs ?? 500}`,
  ], ns);
  const channel = await openCommandChannel<{ port: number }>(
    argv,
    { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" },
    {
      name: "the namespaced API server",
      startTimeoutMs: 15_000,
      callTimeoutMs: CALL_TIMEOUT_MS,
      killAfterMs: 3000,
    },
  );
  const { port } = channel.ready;
  const call = channel.call;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    create: (kind, object) => call("create", kind, object) as Promise<RawObject>,
    update: (kind, object) => call("update", kind, object) as Promise<RawObject>,
    delete: async (kind, ref) => void await call("delete", kind, ref),
    dropWatches: async () => void await call("dropWatches"),
    stall: async () => void await call("stall"),
    release: async () => void await call("release"),
    failNext: async (n, o) => void await call("failNext", n, o ?? {}),
    compact: async () => void await call("compact"),
    kill: async () => void await call("kill"),
    restart: async () => void await call("restart"),
    watchCount: () => call("watchCount") as Promise<number>,
    fetch: (url) => call("fetch", url) as Promise<FetchResult>,
    close: channel.close,
  };
}

/** Runs one command against the server; the script side of {@link startNamespacedApiServer}. */
async function execute(server: TestApiServer, method: string, args: unknown[]): Promise<unknown> {
  const [a, b] = args;
  switch (method) {
    case "create":
      return server.create(a as ObjectKind, b as RawObject);
    case "update":
      return server.update(a as ObjectKind, b as RawObject);
    case "delete":
      return server.delete(a as ObjectKind, b as ObjectRef);
    case "dropWatches":
      return server.dropWatches();
    case "stall":
      return void server.stall();
    case "release":
      return server.release();
    case "failNext":
      return server.failNext(a as number, b as FailOptions);
    case "compact":
      return server.compact();
    case "kill":
      return await server.kill();
    case "restart":
      return await server.restart();
    case "watchCount":
      return server.watchCount;
    case "fetch":
      try {
        const res = await fetch(a as string, { signal: AbortSignal.timeout(3000) });
        return { status: res.status, body: await res.text() };
      } catch (err) {
        return { error: String((err as Error).message ?? err) };
      }
    case "close":
      return await server.close();
    default:
      throw new Error(`unknown command ${method}`);
  }
}

async function serveCommands(): Promise<void> {
  const interval = /^--bookmark-interval-ms=(\d+)$/.exec(Deno.args[0] ?? "")?.[1];
  const server = await TestApiServer.start({ bookmarkIntervalMs: Number(interval ?? 500) });
  const out = (message: unknown) => console.log(JSON.stringify(message));
  out({ ready: true, port: server.port });
  let pending = "";
  for await (const text of Deno.stdin.readable.pipeThrough(new TextDecoderStream())) {
    pending += text;
    let nl: number;
    while ((nl = pending.indexOf("\n")) >= 0) {
      const { id, method, args } = JSON.parse(pending.slice(0, nl));
      pending = pending.slice(nl + 1);
      try {
        out({ id, ok: true, result: await execute(server, method, args) });
      } catch (err) {
        out({ id, ok: false, error: String((err as Error).message ?? err) });
      }
      if (method === "close") Deno.exit(0);
    }
  }
  await server.close();
  Deno.exit(0);
}

if (import.meta.main) await serveCommands();
