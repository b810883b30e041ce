/**
 * Isolation of the iptables mode: rules and chains that are not ours — a DNAT rule someone
 * added to PREROUTING, Docker-like chains in nat and filter, a mark rule in mangle (where our
 * only chain is the empty KUBE-PROXY-CANARY), and an nft table of another
 * program — are byte-identical after syncs (full and partial), after cleanup and across mode
 * switches, with both iptables back ends.
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../src/config/config.ts";
import { cleanupIptables, restoreSection } from "../../src/apply/iptables.ts";
import { removeOtherModes } from "../../src/backend/backends.ts";
import { createLogger } from "../../src/log.ts";
import { applyNft, deleteTables, runNft } from "../../src/apply/nft.ts";
import { IptablesPlanner } from "../../src/render/iptables/planner.ts";
import { NftPlanner } from "../../src/render/nft/planner.ts";
import { ProxyState } from "../../src/tracker/proxy_state.ts";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import {
  BACKENDS,
  type IptablesScratch,
  kernelGate,
  withIptablesScratch,
  withoutComments,
} from "./iptables_harness.ts";

const FOREIGN_IPTABLES = `*nat
:DOCKER - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
-A PREROUTING -p tcp -m tcp --dport 2222 -j DNAT --to-destination 10.1.1.1:22
-A OUTPUT ! -d 127.0.0.0/8 -m addrtype --dst-type LOCAL -j DOCKER
-A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE
-A DOCKER -i docker0 -j RETURN
COMMIT
*filter
:DOCKER-USER - [0:0]
-A FORWARD -j DOCKER-USER
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A DOCKER-USER -j RETURN
COMMIT
*mangle
:FOREIGN-MARK - [0:0]
-A PREROUTING -p tcp -m tcp --dport 2222 -j FOREIGN-MARK
-A FOREIGN-MARK -j MARK --set-xmark 0x1/0xffffffff
COMMIT
`;

const FOREIGN_NFT = `table inet foreign {
  set blocked { type ipv4_addr; elements = { 198.51.100.7 } }
  chain input { type filter hook input priority 0; policy accept; ip saddr @blocked drop; }
}
`;

const config = {
  ...DEFAULT_CONFIG,
  hostname: "node-a",
  clusterCIDRs: ["10.244.0.0/16", "fd00:10:244::/56"],
};

/** Adds the foreign iptables rules (both families) and the foreign nft table. */
async function addForeign(k: IptablesScratch, backend: "nft" | "legacy"): Promise<void> {
  await restoreSection(FOREIGN_IPTABLES, "IPv4", { netns: k.ns, backend });
  const v6 = FOREIGN_IPTABLES.replace(/ -s 172\.17\.0\.0\/16| ! -d 127\.0\.0\.0\/8/g, "")
    .replace("10.1.1.1:22", "[fd00::1]:22");
  await restoreSection(v6, "IPv6", { netns: k.ns, backend });
  await applyNft(FOREIGN_NFT, { netns: k.ns });
}

/** Everything foreign, as the kernel prints it. */
async function foreign(k: IptablesScratch, backend: "nft" | "legacy"): Promise<string> {
  const tables = await Promise.all(
    (["IPv4", "IPv6"] as const).map((f) => k.saveText(f, backend).then(withoutComments)),
  );
  const nft = await runNft(["list", "table", "inet", "foreign"], { netns: k.ns });
  return [...tables, nft.stdout].join("\n---\n");
}

/** The foreign part only: lines naming no KUBE-* chain. */
function notOurs(text: string): string {
  return text.split("\n").filter((l) => !l.includes("KUBE-")).join("\n");
}

