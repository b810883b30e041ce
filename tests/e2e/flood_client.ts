/**
 * The clients of the connection-flood spec, run inside a namespace as scripts (no npm imports:
 * `deno run --no-config --no-lock --allow-net flood_client.ts MODE …`), each printing JSON lines.
 *
 * - `flood HOST PORT COUNT HOLD_MS`: opens COUNT half-open connections (half a request head,
 *   then silence) and COUNT idle keep-alive ones (one whole request, its answer awaited, then
 *   silence) to HOST:PORT, alternately, from 128 workers; prints `{"opened":N,"failed":F,"ms":T}`,
 *   holds every socket for HOLD_MS (whatever the server did to it), closes them and prints
 *   `{"closed":N}`. Awaiting the keep-alive answers paces the opening to what the server takes:
 *   a client that connects faster than the server accepts overflows the kernel's accept queue
 *   (511 for a Deno listener), whose SYNs are then dropped for everyone, probes included, and
 *   retried after 1 s — a limit of every TCP server, not what this flood is about.
 * - `probe DURATION_MS URL…`: every 200 ms, one `GET` per URL on a new connection
 *   (`Connection: close`, 3 s limit); prints `{"at":A,"url":…,"status":S,"ms":T,"connectMs":C}`
 *   (status 0 and an `error` when none came) per request, then `{"done":true}`.
 * - `get URL`: one `GET`; prints `{"status":S,"body":…,"connectMs":C}`.
 *
 * Requests are written by hand over `Deno.connect` rather than with `fetch`, so each probe is one
 * fresh connection and its time is connect + request + answer, nothing pooled.
 *
 * @module
 */

const encoder = new TextEncoder();
const CONCURRENT_CONNECTS = 128;
/** Longest wait for a keep-alive answer before opening the next connection. */
const ANSWER_WAIT_MS = 5_000;
const PROBE_INTERVAL_MS = 200;
const PROBE_TIMEOUT_MS = 3_000;

function print(value: unknown): void {
  console.log(JSON.stringify(value));
}

async function flood(host: string, port: number, count: number, holdMs: number): Promise<void> {
  const held: Deno.Conn[] = [];
  let failed = 0;
  const head = `GET /healthz HTTP/1.1\r\nHost: ${host}:${port}\r\n`;
  const open = async (whole: boolean) => {
    try {
      const conn = await Deno.connect({ hostname: host, port });
      held.push(conn);
      await conn.write(encoder.encode(whole ? `${head}\r\n` : head));
      if (whole) {
        // The answer, or the server closing the connection to make room; nothing more is read.
        const timer = setTimeout(() => conn.close(), ANSWER_WAIT_MS);
        await conn.read(new Uint8Array(1024)).catch(() => null);
        clearTimeout(timer);
      }
    } catch {
      failed++;
    }
  };
  const kinds = Array.from({ length: 2 * count }, (_, i) => i % 2 === 0);
  const started = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENT_CONNECTS }, async () => {
      while (next < kinds.length) await open(kinds[next++]);
    }),
  );
  print({ opened: held.length, failed, ms: Date.now() - started });
  await new Promise((r) => setTimeout(r, holdMs));
  for (const conn of held) {
    try {
      conn.close();
    } catch {
      // closed already
    }
  }
  print({ closed: held.length });
}

/** One GET on a new connection; the status and body, or the error. */
async function get(
  url: string,
): Promise<{ status: number; body: string; connectMs: number; error?: string }> {
  const { hostname, port, pathname } = new URL(url);
  const host = hostname.replace(/^\[|\]$/g, "");
  let conn: Deno.Conn | undefined;
  const timer = setTimeout(() => conn?.close(), PROBE_TIMEOUT_MS);
  const started = performance.now();
  let connectMs = -1;
  try {
    conn = await Deno.connect({ hostname: host, port: Number(port) });
    connectMs = Math.round(performance.now() - started);
    await conn.write(
      encoder.encode(`GET ${pathname} HTTP/1.1\r\nHost: ${hostname}\r\nConnection: close\r\n\r\n`),
    );
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(4096);
    for (let n = await conn.read(buf); n !== null; n = await conn.read(buf)) {
      chunks.push(buf.slice(0, n));
    }
    const text = new TextDecoder().decode(
      chunks.reduce((all, c) => {
        const out = new Uint8Array(all.length + c.length);
        out.set(all);
        out.set(c, all.length);
        return out;
      }, new Uint8Array(0)),
    );
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? 0);
    const body = text.slice(text.indexOf("\r\n\r\n") + 4);
    return status === 0
      ? { status, body, connectMs, error: "no status line" }
      : { status, body, connectMs };
  } catch (err) {
    return { status: 0, body: "", connectMs, error: (err as Error).message };
  } finally {
    clearTimeout(timer);
    try {
      conn?.close();
    } catch {
      // closed by the timer or the server
    }
  }
}

async function probe(durationMs: number, urls: string[]): Promise<void> {
  const begin = Date.now();
  const end = begin + durationMs;
  while (Date.now() < end) {
    for (const url of urls) {
      const started = performance.now();
      const { status, connectMs, error } = await get(url);
      const ms = Math.round(performance.now() - started);
      print({ at: Date.now() - begin, url, status, ms, connectMs, error });
    }
    await new Promise((r) => setTimeout(r, PROBE_INTERVAL_MS));
  }
  print({ done: true });
}

if (import.meta.main) {
  const [mode, ...args] = Deno.args;
  if (mode === "flood") {
    await flood(args[0], Number(args[1]), Number(args[2]), Number(args[3]));
  } else if (mode === "probe") await probe(Number(args[0]), args.slice(1));
  else if (mode === "get") print(await get(args[0]));
  else throw new Error(`unknown mode ${mode}: flood, probe or get`);
}
