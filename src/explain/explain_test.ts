import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../../tests/fixtures/objects.ts";
import { stringify } from "../../tests/e2e/yaml.ts";
import type { RawObject } from "../source/events.ts";
import { explainCommand } from "./command.ts";
import type { Explanation } from "./explain.ts";
import { parseTarget } from "./explain.ts";

const NODE_IP = "192.168.77.1";
const CLIENT = "192.168.77.2";
const POD_A = "10.244.1.11"; // on this node
const POD_C = "10.244.2.13"; // on node-b

function cluster(): RawObject[] {
  const remote = (ip: string) => ({ ip, nodeName: "node-b" });
  return [
    node("node-a", { ips: [NODE_IP], podCIDRs: ["10.244.1.0/24"] }),
    serviceCIDR("kubernetes", ["10.96.0.0/16"]),
    service({ name: "web", clusterIPs: ["10.96.0.10"] }),
    endpointSlice({ name: "web-1", service: "web", endpoints: [POD_A, remote(POD_C)] }),
    service({ name: "empty", clusterIPs: ["10.96.0.11"] }),
    service({
      name: "local",
      type: "NodePort",
      clusterIPs: ["10.96.0.12"],
      ports: [{ name: "http", port: 80, nodePort: 30081 }],
      spec: { externalTrafficPolicy: "Local" },
    }),
    endpointSlice({ name: "local-1", service: "local", endpoints: [POD_A, remote(POD_C)] }),
    service({
      name: "local-none",
      type: "NodePort",
      clusterIPs: ["10.96.0.13"],
      ports: [{ name: "http", port: 80, nodePort: 30082 }],
      spec: { externalTrafficPolicy: "Local" },
    }),
    endpointSlice({ name: "local-none-1", service: "local-none", endpoints: [remote(POD_C)] }),
    service({
      name: "itp",
      clusterIPs: ["10.96.0.14"],
      spec: { internalTrafficPolicy: "Local" },
    }),
    endpointSlice({ name: "itp-1", service: "itp", endpoints: [remote(POD_C)] }),
    service({
      name: "lb",
      type: "LoadBalancer",
      clusterIPs: ["10.96.0.15"],
      ports: [{ name: "http", port: 80, nodePort: 30083 }],
      spec: { loadBalancerSourceRanges: ["192.168.77.0/24"] },
      status: { loadBalancer: { ingress: [{ ip: "203.0.113.20" }] } },
    }),
    endpointSlice({ name: "lb-1", service: "lb", endpoints: [POD_A] }),
    service({
      name: "sticky",
      clusterIPs: ["10.96.0.16"],
      spec: { sessionAffinity: "ClientIP" },
    }),
    endpointSlice({ name: "sticky-1", service: "sticky", endpoints: [POD_A, remote(POD_C)] }),
  ];
}

async function explain(from: string, to: string, extra: string[] = []): Promise<Explanation> {
  const out: string[] = [];
  const errors: string[] = [];
  const code = await explainCommand(
    [
      "--from",
      from,
      `--to=${to}`,
      "--from-file=cluster.yaml",
      "--hostname-override=node-a",
      "--cluster-cidr=10.244.0.0/16",
      "--output=json",
      ...extra,
    ],
    {
      readTextFile: () => Promise.resolve(stringify(cluster())),
      print: (t) => out.push(t),
      printError: (l) => errors.push(l),
    },
  );
  assert.equal(code, 0, errors.join("\n"));
  return JSON.parse(out.join(""));
}

Deno.test("explain() spreads an off-cluster client's cluster-IP connection and masquerades it", async () => {
  const e = await explain(CLIENT, "10.96.0.10:80/tcp");
  assert.equal(e.verdict, "dnat");
  assert.equal(e.servicePort, "default/web:http");
  assert.equal(e.entry, "cluster IP 10.96.0.10:80/tcp");
  assert.deepEqual(e.endpoints, [
    { ip: POD_A, port: 8080, probability: 0.5 },
    { ip: POD_C, port: 8080, probability: 0.5 },
  ]);
  assert.equal(e.masquerade, true);
  assert.equal(e.source, "off-cluster");
  assert.deepEqual(e.path.slice(0, 4), [
    "prerouting",
    "filter-prerouting",
    "nat-prerouting",
    "services",
  ]);
  assert.equal(e.path[4], "service-ips");
  assert.match(e.path[5], /^lb-tcp-2$/);
});

Deno.test("explain() keeps a pod's source on a cluster IP and notes the hairpin", async () => {
  const e = await explain(POD_A, "10.96.0.10:80/tcp");
  assert.equal(e.verdict, "dnat");
  assert.equal(e.source, "pod");
  assert.equal(e.masquerade, false);
  assert.match(e.reason, /hairpin/);
});

Deno.test("explain() masquerades pods too with --masquerade-all", async () => {
  const e = await explain(POD_A, "10.96.0.10:80/tcp", ["--masquerade-all"]);
  assert.equal(e.masquerade, true);
  assert.match(e.reason, /masqueradeAll/);
});

Deno.test("explain() preserves an off-cluster source when no local-traffic detector is set", async () => {
  const e = await explain(CLIENT, "10.96.0.10:80/tcp", ["--cluster-cidr="]);
  assert.equal(e.verdict, "dnat");
  assert.equal(e.masquerade, false);
  assert.equal(e.source, "off-cluster");
});

Deno.test("explain() tells pods by the node's pod CIDR with --detect-local-mode=NodeCIDR", async () => {
  const e = await explain("10.244.2.5", "10.96.0.10:80/tcp", ["--detect-local-mode=NodeCIDR"]);
  assert.equal(e.source, "off-cluster"); // another node's pod CIDR
  assert.equal(e.masquerade, true);
  const own = await explain("10.244.1.12", "10.96.0.10:80/tcp", ["--detect-local-mode=NodeCIDR"]);
  assert.equal(own.source, "pod");
  assert.equal(own.masquerade, false);
});

