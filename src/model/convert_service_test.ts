import assert from "node:assert/strict";
import { service } from "../../tests/fixtures/objects.ts";
import { convertService } from "./convert_service.ts";

Deno.test("convertService() turns each spec.ports entry into a service port", () => {
  const result = convertService(service({
    name: "web",
    clusterIPs: ["10.96.0.10", "fd00:10:96::a"],
    ports: [{ name: "http", port: 80 }, { name: "dns", port: 53, protocol: "UDP" }],
  }));
  assert.ok(result.ok);
  assert.deepEqual(result.ports.map((p) => [p.name.port, p.name.protocol, p.port]), [
    ["http", "TCP", 80],
    ["dns", "UDP", 53],
  ]);
  assert.deepEqual(result.ports[0].clusterIPs, ["10.96.0.10", "fd00:10:96::a"]);
});

Deno.test("convertService() skips a port out of range, keeps the others and says which", () => {
  const result = convertService(service({
    name: "web",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "a", port: 80 }, { name: "b", port: 70000 }],
  }));
  assert.ok(result.ok);
  assert.deepEqual(result.ports.map((p) => p.name.port), ["a"]);
  assert.deepEqual(result.warnings, [
    "ignoring part of Service default/web: spec.ports[1].port is 70000, must be 1-65535: " +
    "port skipped",
  ]);
});

Deno.test("convertService() refuses a Service without any usable cluster IP", () => {
  const result = convertService(service({ name: "web", clusterIPs: ["10.0.0.300"] }));
  assert.equal(
    !result.ok && result.message,
    'cannot use Service default/web: spec.clusterIPs[0] "10.0.0.300" is not a valid IP address, ' +
      "and no other cluster IP is usable",
  );
});

Deno.test("convertService() reads fields leniently like upstream: sloppy IPs, bad entries skipped", () => {
  const result = convertService(service({
    name: "web",
    type: "LoadBalancer",
    clusterIPs: ["010.096.000.010", "not-an-ip", "fd00:10:96::a"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
    spec: {
      externalIPs: ["203.0.113.010", "1.2.3", ""],
      loadBalancerSourceRanges: [" 192.168.0.0/24", "10.0.0.0/33", "fd00::/8 "],
      sessionAffinity: "Sticky",
    },
    status: { loadBalancer: { ingress: [{ ip: "5.6.7.8" }, { ip: "5.6.7" }] } },
  }));
  assert.ok(result.ok);
  const [port] = result.ports;
  assert.deepEqual(port.clusterIPs, ["10.96.0.10", "fd00:10:96::a"]);
  assert.deepEqual(port.externalIPs, ["203.0.113.10"]);
  assert.deepEqual(port.loadBalancerSourceRanges, ["192.168.0.0/24", "fd00::/8"]);
  assert.deepEqual(port.loadBalancerIPs, ["5.6.7.8"]);
  assert.equal(port.sessionAffinity, null);
  const prefix = "ignoring part of Service default/web: ";
  assert.deepEqual(
    result.warnings,
    [
      'spec.clusterIPs[1] "not-an-ip" is not a valid IP address',
      'spec.externalIPs[1] "1.2.3" is not a valid IP address',
      'status.loadBalancer.ingress[1].ip "5.6.7" is not a valid IP address',
      'spec.loadBalancerSourceRanges[1] "10.0.0.0/33" has an invalid prefix length, must be 0-32',
      'spec.sessionAffinity is "Sticky", must be None or ClientIP: none used',
    ].map((line) => prefix + line),
  );
});

Deno.test("convertService() uses spec.clusterIP when spec.clusterIPs is missing", () => {
  const raw = service({ name: "web", clusterIPs: [] });
  (raw.spec as Record<string, unknown>).clusterIP = "10.96.0.10";
  const result = convertService(raw);
  assert.ok(result.ok);
  assert.deepEqual(result.ports[0].clusterIPs, ["10.96.0.10"]);
});

Deno.test("convertService() programs nothing for headless, ExternalName and foreign-proxy Services", () => {
  const cases = [
    service({ name: "headless", clusterIPs: ["None"] }),
    service({ name: "ext", clusterIPs: [], type: "ExternalName" }),
    service({
      name: "other",
      clusterIPs: ["10.96.0.12"],
      labels: { "service.kubernetes.io/service-proxy-name": "someone-else" },
    }),
  ];
  for (const raw of cases) {
    const result = convertService(raw);
    assert.ok(result.ok);
    assert.deepEqual(result.ports, []);
  }
});

Deno.test("convertService() skips a second port with the same number and protocol", () => {
  const result = convertService(service({
    name: "web",
    clusterIPs: ["10.96.0.10"],
    ports: [{ name: "a", port: 80 }, { name: "b", port: 80 }],
  }));
  assert.ok(result.ok);
  assert.deepEqual(result.ports.map((p) => p.name.port), ["a"]);
  assert.match(result.warnings[0], /repeats port 80\/TCP of spec.ports\[0\]/);
});

Deno.test("convertService() quotes hostile names in its message", () => {
  const raw = service({ name: 'we"b\n}', clusterIPs: ["bad"] });
  const result = convertService(raw);
  assert.ok(!result.ok);
  assert.ok(!result.message.includes("\n"));
  assert.match(result.message, /"we\\"b\\n}"/);
});

Deno.test("convertService() takes LoadBalancer ingress IPs except ipMode Proxy, and trims source ranges", () => {
  const result = convertService(service({
    name: "lb",
    type: "LoadBalancer",
    clusterIPs: ["10.96.0.20"],
    ports: [{ name: "http", port: 80, nodePort: 30080 }],
    spec: { loadBalancerSourceRanges: [" 192.168.0.0/24 "], externalTrafficPolicy: "Local" },
    status: {
      loadBalancer: { ingress: [{ ip: "5.6.7.8" }, { ip: "5.6.7.9", ipMode: "Proxy" }] },
    },
  }));
  assert.ok(result.ok);
  const [port] = result.ports;
  assert.deepEqual(port.loadBalancerIPs, ["5.6.7.8"]);
  assert.deepEqual(port.loadBalancerSourceRanges, ["192.168.0.0/24"]);
  assert.equal(port.nodePort, 30080);
  assert.equal(port.externalPolicyLocal, true);
});

Deno.test("convertService() applies the default ClientIP affinity timeout", () => {
  const result = convertService(service({
    name: "sticky",
    clusterIPs: ["10.96.0.21"],
    spec: { sessionAffinity: "ClientIP" },
  }));
  assert.ok(result.ok);
  assert.deepEqual(result.ports[0].sessionAffinity, { timeoutSeconds: 10800 });
});
