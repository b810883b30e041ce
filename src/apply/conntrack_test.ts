/**
 * Specs of the conntrack reconciler: the pure planner, the state-to-records helper, and the
 * runners against a fake `conntrack` program (no kernel here; `tests/e2e/conntrack_test.ts`
 * runs the real one in a namespace).
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Endpoint } from "../model/endpoint.ts";
import type { ServicePort } from "../model/service_port.ts";
import {
  conntrackCommandLine,
  ConntrackError,
  parseUdpFlows,
  reconcileConntrack,
  runConntrackCleanup,
} from "./conntrack.ts";
import {
  type CleanupCommand,
  conntrackArgs,
  type ConntrackService,
  conntrackServices,
  planConntrackReconcile,
  type UdpFlow,
} from "./conntrack_plan.ts";

const SVC = "10.96.0.10";
const SVC6 = "fd00:10:96::10";
const A = "10.244.1.11";
const B = "10.244.1.12";
const C = "10.244.1.13";
const CLIENT = "192.168.77.2";
const NODE = "192.168.77.1";

function udp(endpoints: string[], extra: Partial<ConntrackService> = {}): ConntrackService {
  return { serviceIP: SVC, port: 53, protocol: "UDP", nodePort: 0, endpoints, ...extra };
}

function flow(origDst: string, replySrc: string, origPortDst = 53): UdpFlow {
  return { origDst, origPortDst, replySrc, replyPortSrc: 5353 };
}

function argsOf(commands: CleanupCommand[]): string[] {
  return commands.map((c) => conntrackArgs(c).join(" "));
}

Deno.test("conntrackArgs() builds a conntrack -D filter for one family and UDP", () => {
  assert.deepEqual(conntrackArgs({ family: "ipv4", origDst: SVC, replySrc: A }), [
    "-D",
    "-f",
    "ipv4",
    "-p",
    "udp",
    "--orig-dst",
    SVC,
    "--reply-src",
    A,
  ]);
  assert.deepEqual(conntrackArgs({ family: "ipv4", origPortDst: 30053, replySrc: A }), [
    "-D",
    "-f",
    "ipv4",
    "-p",
    "udp",
    "--orig-port-dst",
    "30053",
    "--reply-src",
    A,
  ]);
});

Deno.test("planConntrackReconcile() deletes flows whose reply source is no serving endpoint of their service IP", () => {
  const flows = [flow(SVC, A), flow(SVC, B), flow(SVC, B), flow(SVC, SVC), flow("10.96.0.99", C)];
  assert.deepEqual(argsOf(planConntrackReconcile(flows, [udp([A])], "ipv4")), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --reply-src ${B}`,
    `-D -f ipv4 -p udp --orig-dst ${SVC} --reply-src ${SVC}`,
  ]);
});

Deno.test("planConntrackReconcile() deletes every flow of a UDP service without serving endpoints", () => {
  assert.deepEqual(argsOf(planConntrackReconcile([flow(SVC, A)], [udp([])], "ipv4")), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --reply-src ${A}`,
  ]);
});

Deno.test("planConntrackReconcile() checks node-port flows to any address by port", () => {
  const services = [udp([A], { nodePort: 30053 })];
  const flows = [flow(NODE, A, 30053), flow(NODE, B, 30053), flow(CLIENT, NODE, 30053)];
  assert.deepEqual(argsOf(planConntrackReconcile(flows, services, "ipv4")), [
    `-D -f ipv4 -p udp --orig-port-dst 30053 --reply-src ${B}`,
    `-D -f ipv4 -p udp --orig-port-dst 30053 --reply-src ${NODE}`,
  ]);
});

Deno.test("planConntrackReconcile() ignores TCP and SCTP ports, other families and unknown IPs", () => {
  const tcp = udp([A], { protocol: "TCP" });
  assert.deepEqual(planConntrackReconcile([flow(SVC, B)], [tcp], "ipv4"), []);
  const v6 = udp(["fd00:10:244:1::11"], { serviceIP: "FD00:10:96:0::10" });
  assert.deepEqual(planConntrackReconcile([flow(SVC, B)], [v6], "ipv4"), []);
  assert.deepEqual(
    argsOf(planConntrackReconcile([flow(SVC6, "fd00:10:244:1::12")], [v6], "ipv6")),
    [
      `-D -f ipv6 -p udp --orig-dst ${SVC6} --reply-src fd00:10:244:1::12`,
    ],
  );
});

Deno.test("planConntrackReconcile() lets a service IP's flows reach the endpoints of any of its UDP ports", () => {
  const services = [udp([A]), udp([B], { port: 5353 })];
  assert.deepEqual(planConntrackReconcile([flow(SVC, A), flow(SVC, B)], services, "ipv4"), []);
});

function servicePort(overrides: Partial<ServicePort> = {}): ServicePort {
  return {
    name: { namespace: "default", name: "dns", port: "dns", protocol: "UDP" },
    type: "ClusterIP",
    port: 53,
    clusterIPs: [SVC, SVC6],
    nodePort: 0,
    externalIPs: [],
    loadBalancerIPs: [],
    loadBalancerSourceRanges: [],
    sessionAffinity: null,
    externalPolicyLocal: false,
    internalPolicyLocal: false,
    healthCheckNodePort: 0,
    ...overrides,
  };
}

function endpoint(ip: string, conditions: Partial<Endpoint> = {}): Endpoint {
  return {
    ip,
    port: 5353,
    ready: true,
    serving: true,
    terminating: false,
    nodeName: "node-a",
    zone: "",
    isLocal: true,
    zoneHints: null,
    nodeHints: null,
    ...conditions,
  };
}

const DNS_KEY = "default/dns:dns/UDP";
const WEB_KEY = "default/web:http/TCP";

Deno.test("conntrackServices() lists every address of UDP ports with their serving endpoints", () => {
  const services = new Map([
    [DNS_KEY, servicePort({ externalIPs: ["192.0.2.1"], loadBalancerIPs: ["192.0.2.2"] })],
    [WEB_KEY, servicePort({ name: { ...servicePort().name, protocol: "TCP" } })],
  ]);
  const endpoints = new Map([[DNS_KEY, [
    endpoint(A),
    endpoint(B, { ready: false, serving: true, terminating: true }),
    endpoint(C, { ready: false, serving: false }),
  ]]]);
  const records = conntrackServices(services, endpoints);
  assert.deepEqual(records.map((r) => r.serviceIP), [SVC, SVC6, "192.0.2.1", "192.0.2.2"]);
  assert.deepEqual(records[0].endpoints, [A, B]);
  assert.deepEqual(conntrackServices(services, endpoints, { keys: [WEB_KEY] }), []);
});

/**
 * Writes a fake `conntrack` that answers like the real one by the service IP it is given:
 * 10.96.0.1 deletes 2 entries, 10.96.0.2 (or fd00:10:96::2) finds none (exit 1), anything else
 * fails (exit 2). `-L` lists one IPv4 flow (to 10.96.0.1:53, DNATed to A) and fails for IPv6.
 * It also appends its arguments to `calls.log`.
 */
