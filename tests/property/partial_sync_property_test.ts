/**
 * Property: after any sequence of adds, updates, deletes and reverts (hostile objects included),
 * every partial sync's script loads on top of the ones before it, and the table they leave is
 * the table a fresh proxy's full sync of the final objects builds.
 *
 * Sequences are played many at a time, each into its own tables (`q0`, `q1`, …): step `n` of
 * every sequence goes into one `nft -f` run in namespace A, the fresh full syncs into namespace
 * B, and the two rulesets are compared table by table (elements as sets, rules in order, rule
 * handles ignored). A rejected batch is replayed sequence by sequence; the first culprit is
 * shrunk by fast-check to a minimal sequence.
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import { applyNft } from "../../src/apply/nft.ts";
import { kernelGate, withScratch } from "../nft_scratch.ts";
import {
  assertClean,
  firstDifference,
  type KnownBug,
  knownBug,
  knownSummary,
  listTables,
  playSequence,
  propertyRuns,
  propertySeed,
  reportChecked,
  type Sequence,
  sequence,
  type SequenceRun,
  shrinkCounterexample,
  stringsOf,
  summary,
  tableText,
  type TableView,
} from "./cluster.ts";

/** Kernel-side differences that change nothing (see {@link listTables}). */
const QUIRKS = { ignoreProtocolDependency: true };

/** Sequences played in one batch (one `nft -f` per step for all of them). */
const BATCH_SEQUENCES = 60;

/** Plays a sequence into table `table`; throws on a render error or an unclean script. */
function playChecked(seq: Sequence, table: string): SequenceRun {
  const run = playSequence(seq, table);
  const names = stringsOf([
    ...seq.initial,
    ...seq.steps.flat().flatMap((o) => "object" in o ? [o.object] : []),
  ]);
  for (const script of [...run.scripts, run.fresh]) {
    assertClean(script, { tables: [table], names });
  }
  return run;
}

/**
 * How the tables of `table` after partial syncs differ from the fresh ones. Sets that only the
 * partial side still holds are named on their own (partial syncs once leaked the per-endpoint
 * sets of IPv6 ClientIP affinity); anything else shows the first differing lines.
 */
function tableDifferences(
  table: string,
  partial: Map<string, TableView>,
  fresh: Map<string, TableView>,
): string[] {
  const out: string[] = [];
  for (const family of ["ip", "ip6"]) {
    const a = partial.get(`${family} ${table}`);
    const b = fresh.get(`${family} ${table}`);
    if (tableText(a) === tableText(b)) continue;
    const stale = new Set([...a?.sets.keys() ?? []].filter((name) => !b?.sets.has(name)));
    if (stale.size > 0 && tableText(a, { without: stale }) === tableText(b)) {
      out.push(`stale sets: ${[...stale].join(" ")}`);
    } else {
      out.push(`${family} ${table}: ${firstDifference(tableText(a), tableText(b))}`);
    }
  }
  return out;
}

