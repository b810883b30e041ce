/**
 * Property: a full sync written over netlink (src/apply/nft_batch.ts) builds exactly the tables
 * `nft -f` builds from the same script — every chain, rule, set, element, comment and counter,
 * as `nft list ruleset` prints them — for any cluster; over a table already there, it replaces
 * it as the script says; a transaction the kernel refuses changes nothing and leaves no stage.
 *
 * The writer runs inside the scratch namespace (its netlink socket must belong there), one
 * Deno process for all clusters.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import { cluster } from "./arbitraries.ts";
import { propertySeed, renderFull } from "./cluster.ts";

const TABLE = "kube-nftproxy";

/** One cluster's outcome in the namespace. */
interface Outcome {
  readonly index: number;
  /** `same`, `differs`, `nft-refused` (nft -f did not take it either), or the writer's error. */
  readonly result: string;
  readonly detail?: string;
}

/** The module body run in the namespace: both ways for each script, the listings compared. */
function comparer(scriptsFile: string): string {
  const apply = new URL("../../src/apply/nft.ts", import.meta.url).href;
  const batch = new URL("../../src/apply/nft_batch.ts", import.meta.url).href;
  return `
    import { applyNft, runNft } from ${JSON.stringify(apply)};
    import { applyOverNetlink } from ${JSON.stringify(batch)};
    const scripts = JSON.parse(await Deno.readTextFile(${JSON.stringify(scriptsFile)}));
    const list = async () => (await runNft(["list", "ruleset"])).stdout;
    const flush = () => runNft(["flush", "ruleset"]);
    const out = [];
    let previous = "";
    for (const [index, script] of scripts.entries()) {
      await flush();
      // The previous cluster's tables first: a full script replaces what is there.
      if (previous) await applyNft(previous).catch(() => {});
      try { await applyNft(script); } catch (e) { out.push({ index, result: "nft-refused" }); continue; }
      const byNft = await list();
      await flush();
      if (previous) await applyNft(previous).catch(() => {});
      try {
        await applyOverNetlink(script, { table: ${
    JSON.stringify(TABLE)
  }, runNft: (s) => applyNft(s) });
      } catch (e) { out.push({ index, result: e.name, detail: e.message }); previous = script; continue; }
      const byNetlink = await list();
      if (byNetlink === byNft) out.push({ index, result: "same" });
      else {
        const a = byNft.split("\\n"), b = byNetlink.split("\\n");
        const at = a.findIndex((line, i) => line !== b[i]);
        out.push({ index, result: "differs", detail: JSON.stringify([a[at], b[at]]) });
      }
      previous = script;
    }
    console.log(JSON.stringify(out));
  `;
}

Deno.test({
  name: "a full sync written over netlink builds the tables nft -f builds from the same script",
  ignore: kernelGate.ignore,
  fn: async () => {
    const seed = propertySeed();
    const clusters = fc.sample(cluster, { seed, numRuns: 80 });
    const scripts = clusters.map((c) => renderFull(c, TABLE));
    const file = await Deno.makeTempFile({ prefix: "knp-netlink-", suffix: ".json" });
    try {
      await Deno.writeTextFile(file, JSON.stringify(scripts));
      const outcomes: Outcome[] = await withScratch(async (k) =>
        JSON.parse(await k.evaluate(comparer(file)))
      );
      const bad = outcomes.filter((o) => o.result !== "same" && o.result !== "nft-refused");
      assert.deepEqual(bad, [], `seed ${seed} (PROPERTY_SEED=${seed} replays it)`);
      const same = outcomes.filter((o) => o.result === "same").length;
      assert.ok(same >= 0.9 * scripts.length, `only ${same} of ${scripts.length} compared`);
    } finally {
      await Deno.remove(file);
    }
  },
});

Deno.test({
  name: "a transaction the kernel refuses over netlink changes nothing and leaves no stage table",
  ignore: kernelGate.ignore,
  fn: async () => {
    const batch = new URL("../../src/apply/nft_batch.ts", import.meta.url).href;
    const apply = new URL("../../src/apply/nft.ts", import.meta.url).href;
    const before = `add table ip ${TABLE}
add map ip ${TABLE} service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }
add chain ip ${TABLE} svc-web
add element ip ${TABLE} service-ips { 10.96.0.10 . tcp . 80 : goto svc-web }
`;
    // Replaces the table, but one element goes to a chain that does not exist.
    const broken = `add table ip ${TABLE}
delete table ip ${TABLE}
add table ip ${TABLE}
add map ip ${TABLE} service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }
add chain ip ${TABLE} svc-db
add element ip ${TABLE} service-ips { 10.96.0.11 . tcp . 5432 : goto svc-db, 10.96.0.12 . tcp . 53 : goto svc-missing }
`;
    await withScratch(async (k) => {
      await k.load(before);
      const listed = await k.list("ip");
      const printed = await k.evaluate(`
        import { applyOverNetlink } from ${JSON.stringify(batch)};
        import { applyNft } from ${JSON.stringify(apply)};
        try {
          await applyOverNetlink(${
        JSON.stringify(broken)
      }, { table: "${TABLE}", runNft: (s) => applyNft(s) });
          console.log("applied");
        } catch (e) { console.log(e.name + ": " + e.message); }
      `);
      assert.match(
        printed,
        /NetlinkError: the kernel refused add element ip kube-nftproxy service-ips: ENOENT/,
      );
      assert.equal(await k.list("ip"), listed, "the table as it was");
      const tables = await k.evaluate(`
        const out = await new Deno.Command("nft", { args: ["list", "tables"] }).output();
        console.log(new TextDecoder().decode(out.stdout));
      `);
      assert.doesNotMatch(tables, /stage/);
    });
  },
});
