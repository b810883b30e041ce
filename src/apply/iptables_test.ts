import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { IptablesPlanner } from "../render/iptables/planner.ts";
import { endpointSlice, node, service } from "../../tests/fixtures/objects.ts";
import { BACKENDS, kernelGate, withIptablesScratch } from "../../tests/e2e/iptables_harness.ts";
import {
  applyIptables,
  applyIptablesPlan,
  chooseBackend,
  detectBackend,
  IptablesApplyError,
  readConntrackTCPLiberal,
  restoreSection,
  restoreStreamed,
  runIptables,
  withWholeTableCache,
} from "./iptables.ts";

const config = { ...DEFAULT_CONFIG, hostname: "node-a", clusterCIDRs: ["10.244.0.0/16"] };

function stateWith(names: string[]): ProxyState {
  const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
  state.onEvent({ kind: "Node", current: node("node-a", { ips: ["192.168.77.1"] }) });
  names.forEach((name, i) => {
    state.onEvent({
      kind: "Service",
      current: service({ name, clusterIPs: [`10.96.0.${10 + i}`] }),
    });
    state.onEvent({
      kind: "EndpointSlice",
      current: endpointSlice({
        name: `${name}-1`,
        service: name,
        endpoints: [`10.244.1.${11 + i}`],
      }),
    });
  });
  return state;
}

function fullScript(planner: IptablesPlanner, state: ProxyState): string {
  const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
  plan.commit();
  return plan.script;
}

Deno.test({
  name:
    "applyIptables() reports the line iptables-restore refused, and the kernel keeps nothing of it",
  ignore: kernelGate.ignore,
  fn: async () => {
    const script = (rule: string) =>
      ["# kube-nftproxy IPv4 partial sync", "*nat", ":KUBE-SERVICES - [0:0]", rule, "COMMIT", ""]
        .join("\n");
    const refused = async (ns: string, backend: "nft" | "legacy", rule: string) => {
      const err = await applyIptables(script(rule), { netns: ns, backend }).then(
        () => assert.fail(`accepted ${rule}`),
        (e) => e,
      );
      assert.ok(err instanceof IptablesApplyError, String(err));
      assert.equal(err.family, "IPv4");
      return err;
    };
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        const bad = "-A KUBE-SERVICES -p tcp --dport 99999 -j RETURN";
        const err = await refused(k.ns, backend, bad);
        assert.equal(err.line, 4, err.message);
        // The same line is named when the whole-table listing is put in front of it.
        const listed = await applyIptables(script(bad), {
          netns: k.ns,
          backend,
          wholeTableCacheChains: 0,
        }).catch((e) => e);
        assert.equal(listed.line, 4, listed.message);
        assert.equal(err.scriptLine, bad);
        assert.match(err.message, /at line 4: -A KUBE-SERVICES -p tcp --dport 99999 -j RETURN/);
        assert.match(err.stderr, /invalid port/);
        // A jump to a missing chain: iptables-nft only notices when the table commits.
        const missing = await refused(k.ns, backend, "-A KUBE-SERVICES -j KUBE-SVC-DOESNOTEXIST00");
        assert.ok([4, 5].includes(missing.line), missing.message);
        assert.ok(!(await k.saveText("IPv4", backend)).includes("KUBE-SERVICES"));
      });
    }
  },
});

Deno.test({
  name: "applyIptables() removes the chains an earlier process left behind at its first full sync",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        await k.apply(fullScript(new IptablesPlanner(config), stateWith(["web", "old"])), backend);
        const before = await k.save("IPv4", backend);
        assert.equal([...before.nat.chains].filter((c) => c.startsWith("KUBE-SEP-")).length, 2);
        // A new process (fresh planner) no longer has the Service "old".
        await k.apply(fullScript(new IptablesPlanner(config), stateWith(["web"])), backend);
        const after = await k.save("IPv4", backend);
        assert.equal([...after.nat.chains].filter((c) => c.startsWith("KUBE-SEP-")).length, 1);
        assert.equal([...after.nat.chains].filter((c) => c.startsWith("KUBE-SVC-")).length, 1);
      });
    }
  },
});

Deno.test({
  name:
    "applyIptablesPlan() streams a full sync: the same rules as the script applied whole, leftovers of an earlier process removed, jumps restored",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        // An earlier process left the chains of Service "old".
        await k.apply(fullScript(new IptablesPlanner(config), stateWith(["web", "old"])), backend);
        const state = stateWith(["web", "db"]);
        const planner = new IptablesPlanner(config);
        const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
        // With the whole-table listing too (iptables-nft only), as at 10,000 services.
        await applyIptablesPlan(plan, { netns: k.ns, backend, wholeTableCacheChains: 0 });
        plan.commit();
        const streamed = await k.save("IPv4", backend);
        const chains = (prefix: string) =>
          [...streamed.nat.chains].filter((c) => c.startsWith(prefix)).sort();
        assert.equal(chains("KUBE-SVC-").length, 2, "web and db, not old");
        assert.equal(chains("KUBE-SEP-").length, 2);
        // The same plan's script applied whole in a fresh namespace gives the same rules.
        await withIptablesScratch(async (whole) => {
          await whole.apply(plan.script, backend);
          const expected = await whole.save("IPv4", backend);
          for (const table of ["filter", "nat"] as const) {
            const specs = (t: typeof streamed) =>
              t[table].rules.map((r) => `${r.chain} ${r.spec}`).sort();
            assert.deepEqual(specs(streamed), specs(expected), table);
          }
        });
        // A later full sync (nothing re-read but the built-in chains) restores a lost jump.
        const flush = await runIptables([`iptables-${backend}`, "-t", "nat", "-F", "PREROUTING"], {
          netns: k.ns,
        });
        assert.equal(flush.code, 0, flush.stderr);
        const again = planner.plan(state, { full: true, changed: new Set() });
        await applyIptablesPlan(again, { netns: k.ns, backend });
        again.commit();
        const healed = await k.save("IPv4", backend);
        assert.ok(
          healed.nat.rules.some((r) =>
            r.chain === "PREROUTING" && r.spec.includes("KUBE-SERVICES")
          ),
        );
      });
    }
  },
});

