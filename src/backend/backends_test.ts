import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { createLogger } from "../log.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { IptablesPlanner } from "../render/iptables/planner.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import { endpointSlice, node, service } from "../../tests/fixtures/objects.ts";
import {
  BACKENDS,
  kernelGate,
  withIptablesScratch,
  withoutComments,
} from "../../tests/e2e/iptables_harness.ts";
import { applyNft, runNft } from "../apply/nft.ts";
import { cleanupIptables } from "../apply/iptables.ts";
import { runProgram } from "../apply/program.ts";
import {
  afterFirstApply,
  cleanUp,
  createBackend,
  removeOtherModes,
  removeUpstreamTables,
} from "./backends.ts";

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

function fullScript(planner: IptablesPlanner | NftPlanner, state: ProxyState): string {
  const plan = planner.plan(state, { full: true, changed: state.takeChanges().changed });
  plan.commit();
  return plan.script;
}

/** A logger that keeps its lines. */
function recordingLog(): { log: ReturnType<typeof createLogger>; lines: string[] } {
  const lines: string[] = [];
  return {
    // Severity and message of each klog line, as `I T message`.
    log: createLogger({
      write: (line) => lines.push(`${line[0]} T ${JSON.parse(line.slice(line.indexOf("] ") + 2))}`),
    }),
    lines,
  };
}

Deno.test("createBackend() gives the configured mode's back end, and nothing is asked of the kernel yet", async () => {
  const { log, lines } = recordingLog();
  for (const mode of ["nft", "iptables"] as const) {
    const backend = await createBackend({ ...config, mode }, { log, netns: "knp-unused" });
    assert.equal(backend.mode, mode);
  }
  assert.deepEqual(lines, []);
});

Deno.test({
  name: "removeOtherModes() removes nft tables in iptables mode and our iptables rules in nft mode",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      const { log } = recordingLog();
      const state = stateWith(["web"]);
      await applyNft(fullScript(new NftPlanner(config), state), { netns: k.ns });
      state.onEvent({
        kind: "Service",
        current: service({ name: "x", clusterIPs: ["10.96.0.99"] }),
      });
      await k.apply(fullScript(new IptablesPlanner(config), state), "nft");
      await k.apply(fullScript(new IptablesPlanner(config), state), "legacy");

      await removeOtherModes({ ...config, mode: "iptables" }, { log, netns: k.ns });
      const tables = (await runNft(["list", "tables"], { netns: k.ns })).stdout;
      assert.ok(!tables.includes("kube-nftproxy"), tables);
      assert.match(await k.saveText("IPv4", "nft"), /KUBE-SERVICES/, "iptables rules stay");

      await removeOtherModes({ ...config, mode: "nft" }, { log, netns: k.ns });
      const everything = async () => {
        const saved: string[] = [];
        for (const backend of BACKENDS) {
          for (const family of ["IPv4", "IPv6"] as const) {
            const text = await k.saveText(family, backend);
            assert.ok(!text.includes("KUBE-"), `${backend} ${family}:\n${text}`);
            saved.push(withoutComments(text)); // without the time it was saved
          }
        }
        return saved;
      };
      const left = await everything();
      // Nothing of ours is left: a cleanup now succeeds and changes nothing at all.
      await cleanupIptables({ netns: k.ns });
      assert.deepEqual(await everything(), left);
    });
  },
});

Deno.test({
  name:
    "cleanUp() removes the nft tables with --cleanup, the iptables rules too in iptables mode, and logs each",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      const state = stateWith(["web"]);
      const load = async () => {
        await applyNft(fullScript(new NftPlanner(config), state), { netns: k.ns });
        await k.apply(fullScript(new IptablesPlanner(config), state), "nft");
      };
      const nftTables = async () =>
        (await runNft(["list", "tables"], { netns: k.ns })).stdout.includes("kube-nftproxy");
      const iptablesRules = async () => (await k.saveText("IPv4", "nft")).includes("KUBE-");

      await load();
      let { log, lines } = recordingLog();
      await cleanUp(config, { log, netns: k.ns }, { cleanup: true, cleanupIptables: false });
      assert.deepEqual([await nftTables(), await iptablesRules()], [false, true]);
      assert.deepEqual(lines, ["I T removed tables ip/ip6 kube-nftproxy"]);

      await load();
      ({ log, lines } = recordingLog());
      const iptablesMode = { ...config, mode: "iptables" as const };
      await cleanUp(iptablesMode, { log, netns: k.ns }, { cleanup: true, cleanupIptables: false });
      assert.deepEqual([await nftTables(), await iptablesRules()], [false, false]);
      assert.deepEqual(lines, [
        "I T removed tables ip/ip6 kube-nftproxy",
        "I T removed the KUBE-* chains and their jump rules (iptables-nft and iptables-legacy)",
      ]);

      await load();
      ({ log, lines } = recordingLog());
      await cleanUp(config, { log, netns: k.ns }, { cleanup: false, cleanupIptables: true });
      assert.deepEqual([await nftTables(), await iptablesRules()], [true, false]);
      assert.equal(lines.length, 1);
      await cleanUp(config, { log, netns: k.ns }, { cleanup: true, cleanupIptables: false });
    });
  },
});

