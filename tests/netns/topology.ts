/**
 * A one-node test cluster built from network namespaces: the node, an off-cluster client and
 * one namespace per pod, each pod running `pod_server.ts`; plus {@link probe}, which sends real
 * packets from one of those namespaces and classifies what came back.
 *
 * ```
 *   client (192.168.77.2, fd00:77::2)
 *      │ eth0 ── knp-cl0 (192.168.77.1, fd00:77::1)
 *   node ─ knp-br0 (10.244.1.1, fd00:10:244:1::1) ── knp-vp0 ─ eth0 pod-a (10.244.1.11, ::11)
 *      │                                          ├─ knp-vp1 ─ eth0 pod-b (10.244.1.12, ::12)
 *      │                                          └─ knp-vp2 ─ eth0 pod-c (10.244.1.13, ::13)
 *      └ knp-dummy0: default routes (v4 and v6), a packet sink
 * ```
 *
 * Addresses come from `tests/fixtures/ip_plan.ts`. The node forwards (ip_forward and IPv6
 * forwarding on, inside its namespace only) and routes between client and pods without NAT, so
 * every address is reachable before any proxy rule exists.
 *
 * Why the node's default routes point into a packet sink: a real node has a default route, so a
 * packet to a service IP that no rule handles is forwarded (traversing the forward hook, where
 * kube-proxy's filter chains live) rather than answered with "network unreachable". Without the
 * route the node sends that ICMP error itself (measured: IPv4 TCP and UDP read as `refused`,
 * `ENETUNREACH`; IPv6 TCP treats it as a soft error and times out), so "no rules" would look like
 * a `reject` rule; a `blackhole` route would drop before the forward hook and make `connect()`
 * on the node fail. The sink is a `dummy` device or, on kernels without the dummy driver (like
 * ours), an `ifb` device: both are NOARP (no neighbour lookup that could fail into an ICMP
 * error) and silently discard what is routed to them (seen in `ip -s link`: TX packets on a
 * dummy, RX dropped on an ifb). So a packet to an unprogrammed service IP vanishes and the client
 * sees a timeout.
 *
 * @example
 * ```ts
 * const topo = await createTopology({ pods: ["pod-a", "pod-b"] });
 * try {
 *   const [r] = await probe(topo, topo.client.ns, `${topo.pods[0].ip4}:8080`);
 *   // r = { outcome: "ok", body: "pod-a", ms: 3 }
 * } finally {
 *   await topo.cleanup();
 * }
 * ```
 *
 * @module
 */

import { fileURLToPath } from "node:url";
import {
  CLIENT_IP_V4,
  CLIENT_IP_V6,
  MAX_PODS,
  NODE_BRIDGE,
  NODE_CLIENT_IFACE,
  NODE_DEFAULT_IFACE,
  NODE_IP_V4,
  NODE_IP_V6,
  NODE_NAME,
  NODE_POD_GATEWAY_V4,
  NODE_POD_GATEWAY_V6,
  POD_EXTRA_PORTS,
  POD_PORT,
  POD_VETH_PREFIX,
  podIPv4,
  podIPv6,
} from "../fixtures/ip_plan.ts";
import {
  commandLine,
  createNamespace,
  deleteNamespace,
  ipBatch,
  type ManagedProcess,
  NETNS_PREFIX,
  run,
  runOk,
  type RunOptions,
  type RunResult,
  shortId,
  type StartOptions,
  startProcess,
} from "./netns.ts";
import type { ProbeAsk, ProbeProto, ProbeResult } from "./probe.ts";

export { formatTarget, type ProbeResult } from "./probe.ts";

const POD_SERVER = fileURLToPath(new URL("./pod_server.ts", import.meta.url));
const PROBE = fileURLToPath(new URL("./probe.ts", import.meta.url));

/** How long pod servers may take to bind their sockets. */
const SERVER_READY_TIMEOUT_MS = 15_000;

/** Environment of every Deno started inside a namespace: no update check, plain output. */
const DENO_ENV = { DENO_NO_UPDATE_CHECK: "1", NO_COLOR: "1" };

/** Deno flags for scripts run inside a namespace: no config, no lock file, network only. */
const DENO_RUN = ["run", "--no-config", "--no-lock", "--allow-net"];

