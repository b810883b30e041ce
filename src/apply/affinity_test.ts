import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import { NftPlanner } from "../render/nft/planner.ts";
import {
  AffinityIds,
  formatAffinityId,
  parseAffinityListing,
  staleAffinityKeys,
} from "../render/nft/affinity.ts";
import { ProxyState } from "../tracker/proxy_state.ts";
import { endpointSlice, service } from "../../tests/fixtures/objects.ts";
import { kernelGate, withScratch } from "../../tests/nft_scratch.ts";
import { runNft } from "./nft.ts";
import { cleanStaleAffinity } from "./affinity.ts";

const sticky = service({
  name: "sticky",
  clusterIPs: ["10.96.0.19"],
  spec: { sessionAffinity: "ClientIP" },
});
const slice = (ips: string[]) =>
  endpointSlice({ name: "sticky-1", service: "sticky", endpoints: ips });

Deno.test("staleAffinityKeys() keeps entries pointing at a current endpoint of their port and drops the rest", () => {
  const entries = parseAffinityListing(JSON.stringify({
    nftables: [{ metainfo: {} }, {
      map: {
        name: "affinity",
        elem: [
          [{ elem: { val: { concat: ["1.1.1.1", "4b50:1"] }, expires: 9 } }, {
            concat: ["10.244.1.11", 8080],
          }],
          [{ concat: ["2.2.2.2", "4b50:1"] }, { concat: ["10.244.1.12", 8080] }],
          [{ concat: ["3.3.3.3", "4b50:2"] }, { concat: ["10.244.1.11", 8080] }],
        ],
      },
    }],
  }));
  const targets = new Map([["4b50:1", new Set(["10.244.1.11 . 8080"])]]);
  assert.deepEqual(staleAffinityKeys(entries, targets), ["2.2.2.2 . 4b50:1", "3.3.3.3 . 4b50:2"]);
});

Deno.test("AffinityIds gives each port an id from its name alone, and two ports never one id", () => {
  const a = new AffinityIds();
  const b = new AffinityIds();
  b.idOf("other/x:y/UDP");
  assert.equal(a.idOf("default/web:http/TCP"), b.idOf("default/web:http/TCP"));
  assert.ok(a.idOf("default/web:http/TCP") >= 0x10000000);
  const ids = new Set(Array.from({ length: 2000 }, (_, i) => a.idOf(`ns/svc-${i}:p/TCP`)));
  assert.equal(ids.size, 2000);
  a.forget("default/web:http/TCP");
  assert.equal(a.idOf("default/web:http/TCP"), b.idOf("default/web:http/TCP"));
  assert.match(formatAffinityId(0x4b500001), /^4b50:1$/);
});

Deno.test("parseAffinityListing() reads nft 1.0.6's and 1.1.3's JSON alike", () => {
  for (const release of ["1.0.6", "1.1.3", "1.1.3-protocols"]) {
    const json = Deno.readTextFileSync(
      new URL(`../../tests/fixtures/nft/${release}/list-map-ip-affinity.json`, import.meta.url),
    );
    const entries = parseAffinityListing(json);
    assert.equal(entries.length, 1, release);
    assert.match(entries[0].id, /^[0-9a-f]{1,4}:[0-9a-f]{1,4}$/, release);
    assert.equal(entries[0].key, `192.168.77.2 . ${entries[0].id}`, release);
    assert.match(entries[0].endpoint, /^10\.244\.1\.1[123] \. 8080$/, release);
  }
});

Deno.test({
  name: "cleanStaleAffinity() deletes only the kernel's entries for removed endpoints",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (k) => {
      const state = new ProxyState({ hostname: "node-a", log: () => {} });
      const planner = new NftPlanner({ ...DEFAULT_CONFIG, hostname: "node-a" });
      const sync = () => {
        const { changed } = state.takeChanges();
        const plan = planner.plan(state, { full: false, changed });
        plan.commit();
        return plan.script;
      };
      state.onEvent({ kind: "Service", current: sticky });
      state.onEvent({ kind: "EndpointSlice", current: slice(["10.244.1.11", "10.244.1.12"]) });
      await k.load(sync());
      const id = formatAffinityId(new AffinityIds().idOf("default/sticky:http/TCP"));
      await k.load(
        "add element ip kube-nftproxy affinity { " +
          `1.1.1.1 . ${id} : 10.244.1.11 . 8080, ` +
          `2.2.2.2 . ${id} : 10.244.1.12 . 8080 }\n`,
      );
      state.onEvent({
        kind: "EndpointSlice",
        previous: slice(["10.244.1.11", "10.244.1.12"]),
        current: slice(["10.244.1.11"]),
      });
      await k.load(sync());
      assert.equal(await cleanStaleAffinity(planner, { table: "kube-nftproxy", netns: k.ns }), 1);
      const listed = await runNft(["list", "map", "ip", "kube-nftproxy", "affinity"], {
        netns: k.ns,
      });
      assert.ok(listed.stdout.includes(`1.1.1.1 . ${id} `), listed.stdout);
      assert.doesNotMatch(listed.stdout, /2\.2\.2\.2/);
      assert.equal(await cleanStaleAffinity(planner, { table: "kube-nftproxy", netns: k.ns }), 0);
    }),
});