Deno.test({
  name:
    "iptables mode leaves foreign iptables rules and a foreign nft table untouched by syncs and cleanup",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        await addForeign(k, backend);
        const before = await foreign(k, backend);

        const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
        state.onEvent({
          kind: "Node",
          current: node("node-a", { ips: ["192.168.77.1", "fd00:77::1"] }),
        });
        state.onEvent({ kind: "ServiceCIDR", current: serviceCIDR("k", ["10.96.0.0/16"]) });
        const web = service({
          name: "web",
          type: "NodePort",
          clusterIPs: ["10.96.0.10", "fd00:10:96::10"],
          ports: [{ name: "http", port: 80, nodePort: 30080 }],
        });
        const slice = endpointSlice({ name: "web-1", service: "web", endpoints: ["10.244.1.11"] });
        state.onEvent({ kind: "Service", current: web });
        state.onEvent({ kind: "EndpointSlice", current: slice });
        const planner = new IptablesPlanner(config);
        const sync = async (full: boolean) => {
          const plan = planner.plan(state, { full, changed: state.takeChanges().changed });
          await k.apply(plan.script, backend);
          plan.commit();
        };
        await sync(true);
        state.onEvent({ kind: "EndpointSlice", previous: slice, current: undefined });
        await sync(false);
        await sync(true);
        const synced = await foreign(k, backend);
        assert.match(synced, /KUBE-SERVICES/, "our rules are there");
        assert.equal(
          notOurs(synced),
          notOurs(before),
          `iptables-${backend}: foreign rules changed`,
        );

        await cleanupIptables({ netns: k.ns, backends: [backend] });
        assert.equal(
          await foreign(k, backend),
          before,
          `iptables-${backend}: cleanup changed foreign rules`,
        );
      });
    }
  },
});

Deno.test({
  name: "switching between nft and iptables modes removes only the other mode's rules",
  ignore: kernelGate.ignore,
  fn: async () => {
    for (const backend of BACKENDS) {
      await withIptablesScratch(async (k) => {
        await addForeign(k, backend);
        const before = await foreign(k, backend);
        const state = new ProxyState({ hostname: "node-a", log: (line) => assert.fail(line) });
        state.onEvent({
          kind: "Node",
          current: node("node-a", { ips: ["192.168.77.1", "fd00:77::1"] }),
        });
        state.onEvent({
          kind: "Service",
          current: service({ name: "web", clusterIPs: ["10.96.0.10", "fd00:10:96::10"] }),
        });
        state.onEvent({
          kind: "EndpointSlice",
          current: endpointSlice({ name: "web-1", service: "web", endpoints: ["10.244.1.11"] }),
        });
        state.onEvent({
          kind: "EndpointSlice",
          current: endpointSlice({
            name: "web-2",
            service: "web",
            addressType: "IPv6",
            endpoints: ["fd00:10:244:1::11"],
          }),
        });
        const { changed } = state.takeChanges(); // the events above, folded into the state
        const full = (planner: NftPlanner | IptablesPlanner) => {
          const plan = planner.plan(state, { full: true, changed });
          plan.commit();
          return plan.script;
        };
        const nftTables = async () =>
          (await runNft(["list", "tables"], { netns: k.ns })).stdout.includes("kube-nftproxy");
        const context = { log: createLogger({ write: () => {} }), netns: k.ns };

        // Running in nft mode; restarted in iptables mode: first sync, then the nft tables go.
        await applyNft(full(new NftPlanner(config)), { netns: k.ns });
        await k.apply(full(new IptablesPlanner(config)), backend);
        assert.ok(
          await nftTables(),
          "both modes' rules exist between the first sync and the switch",
        );
        await removeOtherModes({ ...config, mode: "iptables" }, context);
        assert.ok(!(await nftTables()));
        for (const family of ["IPv4", "IPv6"] as const) {
          const saved = await k.saveText(family, backend);
          assert.match(saved, /-A KUBE-SERVICES .*-j KUBE-SVC-/, `${family} rules stay:\n${saved}`);
        }

        // And back to nft mode: no KUBE-* chain or jump is left in either family.
        await applyNft(full(new NftPlanner(config)), { netns: k.ns });
        await removeOtherModes({ ...config, mode: "nft" }, context);
        assert.ok(await nftTables());
        for (const family of ["IPv4", "IPv6"] as const) {
          const saved = await k.saveText(family, backend);
          assert.ok(!saved.includes("KUBE-"), `iptables-${backend} ${family} leftovers:\n${saved}`);
        }

        await deleteTables(config.tableName, { netns: k.ns });
        assert.equal(
          await foreign(k, backend),
          before,
          `iptables-${backend}: foreign rules changed`,
        );
      });
    }
  },
});