Deno.test({
  name:
    "NftPlanner's partial syncs after any event sequence load in order and end in the table a fresh full sync builds",
  ignore: kernelGate.ignore,
  fn: async () => {
    const count = Math.max(1, Math.ceil(propertyRuns() / 10));
    const seed = propertySeed();
    const started = performance.now();
    const sequences = fc.sample(sequence, { seed, numRuns: count });
    const failed: { index: number; error: string }[] = [];
    const known = new Map<KnownBug, number>();
    const fail = (index: number, error: string) => {
      const bug = knownBug(error);
      if (bug) known.set(bug, (known.get(bug) ?? 0) + 1);
      else failed.push({ index, error });
    };
    let nftRuns = 0;
    let scripts = 0;
    let partials = 0;
    const generated = sequences.reduce((n, seq) => n + seq.steps.length, 0);
    let checked = 0;
    await withScratch((a) =>
      withScratch(async (b) => {
        for (let from = 0; from < sequences.length; from += BATCH_SEQUENCES) {
          const runs: { index: number; table: string; run: SequenceRun }[] = [];
          for (let index = from; index < Math.min(from + BATCH_SEQUENCES, count); index++) {
            try {
              runs.push({
                index,
                table: `q${index}`,
                run: playChecked(sequences[index], `q${index}`),
              });
            } catch (err) {
              fail(index, String(err));
            }
          }
          const alive = new Set(runs.map((r) => r.index));
          const steps = Math.max(0, ...runs.map((r) => r.run.scripts.length));
          for (let step = 0; step < steps; step++) {
            const now = runs.filter((r) => alive.has(r.index) && r.run.scripts[step] !== undefined);
            scripts += now.length;
            if (step > 0) partials += now.filter((r) => r.run.scripts[step] !== "").length;
            // Bisect a rejected step: halves that load are applied, single culprits drop out.
            const load = async (items: typeof now): Promise<void> => {
              nftRuns++;
              try {
                await applyNft(items.map((r) => r.run.scripts[step]).join(""), { netns: a.ns });
              } catch (err) {
                if (items.length === 1) {
                  alive.delete(items[0].index);
                  return fail(items[0].index, `step ${step}: ${(err as Error).message}`);
                }
                const half = Math.ceil(items.length / 2);
                await load(items.slice(0, half));
                await load(items.slice(half));
              }
            };
            await load(now);
          }
          const survivors = runs.filter((r) => alive.has(r.index));
          nftRuns++;
          await applyNft(survivors.map((r) => r.run.fresh).join(""), { netns: b.ns });
          const [partial, fresh] = [await listTables(a.ns, QUIRKS), await listTables(b.ns, QUIRKS)];
          for (const r of survivors) {
            const differences = tableDifferences(r.table, partial, fresh);
            for (const diff of differences) fail(r.index, diff);
            // Every step of a sequence whose end state was compared has been checked.
            if (differences.length === 0) checked += r.run.scripts.length - 1;
          }
          for (const [ns, tables] of [[a.ns, partial], [b.ns, fresh]] as const) {
            const drop = [...tables.keys()].map((id) => `delete table ${id}\n`).join("");
            if (drop !== "") await applyNft(drop, { netns: ns });
          }
        }
        const seconds = ((performance.now() - started) / 1000).toFixed(1);
        console.log(
          `partial-sync property: ${count} sequences (PROPERTY_SEED=${seed}), ${scripts} scripts ` +
            `(${partials} non-empty after the first), ${failed.length} failed ` +
            `(known bugs: ${knownSummary(known)}), ${nftRuns} nft runs, ${seconds} s`,
        );
        if (failed.length === 0) {
          reportChecked("partial-sync property", { checked, generated });
          return;
        }
        failed.sort((x, y) => x.index - y.index);
        const report = await shrinkCounterexample(sequence, async (seq) => {
          const run = playChecked(seq, "q0");
          for (const [step, script] of run.scripts.entries()) {
            try {
              await applyNft(script, { netns: a.ns });
            } catch (err) {
              const error = `step ${step}: ${(err as Error).message}`;
              // A known bug's rejection is not the failure being shrunk.
              if (knownBug(error)) return;
              throw new Error(`${error}\nscript:\n${script.slice(0, 3000)}`);
            }
          }
          await applyNft(run.fresh, { netns: b.ns });
          const diff = tableDifferences(
            "q0",
            await listTables(a.ns, QUIRKS),
            await listTables(b.ns, QUIRKS),
          );
          const real = diff.filter((d) => knownBug(d) === undefined);
          if (real.length > 0) throw new Error(real.join("\n"));
        }, { seed, index: failed[0].index, numRuns: count });
        assert.fail(
          `${failed.length} of ${count} sequences failed:\n${summary(failed)}\n${report}`,
        );
      })
    );
  },
});