/** The node namespace and its addresses. */
export interface NodeHost {
  /** Kubernetes node name (`node-a`). */
  name: string;
  ns: string;
  /** Primary IPv4 (on the client network): where NodePorts answer. */
  ip4: string;
  /** Primary IPv6, when the topology is dual-stack. */
  ip6?: string;
  /** The pod bridge (holds the gateways). */
  bridge: string;
  /** The pods' IPv4 default gateway (on the bridge). */
  gateway4: string;
  /** The pods' IPv6 default gateway, when dual-stack. */
  gateway6?: string;
  /** The packet sink carrying the default routes, and its kind (`dummy` or `ifb`). */
  defaultRoute: { iface: string; kind: "dummy" | "ifb" };
}

/** The off-cluster client namespace. */
export interface ClientHost {
  ns: string;
  ip4: string;
  ip6?: string;
}

/** One pod: its namespace, addresses and the server it runs. */
export interface PodHost {
  /** Pod name; also what its server answers. */
  name: string;
  ns: string;
  ip4: string;
  ip6?: string;
  /** The pod's veth on the node (in the node namespace, enslaved to the bridge). */
  nodeIface: string;
  /** Ports its server listens on (TCP and UDP). */
  ports: number[];
  /** The running `pod_server.ts`; `stop()` it to make the pod stop answering. */
  server: ManagedProcess;
}

/** A built cluster; `cleanup()` removes it. */
export interface Topology {
  /** Random short id in every namespace name of this run (`knp-<id>-node`). */
  id: string;
  node: NodeHost;
  client: ClientHost;
  pods: PodHost[];
  /** Whether IPv6 addresses and routes were configured. */
  ipv6: boolean;
  /** Every namespace of this topology. */
  namespaces: string[];
  /** Milliseconds `createTopology()` took. */
  setupMs: number;
  /** Runs a program to completion inside one of this topology's namespaces. */
  exec(ns: string, cmd: readonly string[], opts?: Omit<RunOptions, "ns">): Promise<RunResult>;
  /** Starts a long-running program in one of its namespaces; stopped at cleanup. */
  startProcess(ns: string, cmd: readonly string[], opts?: StartOptions): ManagedProcess;
  /** Stops every process it started and deletes every namespace. Idempotent. */
  cleanup(): Promise<void>;
}

/** Options of {@link createTopology}. */
export interface TopologyOptions {
  /** Pod names (lowercase letters, digits, `-`). Default `["pod-a", "pod-b", "pod-c"]`. */
  pods?: string[];
  /** Configure IPv6 addresses and routes too. Default true. */
  ipv6?: boolean;
  /** Ports every pod server listens on. Default 8080, 9090, 9091 (from the IP plan). */
  ports?: number[];
}

/** The sink device kind this kernel supports; found on first use. */
let sinkKind: "dummy" | "ifb" | undefined;

async function addSink(ns: string): Promise<"dummy" | "ifb"> {
  for (const kind of sinkKind ? [sinkKind] : (["dummy", "ifb"] as const)) {
    const r = await run(["ip", "-n", ns, "link", "add", NODE_DEFAULT_IFACE, "type", kind]);
    if (r.code === 0) return (sinkKind = kind);
  }
  throw new Error(`cannot create ${NODE_DEFAULT_IFACE} in ${ns}: neither dummy nor ifb exists`);
}

function sysctlArgs(settings: Record<string, string | number>): string[] {
  return ["sysctl", "-q", "-w", ...Object.entries(settings).map(([k, v]) => `${k}=${v}`)];
}

/**
 * Settings of every namespace, applied before any interface exists (new interfaces copy
 * `default`): ICMP errors unthrottled, so a burst of REJECTs does not turn into apparent DROPs;
 * no IPv6 duplicate address detection, so link-local addresses are usable at once (while a
 * link-local is "tentative", neighbour discovery through it stalls the first IPv6 packets for
 * about a second).
 */
const HOST_SYSCTLS = {
  "net.ipv4.icmp_ratelimit": 0,
  "net.ipv6.icmp.ratelimit": 0,
  "net.ipv6.conf.all.accept_dad": 0,
  "net.ipv6.conf.default.accept_dad": 0,
};

/** The node also forwards, in both families, with reverse-path filtering pinned off. */
const NODE_SYSCTLS = {
  ...HOST_SYSCTLS,
  "net.ipv4.ip_forward": 1,
  "net.ipv6.conf.all.forwarding": 1,
  // rp_filter is inherited from the machine's namespace; pin it so results do not vary.
  "net.ipv4.conf.all.rp_filter": 0,
  "net.ipv4.conf.default.rp_filter": 0,
};

/**
 * Builds the node, client and pod namespaces (pod setup in parallel), starts each pod's server
 * and waits until every server is ready. On failure everything built so far is removed.
 *
 * @example
 * ```ts
 * const topo = await createTopology({ pods: ["web-1"], ipv6: false });
 * await topo.cleanup();
 * ```
 */
