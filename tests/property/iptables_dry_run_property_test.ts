/**
 * Property: in iptables mode, `--dry-run`'s diff is exact too. For pairs of random clusters A
 * and B (every configuration variant; B either A after a few changes or an unrelated
 * cluster), with iptables-nft: right after A's rules were restored the diff against A is empty;
 * the diff towards B restores on top of A, after which the diff against B is empty; and the
 * kernel then holds exactly the KUBE-* chains and rules a fresh restore of B builds (compared
 * rule by rule in the normalised form the diff uses).
 *
 * @module
 */
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  applyIptables,
  cleanupIptables,
  restoreSection,
  saveTables,
} from "../../src/apply/iptables.ts";
import { diffIptablesSection, normalRule } from "../../src/dryrun/iptables_diff.ts";
import type { IPFamily } from "../../src/model/service_port.ts";
import { IptablesPlanner } from "../../src/render/iptables/planner.ts";
import { type SavedTables, splitWords } from "../../src/render/iptables/reconcile.ts";
import { splitSections } from "../../src/render/iptables/script.ts";
import { ProxyState } from "../../src/tracker/proxy_state.ts";
import { kernelGate } from "../nft_scratch.ts";
import { createNamespace, deleteNamespace, shortId } from "../netns/netns.ts";
import { configFor, HOSTNAME } from "./arbitraries.ts";
import {
  propertyRuns,
  propertySeed,
  reportChecked,
  type Sequence,
  sequence,
  SimulatedSource,
  summary,
} from "./cluster.ts";

const FAMILIES: readonly IPFamily[] = ["IPv4", "IPv6"];

/** The full-sync script of the iptables planner for the objects of `source`. */
function fullScript(seq: Sequence, source: SimulatedSource): string {
  const state = new ProxyState({ hostname: HOSTNAME, log: () => {} });
  source.listEvents().forEach((e) => state.onEvent(e));
  state.onSynced();
  const { changed } = state.takeChanges();
  return new IptablesPlanner(configFor(seq.config, "kube-nftproxy")).plan(state, {
    full: true,
    changed,
  }).script;
}

/** Before and after: the sequence's initial objects, and its final ones (or another's). */
function pair(seqs: readonly Sequence[], index: number): { before: string; after: string } {
  const seq = seqs[index];
  const source = new SimulatedSource(seq.initial);
  const before = fullScript(seq, source);
  if (index % 2 === 1) {
    const other = seqs[index - 1];
    return { before, after: fullScript(seq, new SimulatedSource(other.initial)) };
  }
  for (const step of seq.steps) for (const change of step) source.apply(change);
  return { before, after: fullScript(seq, source) };
}

/** The first rule of a spurious diff whose normalised forms differ, both forms shown. */
function firstRuleDifference(script: string, saved: SavedTables, family: IPFamily): string {
  const lines = script.split("\n").filter((l) => l.startsWith("-A "));
  const chains = [...new Set(lines.map((l) => l.split(" ")[1]))];
  for (const table of ["filter", "nat", "mangle"] as const) {
    for (const chain of chains) {
      const mine = lines.filter((l) => l.split(" ")[1] === chain);
      const theirs = saved[table].rules.filter((r) => r.chain === chain);
      if (theirs.length === 0) continue;
      for (let i = 0; i < Math.max(mine.length, theirs.length); i++) {
        const x = mine[i] ? normalRule(splitWords(mine[i].slice(3)).slice(1), family) : "none";
        const y = theirs[i] ? normalRule(theirs[i].words, family) : "none";
        if (x !== y) {
          return `${chain} rule ${i}:\n  wanted ${x}\n  kernel ${y}\n  saved: ${theirs[i]?.spec}`;
        }
      }
    }
  }
  return script.slice(0, 1500);
}

/** Our chains and their normalised rules, per table, as text. */
function view(saved: SavedTables, family: IPFamily): string {
  const out: string[] = [];
  for (const table of ["filter", "nat", "mangle"] as const) {
    const chains = [...saved[table].chains].filter((c) => c.startsWith("KUBE-")).sort();
    out.push(`*${table} ${chains.join(" ")}`);
    for (const rule of saved[table].rules) {
      out.push(`${rule.chain} ${normalRule(rule.words, family)}`);
    }
  }
  return out.join("\n");
}

Deno.test({
  name:
    "iptables --dry-run's diff between any two clusters is empty when nothing changed, restores, and builds exactly the wanted chains",
  ignore: kernelGate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    kernelGate.assertUsable();
    const count = Math.max(6, Math.ceil(propertyRuns() / 50));
    const seed = propertySeed();
    const started = performance.now();
    const seqs = fc.sample(sequence, { seed, numRuns: count });
    const failed: { index: number; error: string }[] = [];
    const [a, b] = [`knp-${shortId()}-ipa`, `knp-${shortId()}-ipb`];
    const runner = (ns: string) => ({ netns: ns, backend: "nft" as const });
    let written = 0;
    try {
      await createNamespace(a);
      await createNamespace(b);
      for (let index = 0; index < count; index++) {
        const { before, after } = pair(seqs, index);
        try {
          await applyIptables(before, runner(a));
          for (const s of splitSections(before)) {
            const saved = await saveTables(s.family, runner(a));
            const none = diffIptablesSection(s.family, s.text, saved);
            if (none.script !== "") {
              throw new Error(
                `diff right after restoring:\n${firstRuleDifference(none.script, saved, s.family)}`,
              );
            }
          }
          for (const s of splitSections(after)) {
            const diff = diffIptablesSection(
              s.family,
              s.text,
              await saveTables(s.family, runner(a)),
            );
            written += diff.chainsWritten.length;
            if (diff.script !== "") await restoreSection(diff.script, s.family, runner(a));
            const left = diffIptablesSection(
              s.family,
              s.text,
              await saveTables(s.family, runner(a)),
            );
            if (left.script !== "") {
              throw new Error(`diff after applying the diff:\n${left.script.slice(0, 1500)}`);
            }
          }
          await applyIptables(after, runner(b));
          for (const family of FAMILIES) {
            const x = view(await saveTables(family, runner(a)), family);
            const y = view(await saveTables(family, runner(b)), family);
            if (x !== y) {
              const lx = x.split("\n");
              const ly = y.split("\n");
              const i = lx.findIndex((l, n) => l !== ly[n]);
              throw new Error(
                `${family}: patched vs fresh differ at line ${i}:\n${lx[i]}\n${ly[i]}`,
              );
            }
          }
        } catch (err) {
          failed.push({ index, error: (err as Error).message });
        } finally {
          await cleanupIptables({ netns: a, backends: ["nft"] });
          await cleanupIptables({ netns: b, backends: ["nft"] });
        }
      }
    } finally {
      await deleteNamespace(a);
      await deleteNamespace(b);
    }
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    console.log(
      `iptables dry-run property: ${count} pairs (PROPERTY_SEED=${seed}), ${written} chains ` +
        `written by the diffs, ${failed.length} failed, ${seconds} s`,
    );
    assert.equal(
      failed.length,
      0,
      `${failed.length} of ${count} pairs failed:\n${summary(failed)}`,
    );
    reportChecked("iptables dry-run property", {
      checked: count - failed.length,
      generated: count,
      unit: "pairs",
    });
  },
});
