/**
 * Property: `--dry-run`'s diff is exact. For any pair of clusters A and B (hostile objects,
 * every configuration variant; B either A after a few changes or an unrelated cluster):
 *
 * - right after A's script was loaded, the diff against A's own script is empty (the listing
 *   reader and the script reader agree on everything the kernel prints back);
 * - the diff towards B loads on top of A, after which the diff against B is empty;
 * - and the kernel then holds exactly the tables a fresh load of B builds (compared as nft's
 *   JSON, elements as sets, rules in order).
 *
 * Pairs are checked many at a time, each in its own tables (`d0`, `d1`, …), with one `nft -f`
 * per stage; a rejected diff batch is retried pair by pair to name the culprit.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { applyNft, runNft } from "../../src/apply/nft.ts";
import { diffTables } from "../../src/dryrun/table_diff.ts";
import {
  type TableImage,
  tablesFromListing,
  tablesFromScript,
} from "../../src/dryrun/table_image.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import {
  firstDifference,
  listTables,
  playSequence,
  propertyRuns,
  propertySeed,
  reportChecked,
  sequence,
  summary,
  tableText,
} from "./cluster.ts";

/** Pairs checked in one batch. */
const BATCH_PAIRS = 40;

/** Kernel-side differences that change nothing (see listTables). */
const QUIRKS = { ignoreProtocolDependency: true };

interface Pair {
  readonly index: number;
  readonly table: string;
  readonly before: string;
  readonly after: string;
}

async function listed(ns: string): Promise<Map<string, TableImage>> {
  const out = await runNft(["list", "ruleset"], { netns: ns });
  if (out.code !== 0) throw new Error(`nft list ruleset: ${out.stderr}`);
  return tablesFromListing(out.stdout);
}

/** The diff of the pair's tables against the kernel's. */
function pairDiff(kernel: Map<string, TableImage>, script: string) {
  return diffTables(kernel, tablesFromScript(script));
}

function changes(diff: ReturnType<typeof diffTables>): string {
  return diff.tables.filter((t) => t.state !== "unchanged")
    .map((t) =>
      `${t.family} ${t.table} ${t.state}: ${t.reason ?? ""}\n${diff.script.slice(0, 1500)}`
    )
    .join("\n");
}

Deno.test({
  name:
    "--dry-run's diff between any two clusters is empty when nothing changed, loads, and builds exactly the wanted tables",
  ignore: kernelGate.ignore,
  fn: async () => {
    const count = Math.max(10, Math.ceil(propertyRuns() / 20));
    const seed = propertySeed();
    const started = performance.now();
    const sequences = fc.sample(sequence, { seed, numRuns: count });
    const failed: { index: number; error: string }[] = [];
    let changed = 0;
    let recreated = 0;
    let checked = 0;
    await withScratch((a) =>
      withScratch(async (b) => {
        for (let from = 0; from < count; from += BATCH_PAIRS) {
          const pairs: Pair[] = [];
          for (let index = from; index < Math.min(from + BATCH_PAIRS, count); index++) {
            const table = `d${index}`;
            // Even pairs: the cluster before and after some changes; odd: two unrelated ones.
            const run = playSequence(sequences[index], table);
            const after = index % 2 === 0
              ? run.fresh
              : playSequence(sequences[index - 1], table).fresh;
            pairs.push({ index, table, before: run.scripts[0], after });
          }
          await applyNft(pairs.map((p) => p.before).join(""), { netns: a.ns });
          const kernel = await listed(a.ns);
          const alive: Pair[] = [];
          const diffs: string[] = [];
          for (const p of pairs) {
            const none = pairDiff(kernel, p.before);
            if (none.script !== "") {
              failed.push({ index: p.index, error: `diff right after loading:\n${changes(none)}` });
              continue;
            }
            const diff = pairDiff(kernel, p.after);
            if (diff.tables.some((t) => t.state === "changed")) changed++;
            if (diff.tables.some((t) => t.state === "recreated")) recreated++;
            alive.push(p);
            diffs.push(diff.script);
          }
          try {
            await applyNft(diffs.join(""), { netns: a.ns });
          } catch {
            // Name the culprits: apply pair by pair.
            for (const [i, p] of [...alive.entries()].reverse()) {
              try {
                await applyNft(diffs[i], { netns: a.ns });
              } catch (err) {
                failed.push({
                  index: p.index,
                  error: `the diff was rejected: ${(err as Error).message}`,
                });
                alive.splice(i, 1);
              }
            }
          }
          const after = await listed(a.ns);
          await applyNft(alive.map((p) => p.after).join(""), { netns: b.ns });
          const [patched, fresh] = [await listTables(a.ns, QUIRKS), await listTables(b.ns, QUIRKS)];
          for (const p of alive) {
            const left = pairDiff(after, p.after);
            if (left.script !== "") {
              failed.push({
                index: p.index,
                error: `diff after applying the diff:\n${changes(left)}`,
              });
              continue;
            }
            let same = true;
            for (const family of ["ip", "ip6"]) {
              const x = tableText(patched.get(`${family} ${p.table}`));
              const y = tableText(fresh.get(`${family} ${p.table}`));
              if (x !== y) {
                same = false;
                failed.push({ index: p.index, error: `${family}: ${firstDifference(x, y)}` });
              }
            }
            if (same) checked++;
          }
          for (const ns of [a.ns, b.ns]) {
            await applyNft("flush ruleset\n", { netns: ns });
          }
        }
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        console.log(
          `dry-run property: ${count} pairs (PROPERTY_SEED=${seed}), ${changed} changed in ` +
            `place, ${recreated} recreated, ${failed.length} failed, ${seconds} s`,
        );
        assert.equal(
          failed.length,
          0,
          `${failed.length} of ${count} pairs failed:\n${summary(failed)}`,
        );
        // A pair is checked once the kernel after its diff was compared with a fresh load.
        reportChecked("dry-run property", { checked, generated: count, unit: "pairs" });
      })
    );
  },
});
