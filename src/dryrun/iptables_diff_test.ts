import assert from "node:assert/strict";
import { parseSave, splitWords } from "../render/iptables/reconcile.ts";
import { diffIptablesSection, normalRule } from "./iptables_diff.ts";

const same = (ours: string, saved: string, family: "IPv4" | "IPv6" = "IPv4") =>
  assert.equal(normalRule(splitWords(ours), family), normalRule(splitWords(saved), family));

Deno.test("normalRule() reads our rules and iptables-save's spelling of them as the same", () => {
  same(
    '-m comment --comment "default/web:http" -m tcp -p tcp -d 10.96.0.11 --dport 80 -j REJECT',
    '-d 10.96.0.11/32 -p tcp -m comment --comment "default/web:http" -m tcp --dport 80 ' +
      "-j REJECT --reject-with icmp-port-unreachable",
  );
  same("-j MARK --or-mark 0x004000", "-j MARK --set-xmark 0x4000/0x4000");
  same("-j MARK --xor-mark 0x004000", "-j MARK --set-xmark 0x4000/0x0");
  same(
    '-m comment --comment "x" ! -s 10.244.0.1/16 -j KUBE-MARK-MASQ',
    "! -s 10.244.0.0/16 -m comment --comment x -j KUBE-MARK-MASQ",
  );
  same(
    "-m statistic --mode random --probability 0.0015625000 -j KUBE-SEP-A",
    "-m statistic --mode random --probability 0.00156249991 -j KUBE-SEP-A",
  );
  same(
    "-m recent --name KUBE-SEP-A --set -j DNAT --to-destination [fd00:0::1]:80",
    "-m recent --set --name KUBE-SEP-A --mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff --rsource -j DNAT --to-destination [fd00::1]:80",
    "IPv6",
  );
  same("-d ::/0 -j KUBE-CLUSTER-IPS", "-j KUBE-CLUSTER-IPS", "IPv6");
  assert.notEqual(
    normalRule(splitWords("-m mark ! --mark 0x4000/0x4000 -j RETURN"), "IPv4"),
    normalRule(splitWords("-m mark --mark 0x4000/0x4000 -j RETURN"), "IPv4"),
  );
});

Deno.test("diffIptablesSection() keeps only the chains whose rules differ, and the jumps that are missing", () => {
  const wanted = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n" +
    '-A KUBE-SERVICES -m comment --comment "a" -d 10.96.0.10 -j KUBE-SVC-A\n' +
    "-A KUBE-SVC-A -j KUBE-SEP-B\nCOMMIT\n";
  const saved = parseSave(
    "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n" +
      '-A KUBE-SERVICES -d 10.96.0.10/32 -m comment --comment "a" -j KUBE-SVC-A\n' +
      "-A KUBE-SVC-A -j KUBE-SEP-OLD\nCOMMIT\n",
  );
  const diff = diffIptablesSection("IPv4", wanted, saved);
  assert.deepEqual(diff.chainsWritten, ["nat/KUBE-SVC-A"]);
  assert.ok(diff.jumpsAdded > 0, "the kernel has none of our jump rules");
  assert.match(diff.script, /^\*nat\n:KUBE-SVC-A - \[0:0\]\n/);
  assert.doesNotMatch(diff.script, /KUBE-SERVICES -m comment --comment "a"/);
});