export async function createTopology(options: TopologyOptions = {}): Promise<Topology> {
  const started = performance.now();
  const podNames = options.pods ?? ["pod-a", "pod-b", "pod-c"];
  const ipv6 = options.ipv6 ?? true;
  const ports = options.ports ?? [POD_PORT, ...POD_EXTRA_PORTS];
  checkPodNames(podNames);

  const id = shortId();
  const nsName = (role: string) => `${NETNS_PREFIX}${id}-${role}`;
  const nodeNs = nsName("node");
  const clientNs = nsName("client");
  const podNs = podNames.map((p) => nsName(p));
  const namespaces = [nodeNs, clientNs, ...podNs];
  const processes: ManagedProcess[] = [];
  let cleaning: Promise<void> | undefined;

  const owns = (ns: string) => {
    if (!namespaces.includes(ns)) {
      throw new Error(`cannot use namespace ${ns}: not part of topology ${id}`);
    }
  };
  const cleanup = () => {
    cleaning ??= (async () => {
      await Promise.all(processes.map((p) => p.stop(500)));
      const results = await Promise.allSettled(
        namespaces.map((ns) => deleteNamespace(ns, { killProcesses: true })),
      );
      const failed = results.find((r) => r.status === "rejected");
      if (failed) throw (failed as PromiseRejectedResult).reason;
    })();
    return cleaning;
  };
  const spawnIn = (ns: string, cmd: readonly string[], opts: StartOptions = {}) => {
    owns(ns);
    const proc = startProcess(cmd, { ...opts, ns });
    processes.push(proc);
    return proc;
  };

  try {
    const created = await Promise.allSettled(
      namespaces.map(async (ns) => {
        await createNamespace(ns);
        await runOk(sysctlArgs(ns === nodeNs ? NODE_SYSCTLS : HOST_SYSCTLS), { ns });
      }),
    );
    const failed = created.find((r) => r.status === "rejected");
    if (failed) throw (failed as PromiseRejectedResult).reason;

    // Servers bind "::" and need no addresses yet: start them first, they take longest.
    const deno = Deno.execPath();
    const servers = podNs.map((ns, i) =>
      spawnIn(ns, [
        deno,
        ...DENO_RUN,
        POD_SERVER,
        "--name",
        podNames[i],
        "--ports",
        ports.join(","),
      ], {
        env: DENO_ENV,
      })
    );

    // veths are created directly inside their namespaces: nothing appears in ours.
    await ipBatch([
      `link add ${NODE_CLIENT_IFACE} netns ${nodeNs} type veth peer name eth0 netns ${clientNs}`,
      ...podNs.map((ns, i) =>
        `link add ${POD_VETH_PREFIX}${i} netns ${nodeNs} type veth peer name eth0 netns ${ns}`
      ),
    ]);

    const [kind] = await Promise.all([
      setUpNode(nodeNs, podNames.length, ipv6),
      setUpHost(clientNs, {
        ip4: CLIENT_IP_V4,
        prefix4: 24,
        gateway4: NODE_IP_V4,
        ip6: ipv6 ? CLIENT_IP_V6 : undefined,
        gateway6: NODE_IP_V6,
      }),
      ...podNs.map((ns, i) =>
        setUpHost(ns, {
          ip4: podIPv4(i),
          prefix4: 24,
          gateway4: NODE_POD_GATEWAY_V4,
          ip6: ipv6 ? podIPv6(i) : undefined,
          gateway6: NODE_POD_GATEWAY_V6,
        })
      ),
    ]);

    await Promise.all(servers.map((s) => s.waitForOutput("ready", SERVER_READY_TIMEOUT_MS)));

    return {
      id,
      node: {
        name: NODE_NAME,
        ns: nodeNs,
        ip4: NODE_IP_V4,
        ip6: ipv6 ? NODE_IP_V6 : undefined,
        bridge: NODE_BRIDGE,
        gateway4: NODE_POD_GATEWAY_V4,
        gateway6: ipv6 ? NODE_POD_GATEWAY_V6 : undefined,
        defaultRoute: { iface: NODE_DEFAULT_IFACE, kind },
      },
      client: { ns: clientNs, ip4: CLIENT_IP_V4, ip6: ipv6 ? CLIENT_IP_V6 : undefined },
      pods: podNames.map((name, i) => ({
        name,
        ns: podNs[i],
        ip4: podIPv4(i),
        ip6: ipv6 ? podIPv6(i) : undefined,
        nodeIface: `${POD_VETH_PREFIX}${i}`,
        ports: [...ports],
        server: servers[i],
      })),
      ipv6,
      namespaces: [...namespaces],
      setupMs: Math.round(performance.now() - started),
      async exec(ns, cmd, opts = {}) {
        owns(ns);
        return await run(cmd, { ...opts, ns });
      },
      startProcess: spawnIn,
      cleanup,
    };
  } catch (err) {
    await cleanup().catch(() => {});
    throw err;
  }
}

