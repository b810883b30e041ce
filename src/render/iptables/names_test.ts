import assert from "node:assert/strict";
import fc from "fast-check";
import { createHash } from "node:crypto";
import { formatServicePortName, type ServicePortName } from "../../model/service_port.ts";
import { comment, endpointChainName, isServiceChainName, serviceChainNames } from "./names.ts";

const spn = (namespace: string, name: string, port: string, protocol = "TCP"): ServicePortName => ({
  namespace,
  name,
  port,
  protocol: protocol as ServicePortName["protocol"],
});

Deno.test("serviceChainNames() hashes the service-port name like upstream kube-proxy", () => {
  // Values from upstream's proxier_test.go: ns1/svc1:p80 over TCP, endpoint 10.180.0.1:80.
  const names = serviceChainNames(spn("ns1", "svc1", "p80"));
  assert.equal(names.cluster, "KUBE-SVC-XPGD46QRK7WJZT7O");
  assert.equal(names.local, "KUBE-SVL-XPGD46QRK7WJZT7O");
  assert.equal(names.external, "KUBE-EXT-XPGD46QRK7WJZT7O");
  assert.equal(names.firewall, "KUBE-FW-XPGD46QRK7WJZT7O");
  assert.equal(
    endpointChainName(spn("ns1", "svc1", "p80"), "10.180.0.1:80"),
    "KUBE-SEP-SXIVWICOYRO3J4NJ",
  );
});

Deno.test("serviceChainNames() gives each protocol of a port name its own chains", () => {
  const tcp = serviceChainNames(spn("ns", "dns", "dns", "TCP"));
  const udp = serviceChainNames(spn("ns", "dns", "dns", "UDP"));
  assert.notEqual(tcp.cluster, udp.cluster);
});

const anyName = fc.string({ unit: "binary", maxLength: 300 });
const servicePortName = fc.record({
  namespace: anyName,
  name: anyName,
  port: anyName,
  protocol: fc.constantFrom<ServicePortName["protocol"]>("TCP", "UDP", "SCTP"),
});

Deno.test("chain names stay within iptables' 28 characters whatever the object names are", () => {
  const check = (spn: ServicePortName, endpoint: string) => {
    for (
      const name of [...Object.values(serviceChainNames(spn)), endpointChainName(spn, endpoint)]
    ) {
      assert.ok(name.length <= 28, name);
      assert.match(name, /^KUBE-[A-Z]+-[A-Z2-7]{16}$/);
    }
  };
  // The longest names the API server allows, then anything at all: empty, huge, quotes,
  // newlines, iptables syntax, lone surrogates.
  check(spn("n".repeat(63), "s".repeat(63), "p".repeat(15)), "[fd00::1]:80");
  fc.assert(fc.property(servicePortName, anyName, check), { numRuns: 2000 });
});

// Upstream hashes the text `namespace/name:port` + protocol, so names that make the same text
// (namespace `a/b` name `c`, namespace `a` name `b/c`) share chains there and here alike.
Deno.test("serviceChainNames() gives service ports whose names read differently different chains", () => {
  const text = (p: ServicePortName) => `${formatServicePortName(p)} ${p.protocol}`;
  fc.assert(
    fc.property(servicePortName, servicePortName, (a, b) => {
      fc.pre(text(a) !== text(b));
      const [x, y] = [serviceChainNames(a), serviceChainNames(b)];
      for (const kind of ["cluster", "local", "external", "firewall"] as const) {
        assert.notEqual(x[kind], y[kind], `${JSON.stringify(a)} and ${JSON.stringify(b)}`);
      }
    }),
    { numRuns: 2000 },
  );
});

Deno.test("isServiceChainName() recognises per-service chains only", () => {
  assert.ok(isServiceChainName("KUBE-SEP-SXIVWICOYRO3J4NJ"));
  assert.ok(isServiceChainName("KUBE-FW-XPGD46QRK7WJZT7O"));
  assert.ok(!isServiceChainName("KUBE-SERVICES"));
  assert.ok(!isServiceChainName("KUBE-MARK-MASQ"));
  assert.ok(!isServiceChainName("DOCKER"));
});

Deno.test("comment() keeps readable text and cannot end the quote or the line", () => {
  assert.equal(
    comment("ns/web:http -> [fd00::1]:80"),
    '-m comment --comment "ns/web:http -> [fd00::1]:80"',
  );
  assert.equal(comment('a" -j ACCEPT\n-A X'), '-m comment --comment "a_ -j ACCEPT_-A X"');
  assert.equal(comment("x".repeat(400)).length, '-m comment --comment ""'.length + 255);
});

Deno.test("chain names hash exactly like sha256 (upstream's), at any length and for any characters", () => {
  const base32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  const reference = (text: string) => {
    const d = createHash("sha256").update(text).digest();
    let out = "";
    for (let group = 0; group < 2; group++) {
      let bits = 0;
      for (let i = 0; i < 5; i++) bits = bits * 256 + d[group * 5 + i];
      for (let c = 7; c >= 0; c--) out += base32[Math.floor(bits / 2 ** (c * 5)) % 32];
    }
    return out;
  };
  // Lengths across SHA-256's one-, two- and three-block inputs; ASCII and CJK names.
  for (let length = 0; length < 200; length += 7) {
    for (const first of [97, 0x4e00]) {
      const name = Array.from({ length }, (_, i) => String.fromCharCode(first + (i % 26))).join("");
      const spn = { namespace: "ns", name, port: "http", protocol: "TCP" as const };
      assert.equal(
        endpointChainName(spn, "10.0.0.1:80"),
        `KUBE-SEP-${reference(`ns/${name}:http` + "tcp" + "10.0.0.1:80")}`,
      );
    }
  }
});