Deno.test({
  name:
    "removeUpstreamTables() deletes kube-proxy's ip/ip6 tables where present, never a table named ours",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      const tables = async () => (await runNft(["list", "tables"], { netns: k.ns })).stdout;
      await applyNft("add table ip kube-proxy\nadd table ip other\n", { netns: k.ns });
      let { log, lines } = recordingLog();
      await removeUpstreamTables(config, { log, netns: k.ns });
      assert.equal(await tables(), "table ip other\n");
      assert.deepEqual(lines, [
        "I T removed kube-proxy's nftables tables left on this node (ip kube-proxy)",
      ]);

      ({ log, lines } = recordingLog());
      await removeUpstreamTables(config, { log, netns: k.ns });
      assert.deepEqual(lines, [], "nothing to remove, nothing said");

      await applyNft("add table ip6 kube-proxy\n", { netns: k.ns });
      await removeUpstreamTables({ ...config, tableName: "kube-proxy" }, { log, netns: k.ns });
      assert.match(await tables(), /table ip6 kube-proxy/, "our own tables under that name stay");
      await removeOtherModes(config, { log, netns: k.ns });
      assert.equal(await tables(), "table ip other\n", "removed with the other modes' rules");
      await applyNft("delete table ip other\n", { netns: k.ns });
    });
  },
});

Deno.test("afterFirstApply() runs its follow-up once, after the first successful apply", async () => {
  const calls: string[] = [];
  let fail = true;
  const apply = afterFirstApply(
    (script) => {
      calls.push(`apply ${script}`);
      return fail ? Promise.reject(new Error("refused")) : Promise.resolve();
    },
    () => {
      calls.push("then");
      return Promise.reject(new Error("cannot"));
    },
    (err) => calls.push(`error ${(err as Error).message}`),
  );
  await assert.rejects(apply("a"), /refused/);
  fail = false;
  await apply("b");
  await apply("c");
  assert.deepEqual(calls, ["apply a", "apply b", "then", "error cannot", "apply c"]);
});

Deno.test({
  name:
    "cleanUp() removes what kube-proxy's ipvs mode left; an ipset still in use is reported to cleanupFailed",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      const sh = async (cmd: string[], stdin?: string) => {
        const r = await runProgram(cmd, { netns: k.ns, stdin });
        assert.equal(r.code, 0, `${cmd.join(" ")}: ${r.stderr}`);
        return r.stdout;
      };
      await sh(["ip", "link", "add", "kube-ipvs0", "type", "bridge"]);
      await sh(["ip", "addr", "add", "10.96.0.10/32", "dev", "kube-ipvs0"]);
      await sh(
        ["ipset", "restore"],
        "create KUBE-CLUSTER-IP hash:ip,port family inet\nadd KUBE-CLUSTER-IP 10.96.0.10,tcp:80\n" +
          "create KUBE-LOOP-BACK hash:ip,port,ip family inet\n",
      );
      await sh(
        ["iptables-nft-restore", "--noflush"],
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODE-PORT - [0:0]\n" +
          '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES\n' +
          "-A KUBE-SERVICES -m set --match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT\n" +
          "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT\nCOMMIT\n" +
          // Someone else's rule still matching one of the sets: that set cannot go.
          "*filter\n:SOMEONE-ELSE - [0:0]\n" +
          "-A SOMEONE-ELSE -m set --match-set KUBE-LOOP-BACK dst,dst,src -j ACCEPT\nCOMMIT\n",
      );
      const { log, lines } = recordingLog();
      const failed: string[] = [];
      await cleanUp(config, { log, netns: k.ns, cleanupFailed: (what) => failed.push(what) }, {
        cleanup: true,
        cleanupIptables: false,
      });
      assert.deepEqual(failed, ["ipset KUBE-LOOP-BACK"]);
      assert.ok(
        lines.includes(
          "I T removed what kube-proxy's ipvs mode left on this node: link kube-ipvs0; " +
            "IPv4 iptables-nft chains nat KUBE-SERVICES, nat KUBE-NODE-PORT; ipsets KUBE-CLUSTER-IP",
        ),
        lines.join("\n"),
      );
      assert.ok(
        lines.some((l) =>
          /^W T cannot remove ipset KUBE-LOOP-BACK left by kube-proxy's ipvs mode: .*in use/.test(l)
        ),
        lines.join("\n"),
      );
      assert.equal(
        (await runProgram(["ip", "link", "show", "kube-ipvs0"], { netns: k.ns })).code,
        1,
      );
      assert.equal((await sh(["ipset", "list", "-n"])).trim(), "KUBE-LOOP-BACK");
      assert.doesNotMatch(await sh(["iptables-nft-save", "-t", "nat"]), /KUBE-/);
    });
  },
});

Deno.test({
  name:
    "iptables mode's first streamed sync (applyPlan) removes the other modes' rules, as apply does",
  ignore: kernelGate.ignore,
  fn: async () => {
    await withIptablesScratch(async (k) => {
      await applyNft("add table ip kube-proxy\n", { netns: k.ns });
      const iptablesMode = {
        ...config,
        mode: "iptables" as const,
        iptablesBackend: "nft" as const,
      };
      const backend = await createBackend(iptablesMode, { log: recordingLog().log, netns: k.ns });
      const proxier = await backend.proxier(["IPv4"]);
      assert.ok(proxier.applyPlan, "iptables mode streams its plans");
      const state = stateWith(["web"]);
      const plan = proxier.planner.plan(state, {
        full: true,
        changed: state.takeChanges().changed,
      });
      await proxier.applyPlan(plan);
      plan.commit();
      const tables = (await runNft(["list", "tables"], { netns: k.ns })).stdout;
      assert.ok(!tables.includes("kube-proxy"), tables);
      assert.match(await k.saveText("IPv4", "nft"), /-A KUBE-SERVICES .*-j KUBE-SVC-/);
    });
  },
});