function checkPodNames(names: string[]): void {
  if (names.length === 0 || names.length > MAX_PODS) {
    throw new Error(`cannot build ${names.length} pods: must be 1-${MAX_PODS}`);
  }
  for (const name of names) {
    if (!/^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/.test(name) || ["node", "client"].includes(name)) {
      throw new Error(
        `cannot use pod name ${JSON.stringify(name)}: lowercase letters, digits and '-', ` +
          "at most 32, not node or client",
      );
    }
  }
  if (new Set(names).size !== names.length) throw new Error(`cannot use duplicate pod names`);
}

/** The node: forwarding, unthrottled ICMP, the pod bridge, the client link, default routes. */
async function setUpNode(ns: string, pods: number, ipv6: boolean): Promise<"dummy" | "ifb"> {
  const kind = await addSink(ns);
  const v6 = (line: string) => (ipv6 ? [line] : []);
  await ipBatch([
    // A fixed MAC: a bridge otherwise takes its lowest port's MAC, which changes as ports come.
    `link add ${NODE_BRIDGE} address 02:00:0a:f4:01:01 type bridge forward_delay 0`,
    `addr add ${NODE_POD_GATEWAY_V4}/24 dev ${NODE_BRIDGE}`,
    ...v6(`addr add ${NODE_POD_GATEWAY_V6}/64 dev ${NODE_BRIDGE} nodad`),
    `link set ${NODE_BRIDGE} up`,
    ...Array.from(
      { length: pods },
      (_, i) => `link set ${POD_VETH_PREFIX}${i} master ${NODE_BRIDGE} up`,
    ),
    // Hairpin mode, as the bridge CNI plugin sets it (`hairpinMode: true`) and kubelet's
    // hairpin-veth does: with br_netfilter, a pod DNATed back to itself is bridged out of the
    // port it came in on, which a bridge refuses unless the port is in hairpin mode.
    ...Array.from(
      { length: pods },
      (_, i) => `link set ${POD_VETH_PREFIX}${i} type bridge_slave hairpin on`,
    ),
    `link set ${NODE_CLIENT_IFACE} up`,
    `addr add ${NODE_IP_V4}/24 dev ${NODE_CLIENT_IFACE}`,
    ...v6(`addr add ${NODE_IP_V6}/64 dev ${NODE_CLIENT_IFACE} nodad`),
    `link set ${NODE_DEFAULT_IFACE} up`,
    `route add default dev ${NODE_DEFAULT_IFACE}`,
    ...v6(`route add ::/0 dev ${NODE_DEFAULT_IFACE}`),
  ], { ns });
  return kind;
}

/** A client or pod: `eth0` with its addresses and default routes via the node. */
async function setUpHost(
  ns: string,
  a: { ip4: string; prefix4: number; gateway4: string; ip6?: string; gateway6: string },
): Promise<void> {
  await ipBatch([
    "link set eth0 up",
    `addr add ${a.ip4}/${a.prefix4} dev eth0`,
    // nodad: usable at once instead of "tentative" for a second or two.
    ...(a.ip6 ? [`addr add ${a.ip6}/64 dev eth0 nodad`] : []),
    `route add default via ${a.gateway4}`,
    ...(a.ip6 ? [`route add ::/0 via ${a.gateway6}`] : []),
  ], { ns });
}

/** Options of {@link probe}. */
export interface ProbeOptions {
  /** Default `tcp`. */
  proto?: ProbeProto;
  /** Attempts, each a new connection (1-1000). Default 1. */
  count?: number;
  /** Wait per attempt. Default 1000 ms. */
  timeoutMs?: number;
  /** Fixed source port for every attempt (e.g. to reuse a UDP conntrack entry). */
  sourcePort?: number;
  /** Source address of every attempt: one of the probing namespace's addresses. */
  sourceAddress?: string;
  /** Ask the server for its name (default) or for the client address it saw. */
  ask?: ProbeAsk;
}