async function fakeConntrack(): Promise<
  { path: string; calls: () => Promise<string[]>; remove: () => Promise<void> }
> {
  const dir = await Deno.makeTempDir({ prefix: "knp-fake-conntrack-" });
  const path = `${dir}/conntrack`;
  const log = `${dir}/calls.log`;
  await Deno.writeTextFile(
    path,
    `#!/bin/sh
echo "$*" >> '${log}'
v="conntrack v1.4.7 (conntrack-tools)"
case "$*" in
  "-L -f ipv4 -p udp")
    echo "udp      17 29 src=192.168.77.2 dst=10.96.0.1 sport=40000 dport=53 src=${A} dst=192.168.77.2 sport=5353 dport=40000 [ASSURED] mark=0 use=1"
    echo "$v: 1 flow entries have been shown." >&2; exit 0 ;;
  "-L -f ipv6 -p udp") echo "$v: Operation not permitted" >&2; exit 1 ;;
  *10.96.0.1\\ *) echo "$v: 2 flow entries have been deleted." >&2; exit 0 ;;
  *10.96.0.2\\ *|*fd00:10:96::2\\ *) echo "$v: 0 flow entries have been deleted." >&2; exit 1 ;;
  *) echo "$v: mismatched address family" >&2; exit 2 ;;
esac
`,
  );
  await Deno.chmod(path, 0o755);
  return {
    path,
    calls: async () => (await Deno.readTextFile(log)).trim().split("\n"),
    remove: () => Deno.remove(dir, { recursive: true }),
  };
}

function command(origDst: string, replySrc = A): CleanupCommand {
  const family = origDst.includes(":") ? "ipv6" : "ipv4";
  return { family, origDst, replySrc };
}

Deno.test("conntrackCommandLine() runs conntrack directly, or inside a namespace", () => {
  assert.deepEqual(conntrackCommandLine(command(SVC)).slice(0, 2), ["conntrack", "-D"]);
  assert.deepEqual(
    conntrackCommandLine(command(SVC), {
      netns: "knp-abc123-node",
      conntrackPath: "/sbin/conntrack",
    }).slice(0, 6),
    ["ip", "netns", "exec", "knp-abc123-node", "/sbin/conntrack", "-D"],
  );
});