Deno.test("chooseBackend() follows kubelet's hint, then KUBE-SERVICES, then the rule count", () => {
  const hint = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n";
  const ours = "*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n";
  const rules = "*filter\n-A INPUT -j ACCEPT\n-A INPUT -j DROP\nCOMMIT\n";
  assert.equal(chooseBackend({ nft: "", legacy: "" }), "nft");
  assert.equal(chooseBackend({ nft: rules, legacy: hint }), "legacy");
  assert.equal(chooseBackend({ nft: hint, legacy: hint }), "nft");
  assert.equal(chooseBackend({ nft: rules, legacy: ours }), "legacy");
  assert.equal(chooseBackend({ nft: "", legacy: rules }), "legacy");
  assert.equal(chooseBackend({ nft: rules, legacy: rules }), "nft");
});

Deno.test({
  name: "detectBackend() picks the back end that already holds rules",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      assert.equal(await detectBackend({ netns: k.ns }), "nft");
      await restoreSection("*filter\n-A INPUT -p tcp --dport 1 -j ACCEPT\nCOMMIT\n", "IPv4", {
        netns: k.ns,
        backend: "legacy",
      });
      assert.equal(await detectBackend({ netns: k.ns }), "legacy");
    });
  },
});

Deno.test("readConntrackTCPLiberal() reads the sysctl, and false when it cannot", async () => {
  const file = await Deno.makeTempFile();
  try {
    await Deno.writeTextFile(file, "1\n");
    assert.equal(await readConntrackTCPLiberal(file), true);
    await Deno.writeTextFile(file, "0\n");
    assert.equal(await readConntrackTCPLiberal(file), false);
  } finally {
    await Deno.remove(file);
  }
  assert.equal(await readConntrackTCPLiberal("/nonexistent/knp"), false);
});

Deno.test("withWholeTableCache() lists a table first only when its part names many chains", () => {
  const section = [
    "# kube-nftproxy IPv4 full sync",
    "*filter",
    ":KUBE-FORWARD - [0:0]",
    "-A KUBE-FORWARD -j ACCEPT",
    "COMMIT",
    "*nat",
    ":KUBE-SVC-A - [0:0]",
    ":KUBE-SERVICES - [0:0]",
    "-A KUBE-SERVICES -d 10.96.0.10 -j KUBE-SVC-A",
    "-A KUBE-SVC-A -j KUBE-SEP-B",
    '-I PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    "COMMIT",
    "",
  ].join("\n");
  assert.equal(withWholeTableCache(section, 4), section, "filter names 1 chain, nat 4");
  // The built-in chain's rule (and the declaration of its target) before the listing.
  assert.deepEqual(withWholeTableCache(section, 3).split("\n").slice(5, 12), [
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    '-I PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    "-S",
    ":KUBE-SVC-A - [0:0]",
    "-A KUBE-SERVICES -d 10.96.0.10 -j KUBE-SVC-A",
    "-A KUBE-SVC-A -j KUBE-SEP-B",
  ]);
});

Deno.test({
  name: "applyIptables() loads a section with the whole-table listing in front (iptables-nft)",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      const script = fullScript(new IptablesPlanner(config), stateWith(["web", "db"]));
      await applyIptables(script, { netns: k.ns, backend: "nft", wholeTableCacheChains: 0 });
      const saved = await k.save("IPv4", "nft");
      assert.equal([...saved.nat.chains].filter((c) => c.startsWith("KUBE-SEP-")).length, 2);
    });
  },
});

Deno.test({
  name:
    "restoreStreamed() whose rendering fails half-way commits none of that section and throws the rendering's error, at once",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        const broken = new Error("a bug in a renderer");
        function* render(): Generator<string> {
          yield "*nat\n:KUBE-HALF - [0:0]\n-A KUBE-HALF -j RETURN\n";
          throw broken;
        }
        const started = performance.now();
        await assert.rejects(restoreStreamed(render, "IPv4", { netns: k.ns, backend }), broken);
        // The program is ended, not left waiting for the rest until the time limit.
        assert.ok(performance.now() - started < 20_000, backend);
        assert.doesNotMatch(await k.saveText("IPv4", backend), /KUBE-HALF/, backend);
      });
    }
  },
});