/** ICMP destination-unreachable messages received so far by the namespace of process `pid`. */
async function icmpUnreachables(pid: number): Promise<number> {
  let total = 0;
  try {
    const snmp = (await Deno.readTextFile(`/proc/${pid}/net/snmp`)).split("\n");
    const [header, values] = snmp.filter((l) => l.startsWith("Icmp:"));
    const col = header.split(/\s+/).indexOf("InDestUnreachs");
    total += Number(values.split(/\s+/)[col]);
    const snmp6 = await Deno.readTextFile(`/proc/${pid}/net/snmp6`);
    total += Number(/^Icmp6InDestUnreachs\s+(\d+)/m.exec(snmp6)?.[1] ?? 0);
  } catch {
    // the probe just exited
  }
  return total;
}

/**
 * Runs `probe.ts` inside `fromNs` (a namespace of `topo`) against `target` (`ip:port` or
 * `[ipv6]:port`) and returns one outcome per attempt. For UDP it also watches the namespace's
 * ICMP destination-unreachable counters and tells the probe, so a rejected UDP attempt reads as
 * `refused` rather than `timeout`; that attribution assumes no other traffic from the same
 * namespace draws ICMP errors meanwhile (do not run UDP probes in parallel from one namespace
 * when asserting `refused`).
 *
 * @example
 * ```ts
 * const results = await probe(topo, topo.client.ns, "10.96.0.10:80", { count: 10 });
 * const bodies = results.flatMap((r) => (r.outcome === "ok" ? [r.body] : []));
 * ```
 */
export async function probe(
  topo: Topology,
  fromNs: string,
  target: string,
  opts: ProbeOptions = {},
): Promise<ProbeResult[]> {
  if (!topo.namespaces.includes(fromNs)) {
    throw new Error(`cannot probe from ${fromNs}: not part of topology ${topo.id}`);
  }
  const proto = opts.proto ?? "tcp";
  const count = opts.count ?? 1;
  const timeoutMs = opts.timeoutMs ?? 1000;
  const args = [
    PROBE,
    target,
    "--proto",
    proto,
    "--count",
    `${count}`,
    "--timeout-ms",
    `${timeoutMs}`,
  ];
  if (opts.sourcePort !== undefined) args.push("--source-port", `${opts.sourcePort}`);
  if (opts.sourceAddress !== undefined) args.push("--source-address", opts.sourceAddress);
  if (opts.ask !== undefined) args.push("--ask", opts.ask);
  const watchIcmp = proto === "udp";
  if (watchIcmp) args.push("--icmp-from-stdin");

  const argv = commandLine([Deno.execPath(), ...DENO_RUN, ...args], fromNs);
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: watchIcmp ? "piped" : "null",
    stdout: "piped",
    stderr: "piped",
    env: DENO_ENV,
  }).spawn();
  const limitMs = count * (timeoutMs + 50) + 15_000;
  const killer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {
      // it exited just now
    }
  }, limitMs);
  const writer = watchIcmp ? child.stdin.getWriter() : undefined;
  const send = (line: string) =>
    writer?.write(new TextEncoder().encode(line + "\n")).catch(() => {});
  let polling = false;
  let poller: Promise<void> = Promise.resolve();
  const stderr = new Response(child.stderr).text();
  const lines: string[] = [];
  try {
    let pending = "";
    for await (const text of child.stdout.pipeThrough(new TextDecoderStream())) {
      pending += text;
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl);
        pending = pending.slice(nl + 1);
        if (line === "#ready" && watchIcmp && !polling) {
          polling = true;
          let seen = await icmpUnreachables(child.pid);
          await send("go");
          poller = (async () => {
            while (polling) {
              await new Promise((r) => setTimeout(r, 5));
              const now = await icmpUnreachables(child.pid);
              for (; seen < now; seen++) await send("icmp");
            }
          })();
        } else if (line !== "") lines.push(line);
      }
    }
    if (pending !== "") lines.push(pending);
    const status = await child.status;
    polling = false;
    await poller;
    if (!status.success) {
      throw new Error(
        `cannot probe ${target} from ${fromNs}: probe exited ${status.code}` +
          `${status.signal ? ` (${status.signal}, limit ${limitMs} ms)` : ""}: ${await stderr}`,
      );
    }
    const last = lines[lines.length - 1];
    if (last === undefined || !last.startsWith("[")) {
      throw new Error(`cannot probe ${target} from ${fromNs}: no result printed: ${await stderr}`);
    }
    return JSON.parse(last) as ProbeResult[];
  } finally {
    polling = false;
    clearTimeout(killer);
    await writer?.close().catch(() => {});
    await stderr.catch(() => "");
  }
}
