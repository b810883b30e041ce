/**
 * The driver side of a test server run in another process (usually inside a network
 * namespace): commands as JSON lines on its stdin, answers as JSON lines on its stdout, the
 * first line `{"ready": true, …}` once it serves. Used by the namespaced test API server and
 * the daemon benchmark's API server.
 *
 * @module
 */

type Reply = { id: number; ok: true; result?: unknown } | { id: number; ok: false; error: string };

/** A started process and the commands it takes. */
export interface CommandChannel<R> {
  /** The `ready` line, as the process wrote it. */
  readonly ready: R;
  /** Sends one command; throws with the process's error when it answers one. */
  call(method: string, ...args: unknown[]): Promise<unknown>;
  /** Sends `close`, ends stdin and waits for the process (SIGKILL after `killAfterMs`). */
  close(): Promise<void>;
}

/** Options of {@link openCommandChannel}. */
export interface CommandChannelOptions {
  /** Names the process in errors, e.g. "the namespaced API server". */
  readonly name: string;
  /** Longest wait for the ready line, ms. */
  readonly startTimeoutMs: number;
  /** Longest wait for one answer, ms. */
  readonly callTimeoutMs: number;
  /** How long `close` waits before SIGKILL, ms. */
  readonly killAfterMs: number;
}

/**
 * Spawns `argv` and waits for its ready line. The process is killed when it does not become
 * ready in time or exits first (the error carries its stderr).
 */
export async function openCommandChannel<R>(
  argv: readonly string[],
  env: Record<string, string>,
  options: CommandChannelOptions,
): Promise<CommandChannel<R>> {
  const { name } = options;
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    env,
  }).spawn();
  const stderr = new Response(child.stderr).text();
  const writer = child.stdin.getWriter();
  const waiting = new Map<number, (reply: Reply) => void>();
  let readied!: (ready: R) => void;
  let failed!: (error: Error) => void;
  const started = new Promise<R>((resolve, reject) => {
    readied = resolve;
    failed = reject;
  });
  const reader = (async () => {
    let pending = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      pending += text;
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        const message = JSON.parse(line) as { ready?: boolean } & Partial<Reply>;
        if (message.ready) readied(message as R);
        else if (typeof message.id === "number") waiting.get(message.id)?.(message as Reply);
      }
    }
    const error = new Error(`${name} exited: ${await stderr}`);
    failed(error);
    for (const answer of waiting.values()) answer({ id: -1, ok: false, error: error.message });
  })();
  const timer = setTimeout(
    () => failed(new Error(`${name} did not start in ${options.startTimeoutMs} ms`)),
    options.startTimeoutMs,
  );
  let ready: R;
  try {
    ready = await started;
  } catch (err) {
    child.kill("SIGKILL");
    throw err;
  } finally {
    clearTimeout(timer);
  }

  let nextId = 1;
  const call = async (method: string, ...args: unknown[]): Promise<unknown> => {
    const id = nextId++;
    const reply = await new Promise<Reply>((resolve) => {
      const limit = setTimeout(() => {
        waiting.delete(id);
        resolve({ id, ok: false, error: `no answer to ${method} in ${options.callTimeoutMs} ms` });
      }, options.callTimeoutMs);
      waiting.set(id, (r) => {
        clearTimeout(limit);
        waiting.delete(id);
        resolve(r);
      });
      writer.write(new TextEncoder().encode(JSON.stringify({ id, method, args }) + "\n"))
        .catch(() => {});
    });
    if (!reply.ok) throw new Error(`${name}: ${method} failed: ${reply.error}`);
    return reply.result;
  };
  let closing: Promise<void> | undefined;
  return {
    ready,
    call,
    close: () =>
      closing ??= (async () => {
        await call("close").catch(() => {});
        await writer.close().catch(() => {});
        const killer = setTimeout(() => child.kill("SIGKILL"), options.killAfterMs);
        await child.status;
        clearTimeout(killer);
        await reader.catch(() => {});
      })(),
  };
}
