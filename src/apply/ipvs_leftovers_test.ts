import assert from "node:assert/strict";
import { FIXED_CHAINS } from "../render/iptables/names.ts";
import { parseSave } from "../render/iptables/reconcile.ts";
import type { ProgramResult } from "./program.ts";
import {
  ipvsChainsCleanupScript,
  type LeftoverRunner,
  removeIpvsLeftovers,
} from "./ipvs_leftovers.ts";

/** What an ipvs-mode kube-proxy's `iptables-save` looks like (trimmed), plus the kubelet's. */
const IPVS_SAVE = `*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-FIREWALL - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MASQUERADE --random-fully
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
-A INPUT -j KUBE-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
-A OUTPUT -j KUBE-FIREWALL
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-IPVS-FILTER -m set --match-set KUBE-LOAD-BALANCER dst,dst -j RETURN
-A KUBE-PROXY-FIREWALL -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
COMMIT
`;

const NONE = { nat: [], filter: [] };

Deno.test("ipvsChainsCleanupScript() removes ipvs mode's chains and the jumps to them, not the kubelet's KUBE-FIREWALL", () => {
  const script = ipvsChainsCleanupScript(parseSave(IPVS_SAVE), NONE);
  const lines = script.split("\n");
  const deleted = lines.filter((l) => l.startsWith("-X ")).map((l) => l.slice(3));
  assert.deepEqual(deleted, [
    "KUBE-SERVICES",
    "KUBE-POSTROUTING",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL", // nat's: ipvs mode's
    "KUBE-MARK-MASQ",
    "KUBE-FORWARD",
    "KUBE-NODE-PORT",
    "KUBE-PROXY-FIREWALL",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
  ]);
  assert.ok(
    lines.includes(
      '-D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    ),
  );
  assert.ok(
    lines.includes(
      '-D INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER',
    ),
  );
  // filter's KUBE-FIREWALL and its jumps are the kubelet's.
  assert.ok(!lines.some((l) => l.includes("-j KUBE-FIREWALL") && l.startsWith("-D ")), script);
  // Each chain is flushed (declared) before it is deleted; the jumps go first.
  const nat = script.slice(0, script.indexOf("COMMIT"));
  assert.ok(nat.indexOf(":KUBE-NODE-PORT - [0:0]") < nat.indexOf("-D PREROUTING"));
  assert.ok(nat.lastIndexOf("-D ") < nat.indexOf("-X "));
});

Deno.test("ipvsChainsCleanupScript() leaves the iptables mode's chains to it while it runs", () => {
  const script = ipvsChainsCleanupScript(parseSave(IPVS_SAVE), FIXED_CHAINS);
  const deleted = script.split("\n").filter((l) => l.startsWith("-X ")).map((l) => l.slice(3));
  assert.deepEqual(deleted, [
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL",
    "KUBE-NODE-PORT",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
  ]);
  // A chain a kept one still jumps to stays (the iptables mode's first sync rewrites the kept
  // chains, and the next clean-up, at the next start, takes it): nat KUBE-NODE-PORT from
  // KUBE-SERVICES, KUBE-SOURCE-RANGES-FIREWALL from KUBE-PROXY-FIREWALL.
  assert.ok(!script.includes(":KUBE-NODE-PORT - [0:0]\n:KUBE-LOAD-BALANCER"));
  assert.ok(!script.includes("-X KUBE-SOURCE-RANGES-FIREWALL"));
  assert.equal(
    ipvsChainsCleanupScript(parseSave("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"), NONE),
    "",
  );
});

/** A fake node: answers each program from `answers` (by argv prefix) and records the calls. */
function fakeNode(answers: [string, Partial<ProgramResult> | "missing"][]) {
  const calls: string[] = [];
  const run: LeftoverRunner = (argv, options) => {
    const line = argv.join(" ");
    calls.push(options?.stdin === undefined ? line : `${line} <<${options.stdin.split("\n")[0]}`);
    const answer = answers.find(([prefix]) => line.startsWith(prefix))?.[1];
    if (answer === "missing") return Promise.reject(new Deno.errors.NotFound(argv[0]));
    return Promise.resolve({ code: 0, stdout: "", stderr: "", timedOut: false, ...answer });
  };
  return { calls, run };
}

Deno.test("removeIpvsLeftovers() flushes IPVS, deletes kube-ipvs0, cleans the chains, then destroys the ipsets", async () => {
  const node = fakeNode([
    ["ipvsadm -S -n", {
      stdout:
        "-A -t 10.96.0.10:80 -s rr\n-a -t 10.96.0.10:80 -r 10.244.1.11:8080 -m -w 1\n-A -u 10.96.0.53:53 -s rr\n",
    }],
    ["iptables-nft-save", { stdout: IPVS_SAVE }],
    ["ip6tables-nft-save", { stdout: "" }],
    ["iptables-legacy-save", { code: 1, stderr: "legacy tables not here" }],
    ["ip6tables-legacy-save", "missing"],
    ["ipset list -n", {
      stdout: "KUBE-CLUSTER-IP\nKUBE-6-CLUSTER-IP\nmy-own-set\nKUBE-NODE-PORT-TCP\n",
    }],
  ]);
  const logged: string[] = [];
  const failures: string[] = [];
  const removed = await removeIpvsLeftovers({
    log: (line) => logged.push(line),
    onFailure: (what) => failures.push(what),
    run: node.run,
    hasIpvsModule: () => Promise.resolve(true),
  });
  const mutations = node.calls.filter((c) => /-C|delete|restore|destroy/.test(c));
  assert.deepEqual(mutations, [
    "ipvsadm -C",
    "ip link delete dev kube-ipvs0",
    "iptables-nft-restore --noflush -w 5 <<*nat",
    "ipset destroy KUBE-CLUSTER-IP",
    "ipset destroy KUBE-6-CLUSTER-IP",
    "ipset destroy KUBE-NODE-PORT-TCP",
  ]);
  assert.deepEqual(failures, []);
  assert.equal(removed[0], "IPVS virtual servers (2)");
  assert.equal(removed[1], "link kube-ipvs0");
  assert.match(
    removed[2],
    /^IPv4 iptables-nft chains nat KUBE-SERVICES, .*filter KUBE-IPVS-OUT-FILTER$/,
  );
  assert.equal(removed[3], "ipsets KUBE-CLUSTER-IP, KUBE-6-CLUSTER-IP, KUBE-NODE-PORT-TCP");
  assert.deepEqual(logged, [
    `removed what kube-proxy's ipvs mode left on this node: ${removed.join("; ")}`,
  ]);
});

Deno.test("removeIpvsLeftovers() skips IPVS without the ip_vs module, and ipsets without the tool, saying so", async () => {
  const node = fakeNode([
    ["ip -o link show", { code: 1, stderr: 'Device "kube-ipvs0" does not exist.' }],
    ["ipset", "missing"],
  ]);
  const notes: string[] = [];
  const removed = await removeIpvsLeftovers({
    log: () => assert.fail("nothing removed, nothing to say"),
    note: (line) => notes.push(line),
    onFailure: (what, err) => assert.fail(`${what}: ${err}`),
    run: node.run,
    hasIpvsModule: () => Promise.resolve(false),
  });
  assert.deepEqual(removed, []);
  assert.ok(!node.calls.some((c) => c.startsWith("ipvsadm")), node.calls.join("\n"));
  assert.deepEqual(notes, [
    "no ipset program: no KUBE-* ipsets to look for",
    "no ip_vs module in this kernel: no IPVS virtual servers to flush",
  ]);
});

Deno.test("removeIpvsLeftovers() flushes IPVS where the module cannot be seen only on a node that shows ipvs mode", async () => {
  // With the image's permissions Deno cannot look into /sys: the node's own evidence decides,
  // so IPVS is never asked (which could load ip_vs) on a node that never ran ipvs mode.
  const quiet = { log: () => {}, note: () => {}, onFailure: () => {} };
  const unknown = () => Promise.resolve(undefined);
  const plain = fakeNode([
    ["ip -o link show", { code: 1, stderr: 'Device "kube-ipvs0" does not exist.' }],
    ["ipset list -n", { stdout: "my-own-set\n" }],
  ]);
  await removeIpvsLeftovers({ ...quiet, run: plain.run, hasIpvsModule: unknown });
  assert.ok(!plain.calls.some((c) => c.startsWith("ipvsadm")), plain.calls.join("\n"));

  const former = fakeNode([
    ["ipvsadm -S -n", { stdout: "-A -t 10.96.0.10:80 -s rr\n" }],
    ["ipset list -n", { stdout: "" }],
  ]);
  const removed = await removeIpvsLeftovers({ ...quiet, run: former.run, hasIpvsModule: unknown });
  assert.ok(former.calls.includes("ipvsadm -C"), former.calls.join("\n"));
  assert.equal(removed[0], "IPVS virtual servers (1)");
});

Deno.test("removeIpvsLeftovers() reports each failure and still runs the other steps", async () => {
  const node = fakeNode([
    ["ipvsadm", "missing"],
    ["ip link delete", { code: 2, stderr: "RTNETLINK answers: Operation not permitted" }],
    ["ipset list -n", { stdout: "KUBE-CLUSTER-IP\nKUBE-LOOP-BACK\n" }],
    ["ipset destroy KUBE-CLUSTER-IP", {
      code: 1,
      stderr: "Set cannot be destroyed: it is in use by a kernel component",
    }],
  ]);
  const failures: [string, string][] = [];
  const removed = await removeIpvsLeftovers({
    log: () => {},
    onFailure: (what, err) => failures.push([what, (err as Error).message]),
    run: node.run,
    hasIpvsModule: () => Promise.resolve(true),
  });
  assert.deepEqual(failures.map(([what]) => what), [
    "the IPVS virtual servers",
    "link kube-ipvs0",
    "ipset KUBE-CLUSTER-IP",
  ]);
  assert.match(
    failures[0][1],
    /^ipvsadm is not installed \(needed for: ipvsadm -S -n\)$/,
  );
  assert.match(failures[2][1], /in use by a kernel component/);
  assert.deepEqual(removed, ["ipsets KUBE-LOOP-BACK"]);
});

Deno.test("ipvsChainsCleanupScript() takes KUBE-SERVICES and the like only where the tables show ipvs mode", () => {
  const iptablesMode = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
`;
  assert.equal(ipvsChainsCleanupScript(parseSave(iptablesMode), NONE), "");
  const withIpset = iptablesMode.replace(
    "COMMIT",
    "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\nCOMMIT",
  );
  assert.match(ipvsChainsCleanupScript(parseSave(withIpset), NONE), /-X KUBE-SERVICES/);
});

Deno.test("removeIpvsLeftovers() reads no iptables rules on a node without kube-ipvs0 or ipvs mode's ipsets", async () => {
  const node = fakeNode([
    ["ip -o link show", { code: 1, stderr: 'Device "kube-ipvs0" does not exist.' }],
    ["ipset list -n", { stdout: "someone-elses-set\n" }],
  ]);
  const removed = await removeIpvsLeftovers({
    log: () => assert.fail("nothing removed, nothing to say"),
    note: () => {},
    onFailure: (what, err) => assert.fail(`${what}: ${err}`),
    run: node.run,
    hasIpvsModule: () => Promise.resolve(false),
  });
  assert.deepEqual(removed, []);
  assert.deepEqual(node.calls, ["ipset list -n", "ip -o link show dev kube-ipvs0"]);
});