Deno.test("explain() rejects a service without endpoints and an unused cluster-IP port", async () => {
  const empty = await explain(CLIENT, "10.96.0.11:80/tcp");
  assert.equal(empty.verdict, "reject");
  assert.equal(empty.servicePort, "default/empty:http");
  assert.ok(empty.path.includes("no-endpoint-services"));
  const unused = await explain(CLIENT, "10.96.0.10:81/tcp");
  assert.equal(unused.verdict, "reject");
  assert.ok(unused.path.includes("cluster-ips-check"));
});

Deno.test("explain() drops an unallocated service-CIDR address and says no-match elsewhere", async () => {
  assert.equal((await explain(CLIENT, "10.96.0.99:80")).verdict, "drop");
  const other = await explain(CLIENT, "203.0.113.99:80");
  assert.equal(other.verdict, "no-match");
  assert.equal(other.toNode, false);
  const nodeStack = await explain(CLIENT, `${NODE_IP}:30999`);
  assert.equal(nodeStack.verdict, "no-match");
  assert.equal(nodeStack.toNode, true);
});

Deno.test("explain() follows eTP Local: clients to local endpoints, pods and the node to all", async () => {
  const client = await explain(CLIENT, `${NODE_IP}:30081/tcp`);
  assert.equal(client.entry, `node port 30081/tcp on node address ${NODE_IP}`);
  assert.deepEqual(client.endpoints.map((ep) => ep.ip), [POD_A]);
  assert.equal(client.masquerade, false);
  assert.match(client.path.join(" "), /external-\S+-default\/local\/tcp\/http local-lb-tcp-1/);
  const pod = await explain("10.244.1.12", `${NODE_IP}:30081/tcp`);
  assert.deepEqual(pod.endpoints.map((ep) => ep.ip), [POD_A, POD_C]);
  const fromNode = await explain(NODE_IP, `${NODE_IP}:30081/tcp`);
  assert.equal(fromNode.source, "node");
  assert.equal(fromNode.path[0], "output");
  assert.deepEqual(fromNode.endpoints.map((ep) => ep.ip), [POD_A, POD_C]);
  assert.equal(fromNode.masquerade, true);
});

Deno.test("explain() drops eTP and iTP Local traffic without a local endpoint", async () => {
  const etp = await explain(CLIENT, `${NODE_IP}:30082/tcp`);
  assert.equal(etp.verdict, "drop");
  assert.match(etp.reason, /externalTrafficPolicy Local/);
  const itp = await explain("10.244.1.12", "10.96.0.14:80/tcp");
  assert.equal(itp.verdict, "drop");
  assert.match(itp.reason, /internalTrafficPolicy Local/);
});

Deno.test("explain() drops load-balancer traffic from outside loadBalancerSourceRanges", async () => {
  const denied = await explain("198.51.100.7", "203.0.113.20:80/tcp");
  assert.equal(denied.verdict, "drop");
  assert.ok(denied.path.includes("firewall-check"));
  assert.match(denied.reason, /loadBalancerSourceRanges/);
  const allowed = await explain(CLIENT, "203.0.113.20:80/tcp");
  assert.equal(allowed.verdict, "dnat");
  assert.equal(allowed.entry, "load-balancer IP 203.0.113.20:80/tcp");
});

Deno.test("explain() notes ClientIP affinity", async () => {
  const e = await explain(CLIENT, "10.96.0.16:80/tcp");
  assert.equal(e.sticky, true);
  assert.match(e.reason, /ClientIP affinity \(10800s\)/);
});

Deno.test("explainCommand() refuses a missing --to and prints text by default", async () => {
  const errors: string[] = [];
  const io = {
    readTextFile: () => Promise.resolve(stringify(cluster())),
    print: (t: string) => errors.push(`out:${t}`),
    printError: (l: string) => errors.push(l),
  };
  assert.equal(await explainCommand(["--from", CLIENT, "--from-file=c.yaml"], io), 2);
  assert.match(errors[0], /needs --from and --to/);
  const out: string[] = [];
  const code = await explainCommand(
    ["--from", CLIENT, "--to", "10.96.0.10:80", "--from-file=c.yaml", "--hostname-override=node-a"],
    { ...io, print: (t) => out.push(t) },
  );
  assert.equal(code, 0);
  assert.match(out[0], /^verdict: +dnat/m);
  assert.match(out[0], /50\.0%/);
});

Deno.test("parseTarget() reads IPv4, bracketed IPv6 and the protocol", () => {
  assert.deepEqual(parseTarget("10.96.0.10:80"), {
    address: "10.96.0.10",
    port: 80,
    protocol: "tcp",
  });
  assert.deepEqual(parseTarget("[fd00:10:96::10]:53/UDP"), {
    address: "fd00:10:96::10",
    port: 53,
    protocol: "udp",
  });
  assert.throws(() => parseTarget("10.96.0.10"), /ADDRESS:PORT/);
});

Deno.test("explain() follows the balancer of each --scheduler and says how it picks", async () => {
  const cases = [
    ["round-robin", /in turn \(numgen inc mod 2\)/],
    ["source-hash", /by a hash of the client address \(jhash ip saddr mod 2 seed 0x0\)/],
  ] as const;
  for (const [scheduler, how] of cases) {
    const e = await explain(CLIENT, "10.96.0.10:80/tcp", [`--scheduler=${scheduler}`]);
    assert.equal(e.verdict, "dnat", scheduler);
    assert.deepEqual(e.endpoints.map((ep) => ep.ip), [POD_A, POD_C]);
    assert.match(e.reason, how);
  }
});
