/**
 * Specs of the daemon's health and metrics servers at start: a port still held by another
 * process (the outgoing kube-proxy) is bound once it is free, or fails the start with
 * `bindAddressHardFail`.
 *
 * @module
 */
import assert from "node:assert/strict";
import { type Config, DEFAULT_CONFIG } from "../config/config.ts";
import { createLogger } from "../log.ts";
import { ServeError } from "../server/serve.ts";
import { FakeClock } from "./clock.ts";
import { daemonParts, startServers } from "./daemon_servers.ts";

/** A port of 127.0.0.1 held by the test, as the outgoing kube-proxy holds 10249. */
function holdPort(): { port: number; release(): void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let held = true;
  const release = () => {
    if (held) listener.close();
    held = false;
  };
  return { port: (listener.addr as Deno.NetAddr).port, release };
}

function setUp(overrides: Partial<Config>) {
  const lines: string[] = [];
  const log = createLogger({ write: (line) => lines.push(line) });
  const config: Config = { ...DEFAULT_CONFIG, healthzBindAddress: "", ...overrides };
  // A source that records no Events (the file source's kind).
  const source = { start: () => Promise.resolve(), stop: () => Promise.resolve() };
  const daemon = daemonParts({ config, log, source }, new FakeClock());
  return { config, daemon, log, lines };
}

Deno.test("a metrics port in use is tried again until it is free, then served", async () => {
  const held = holdPort();
  const { config, daemon, log, lines } = setUp({
    metricsBindAddress: `127.0.0.1:${held.port}`,
  });
  const servers = startServers(config, daemon, log, { retryMs: 100 });
  try {
    assert.equal(servers.length, 1, "the server being retried is returned, to be closed");
    assert.ok(
      lines.some((l) =>
        l.startsWith("E") && l.includes(`cannot serve metrics on 127.0.0.1:${held.port}`) &&
        l.includes("trying again every 0.1 s")
      ),
      lines.join("\n"),
    );
    held.release();
    const deadline = Date.now() + 10_000;
    let status = 0;
    while (Date.now() < deadline) {
      status = await fetch(`http://127.0.0.1:${held.port}/healthz`)
        .then(async (r) => (await r.body?.cancel(), r.status))
        .catch(() => 0);
      if (status === 200) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(status, 200, "served once the port was free");
    assert.ok(lines.some((l) => l.includes(`serving metrics on 127.0.0.1:${held.port}`)));
  } finally {
    held.release();
    await Promise.all(servers.map((s) => s.close()));
  }
});

Deno.test("closing a server still being retried stops the retries", async () => {
  const held = holdPort();
  const { config, daemon, log, lines } = setUp({ metricsBindAddress: `127.0.0.1:${held.port}` });
  const servers = startServers(config, daemon, log, { retryMs: 50 });
  await Promise.all(servers.map((s) => s.close()));
  const failures = lines.length;
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(lines.length, failures, "no attempt after close");
  held.release();
});

Deno.test("with bindAddressHardFail a port in use fails the start with one error naming it", () => {
  const held = holdPort();
  try {
    const { config, daemon, log } = setUp({
      metricsBindAddress: `127.0.0.1:${held.port}`,
      bindAddressHardFail: true,
    });
    assert.throws(
      () => startServers(config, daemon, log),
      (err: unknown) =>
        err instanceof ServeError &&
        err.message.startsWith(`cannot serve metrics on 127.0.0.1:${held.port}: `) &&
        err.message.endsWith("(bindAddressHardFail is set)") && !err.message.includes("\n"),
    );
  } finally {
    held.release();
  }
});
