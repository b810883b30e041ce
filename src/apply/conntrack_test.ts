/**
 * Specs of the stale UDP conntrack cleanup: the pure planner, the state-to-records helper, the
 * tracker between syncs, and the runner against a fake `conntrack` program (no kernel here;
 * `tests/e2e/conntrack_test.ts` runs the real one in a namespace).
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Endpoint } from "../model/endpoint.ts";
import type { ServicePort } from "../model/service_port.ts";
import {
  commandMatches,
  conntrackCommandLine,
  ConntrackError,
  parseUdpFlows,
  runConntrackCleanup,
} from "./conntrack.ts";
import {
  type CleanupCommand,
  conntrackArgs,
  ConntrackCleanupTracker,
  type ConntrackService,
  conntrackServices,
  planConntrackCleanup,
} from "./conntrack_plan.ts";

const SVC = "10.96.0.10";
const SVC6 = "fd00:10:96::10";
const A = "10.244.1.11";
const B = "10.244.1.12";
const C = "10.244.1.13";

function udp(endpoints: string[], extra: Partial<ConntrackService> = {}): ConntrackService {
  return { serviceIP: SVC, port: 53, protocol: "UDP", nodePort: 0, endpoints, ...extra };
}

function argsOf(commands: CleanupCommand[]): string[] {
  return commands.map((c) => conntrackArgs(c).join(" "));
}

Deno.test("conntrackArgs() builds a conntrack -D filter for one family and UDP", () => {
  assert.deepEqual(
    conntrackArgs({
      family: "ipv4",
      reason: "stale-endpoint",
      origDst: SVC,
      origPortDst: 53,
      replySrc: A,
    }),
    [
      "-D",
      "-f",
      "ipv4",
      "-p",
      "udp",
      "--orig-dst",
      SVC,
      "--orig-port-dst",
      "53",
      "--reply-src",
      A,
    ],
  );
});

Deno.test("planConntrackCleanup() deletes flows DNATed to an endpoint that went away", () => {
  const commands = planConntrackCleanup([udp([A, B])], [udp([B, C])]);
  assert.deepEqual(argsOf(commands), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${A}`,
  ]);
  assert.equal(commands[0].reason, "stale-endpoint");
});

Deno.test("planConntrackCleanup() deletes un-NATed flows once a service gets its first endpoints", () => {
  const commands = planConntrackCleanup([udp([])], [udp([A])]);
  assert.deepEqual(argsOf(commands), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${SVC}`,
  ]);
  assert.equal(commands[0].reason, "stuck-without-endpoints");
  // A service new in this sync counts as having had no endpoints.
  assert.deepEqual(planConntrackCleanup([], [udp([A])]), commands);
});

Deno.test("planConntrackCleanup() plans nothing when no UDP endpoint went away", () => {
  assert.deepEqual(planConntrackCleanup([udp([A])], [udp([A, B])]), []);
  assert.deepEqual(planConntrackCleanup([udp([A])], [udp([A])]), []);
  assert.deepEqual(planConntrackCleanup([], []), []);
  assert.deepEqual(planConntrackCleanup([udp([])], [udp([])]), []);
});

Deno.test("planConntrackCleanup() ignores TCP and SCTP, like upstream", () => {
  for (const protocol of ["TCP", "SCTP"] as const) {
    assert.deepEqual(planConntrackCleanup([udp([A], { protocol })], [udp([B], { protocol })]), []);
  }
});

Deno.test("planConntrackCleanup() cleans every endpoint of a deleted service", () => {
  const commands = planConntrackCleanup([udp([A, B])], []);
  assert.deepEqual(argsOf(commands), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${A}`,
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${B}`,
  ]);
});

Deno.test("planConntrackCleanup() cleans node-port flows to any node address", () => {
  const stale = planConntrackCleanup([udp([A], { nodePort: 30053 })], [
    udp([B], { nodePort: 30053 }),
  ]);
  assert.deepEqual(argsOf(stale), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${A}`,
    `-D -f ipv4 -p udp --orig-port-dst 30053 --reply-src ${A}`,
  ]);
  const stuck = planConntrackCleanup([udp([], { nodePort: 30053 })], [
    udp([A], { nodePort: 30053 }),
  ]);
  assert.ok(
    argsOf(stuck).includes("-D -f ipv4 -p udp --orig-port-dst 30053 --reply-port-src 30053"),
    argsOf(stuck).join("\n"),
  );
});

Deno.test("planConntrackCleanup() keeps families apart and normalises addresses", () => {
  const before = [
    udp([A]),
    udp(["fd00:10:244:1:0:0:0:11", A], { serviceIP: "fd00:10:96:0::10" }),
  ];
  const after = [udp([A]), udp(["fd00:10:244:1::12"], { serviceIP: SVC6 })];
  assert.deepEqual(argsOf(planConntrackCleanup(before, after)), [
    `-D -f ipv6 -p udp --orig-dst ${SVC6} --orig-port-dst 53 --reply-src fd00:10:244:1::11`,
  ]);
});

Deno.test("planConntrackCleanup() merges records of one address and deduplicates commands", () => {
  // Two records for the same IP:port (e.g. one external IP shared by two services).
  const before = [udp([A]), udp([B])];
  const after = [udp([B])];
  assert.deepEqual(argsOf(planConntrackCleanup(before, after)), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${A}`,
  ]);
  // An endpoint that moved from one record to another of the same address is not stale.
  assert.deepEqual(planConntrackCleanup([udp([A]), udp([])], [udp([]), udp([A])]), []);
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

Deno.test("ConntrackCleanupTracker.plan() compares each sync with the last one", () => {
  const tracker = new ConntrackCleanupTracker();
  const services = new Map([[DNS_KEY, servicePort({ clusterIPs: [SVC] })]]);
  // First sync: only flows that were never DNATed are cleaned.
  assert.deepEqual(argsOf(tracker.plan(services, new Map([[DNS_KEY, [endpoint(A)]]]))), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${SVC}`,
  ]);
  // Endpoint A replaced by B.
  const next = new Map([[DNS_KEY, [endpoint(B)]]]);
  assert.deepEqual(argsOf(tracker.plan(services, next, { changed: new Set([DNS_KEY]) })), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${A}`,
  ]);
  // A partial sync that did not touch the port plans nothing for it.
  assert.deepEqual(tracker.plan(services, new Map(), { changed: new Set([WEB_KEY]) }), []);
  // The service is deleted: its last endpoints are stale.
  assert.deepEqual(argsOf(tracker.plan(new Map(), new Map())), [
    `-D -f ipv4 -p udp --orig-dst ${SVC} --orig-port-dst 53 --reply-src ${B}`,
  ]);
  assert.deepEqual(tracker.plan(new Map(), new Map()), []);
});

Deno.test("conntrackCommandLine() runs conntrack directly, or inside a namespace", () => {
  const command = planConntrackCleanup([], [udp([A])])[0];
  assert.deepEqual(conntrackCommandLine(command).slice(0, 2), ["conntrack", "-D"]);
  assert.deepEqual(
    conntrackCommandLine(command, { netns: "knp-abc123-node", conntrackPath: "/sbin/conntrack" })
      .slice(0, 6),
    ["ip", "netns", "exec", "knp-abc123-node", "/sbin/conntrack", "-D"],
  );
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
  return { family, reason: "stale-endpoint", origDst, origPortDst: 53, replySrc };
}

Deno.test("runConntrackCleanup() sums deleted entries; none deleted is not an error", async () => {
  const fake = await fakeConntrack();
  try {
    const deleted = await runConntrackCleanup(
      [command("10.96.0.1"), command("10.96.0.2"), command("10.96.0.1")],
      { conntrackPath: fake.path, concurrency: 1 },
    );
    assert.equal(deleted, 4);
    assert.deepEqual(await fake.calls(), [
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --orig-port-dst 53 --reply-src ${A}`,
      `-D -f ipv4 -p udp --orig-dst 10.96.0.2 --orig-port-dst 53 --reply-src ${A}`,
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --orig-port-dst 53 --reply-src ${A}`,
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

Deno.test("runConntrackCleanup() with listFirst runs only commands matching a listed flow", async () => {
  const fake = await fakeConntrack();
  try {
    const deleted = await runConntrackCleanup(
      [
        command("10.96.0.1"), // matches the listed flow
        command("10.96.0.1", C), // same service, an endpoint without flows
        command("10.96.0.2"), // no flow to this service
        command("fd00:10:96::2", "fd00:10:244:1::11"), // IPv6 listing fails: run anyway
      ],
      { conntrackPath: fake.path, listFirst: true },
    );
    assert.equal(deleted, 2);
    assert.deepEqual((await fake.calls()).sort(), [
      `-D -f ipv4 -p udp --orig-dst 10.96.0.1 --orig-port-dst 53 --reply-src ${A}`,
      "-D -f ipv6 -p udp --orig-dst fd00:10:96::2 --orig-port-dst 53 --reply-src fd00:10:244:1::11",
      "-L -f ipv4 -p udp",
      "-L -f ipv6 -p udp",
    ]);
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

Deno.test("commandMatches() agrees with the flows each kind of command targets", () => {
  const dnated = { origDst: SVC, origPortDst: 53, replySrc: A, replyPortSrc: 5353 };
  const unNATed = { origDst: SVC, origPortDst: 53, replySrc: SVC, replyPortSrc: 53 };
  const [stuck] = planConntrackCleanup([], [udp([A])]);
  const [stale] = planConntrackCleanup([udp([A])], [udp([B])]);
  assert.ok(commandMatches(stale, dnated) && !commandMatches(stale, unNATed));
  assert.ok(commandMatches(stuck, unNATed) && !commandMatches(stuck, dnated));
  const nodePortStuck = planConntrackCleanup([], [udp([A], { nodePort: 30053 })])
    .find((c) => c.origDst === undefined)!;
  const toNodePort = { origDst: "192.168.77.1", origPortDst: 30053, replySrc: "192.168.77.1" };
  assert.ok(commandMatches(nodePortStuck, { ...toNodePort, replyPortSrc: 30053 }));
  assert.ok(!commandMatches(nodePortStuck, { ...toNodePort, replySrc: A, replyPortSrc: 5353 }));
});