Deno.test("runConntrackCleanup() sums deleted entries; none deleted is not an error", async () => {
  const fake = await fakeConntrack();
  try {
    const deleted = await runConntrackCleanup(
      [command("10.96.0.1"), command("10.96.0.2"), command("10.96.0.1")],
      { conntrackPath: fake.path, concurrency: 1 },
    );
    assert.equal(deleted, 4);
    assert.deepEqual(await fake.calls(), [
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --reply-src ${A}`,
      `-D -f ipv4 -p udp --orig-dst 10.96.0.2 --reply-src ${A}`,
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --reply-src ${A}`,
    ]);
    assert.equal(await runConntrackCleanup([], { conntrackPath: fake.path }), 0);
  } finally {
    await fake.remove();
  }
});

Deno.test("runConntrackCleanup() runs every command, then reports the failures and the count", async () => {
  const fake = await fakeConntrack();
  try {
    const err = await runConntrackCleanup(
      [command("10.96.0.3"), command("10.96.0.1")],
      { conntrackPath: fake.path },
    ).then(() => undefined, (e) => e);
    assert.ok(err instanceof ConntrackError, String(err));
    assert.equal(err.deleted, 2);
    assert.equal(err.failures.length, 1);
    assert.match(err.message, /failed 1 of 2 .*--orig-dst 10\.96\.0\.3.*mismatched address family/);
    assert.equal((await fake.calls()).length, 2);
  } finally {
    await fake.remove();
  }
});

Deno.test("runConntrackCleanup() throws at once when conntrack cannot be started", async () => {
  await assert.rejects(
    runConntrackCleanup([command("10.96.0.1")], { conntrackPath: "/nonexistent/conntrack" }),
    (err) =>
      err instanceof ConntrackError && /cannot run \/nonexistent\/conntrack/.test(err.message),
  );
});

Deno.test("reconcileConntrack() lists each family, deletes what is stale, and reports each family", async () => {
  const fake = await fakeConntrack();
  let clock = 0;
  try {
    const results = await reconcileConntrack(
      [udp([B], { serviceIP: "10.96.0.1" }), udp([], { serviceIP: "fd00:10:96::2" })],
      { conntrackPath: fake.path, now: () => (clock += 250) },
    );
    assert.deepEqual(results.map((r) => [r.family, r.deleted, r.seconds, r.error?.message]), [
      ["IPv4", 2, 0.25, undefined],
      [
        "IPv6",
        0,
        0.25,
        "cannot list the ipv6 conntrack table: exit code 1: conntrack v1.4.7 (conntrack-tools): " +
        "Operation not permitted",
      ],
    ]);
    assert.deepEqual(await fake.calls(), [
      "-L -f ipv4 -p udp",
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --reply-src ${A}`,
      "-L -f ipv6 -p udp",
    ]);
    const none = await reconcileConntrack([udp([A], { serviceIP: "10.96.0.1" })], {
      conntrackPath: fake.path,
      families: ["IPv4"],
    });
    assert.deepEqual(none.map((r) => [r.family, r.deleted, r.error]), [["IPv4", 0, undefined]]);
  } finally {
    await fake.remove();
  }
});

Deno.test("parseUdpFlows() reads UDP entries of conntrack -L, plain or extended, and skips the rest", () => {
  const text = [
    "udp      17 29 src=192.168.77.2 dst=10.96.0.50 sport=40000 dport=80 [UNREPLIED] " +
    "src=10.96.0.50 dst=192.168.77.2 sport=80 dport=40000 mark=0 use=1",
    "ipv6     10 udp      17 110 src=fd00:77::2 dst=fd00:10:96:0:0:0:0:10 sport=1 dport=53 " +
    "src=fd00:10:244:1::11 dst=fd00:77::2 sport=5353 dport=1 [ASSURED] mark=0 use=1",
    "tcp      6 117 TIME_WAIT src=1.2.3.4 dst=10.96.0.1 sport=1 dport=80 src=10.244.1.11 " +
    "dst=1.2.3.4 sport=8080 dport=1 [ASSURED] mark=0 use=1",
    "conntrack v1.4.7 (conntrack-tools): 3 flow entries have been shown.",
    "",
  ].join("\n");
  assert.deepEqual(parseUdpFlows(text), [
    { origDst: "10.96.0.50", origPortDst: 80, replySrc: "10.96.0.50", replyPortSrc: 80 },
    {
      origDst: "fd00:10:96::10",
      origPortDst: 53,
      replySrc: "fd00:10:244:1::11",
      replyPortSrc: 5353,
    },
  ]);
});
