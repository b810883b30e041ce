/**
 * Specs of the probe's and pod server's argument and message handling (pure; no namespace).
 *
 * @module
 */

import assert from "node:assert/strict";
import { formatPeer, httpResponse, parsePodServerArgs } from "./pod_server.ts";
import { formatTarget, parseProbeArgs, parseTarget } from "./probe.ts";

Deno.test("parseTarget() splits ip:port and [ipv6]:port", () => {
  assert.deepEqual(parseTarget("10.96.0.10:80"), { host: "10.96.0.10", port: 80 });
  assert.deepEqual(parseTarget("[fd00:10:96::a]:53"), { host: "fd00:10:96::a", port: 53 });
  for (const bad of ["10.96.0.10", "fd00::1:80", "[fd00::1]", "10.0.0.1:0", "10.0.0.1:70000"]) {
    assert.throws(() => parseTarget(bad), /cannot probe/, bad);
  }
  assert.equal(formatTarget("fd00::1", 80), "[fd00::1]:80");
  assert.equal(formatTarget("10.0.0.1", 80), "10.0.0.1:80");
});

Deno.test("parseProbeArgs() applies defaults and bounds every loop", () => {
  assert.deepEqual(parseProbeArgs(["10.0.0.1:80"]), {
    host: "10.0.0.1",
    port: 80,
    proto: "tcp",
    count: 1,
    timeoutMs: 1000,
    ask: "name",
    icmpFromStdin: false,
  });
  const udp = parseProbeArgs([
    "--proto",
    "udp",
    "[fd00::1]:53",
    "--count",
    "5",
    "--timeout-ms",
    "200",
    "--source-port",
    "40000",
    "--icmp-from-stdin",
  ]);
  assert.equal(udp.proto, "udp");
  assert.equal(udp.sourcePort, 40000);
  assert.equal(udp.icmpFromStdin, true);
  assert.throws(() => parseProbeArgs(["10.0.0.1:80", "--count", "100000"]), /1-1000/);
  assert.throws(() => parseProbeArgs(["10.0.0.1:80", "--proto", "sctp"]), /cannot use --proto/);
  assert.throws(() => parseProbeArgs([]), /no target/);
});

Deno.test("pod server names itself and reports the peer without IPv4-mapped notation", () => {
  assert.deepEqual(parsePodServerArgs(["--name", "pod-a", "--ports", "8080,9090"]), {
    name: "pod-a",
    ports: [8080, 9090],
  });
  assert.throws(() => parsePodServerArgs(["--name", "x", "--ports", "0"]), /1-65535/);
  assert.equal(formatPeer("::ffff:192.168.77.2", 4000), "192.168.77.2:4000");
  assert.equal(formatPeer("fd00:77::2", 4000), "[fd00:77::2]:4000");
  const response = httpResponse("/", "pod-a", "1.2.3.4:5");
  assert.ok(response.startsWith("HTTP/1.0 200 OK\r\n"));
  assert.ok(response.endsWith("\r\n\r\npod-a"));
  assert.ok(httpResponse("/client", "pod-a", "1.2.3.4:5").endsWith("\r\n\r\n1.2.3.4:5"));
});
