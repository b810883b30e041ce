import assert from "node:assert/strict";
import { parseConnectProbeArgs, runConnectProbe } from "./connect_probe.ts";

Deno.test("parseConnectProbeArgs() reads the target and every flag", () => {
  assert.deepEqual(
    parseConnectProbeArgs([
      "10.96.0.10:80",
      "--count",
      "50",
      "--warmup",
      "5",
      "--interval-ms",
      "2",
    ]),
    {
      hostname: "10.96.0.10",
      port: 80,
      count: 50,
      warmup: 5,
      timeoutMs: 1000,
      untilStop: false,
      maxMs: 60_000,
      intervalMs: 2,
    },
  );
});

Deno.test("parseConnectProbeArgs() refuses a missing target and out-of-range counts", () => {
  assert.throws(() => parseConnectProbeArgs(["--count", "5"]), /expected IPv4:port/);
  assert.throws(() => parseConnectProbeArgs(["10.0.0.1:80", "--count", "0"]), /--count/);
  assert.throws(() => parseConnectProbeArgs(["10.0.0.1:80", "--bogus"]), /--bogus/);
});

Deno.test("runConnectProbe() times every connection to a listening port on loopback", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepting = (async () => {
    for await (const conn of listener) conn.close();
  })();
  try {
    const args = parseConnectProbeArgs([`127.0.0.1:${listener.addr.port}`, "--count", "20"]);
    const report = await runConnectProbe({ ...args, warmup: 2 });
    assert.equal(report.attempts, 20);
    assert.equal(report.samplesUs.length, 20);
    assert.ok(report.samplesUs.every((us) => us >= 0 && us < 1_000_000));
  } finally {
    listener.close();
    await accepting.catch(() => {});
  }
});

Deno.test("runConnectProbe() counts a closed port as refused, not as a sample", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = listener.addr.port;
  listener.close();
  const args = parseConnectProbeArgs([`127.0.0.1:${port}`, "--count", "3", "--warmup", "0"]);
  const report = await runConnectProbe(args);
  assert.deepEqual(report.failures, { refused: 3, timeout: 0, error: 0 });
  assert.equal(report.samplesUs.length, 0);
});
