/**
 * `deno task test` and `deno task test:unit`: runs `deno test -A` (with any further arguments)
 * and ends with one line saying whether the data-plane tests ran, so a run that skipped them never
 * reads as a full pass.
 *
 * The data-plane gate (`netnsTestGate()` in tests/netns/netns.ts) writes its reason to a file this
 * script names in `KNP_DATA_PLANE_SKIP_REPORT`; the count comes from deno test's own summary
 * (`ok | 457 passed | 0 failed | 72 ignored`). Exit status: deno test's when it failed; otherwise 1
 * when data-plane tests were skipped, unless `--unit` (`deno task test:unit`) asked for the unit
 * tests alone, which also makes the gate skip them where they could run.
 *
 * @example
 * ```sh
 * deno run -A scripts/run_tests.ts                 # every test; 1 if data-plane tests were skipped
 * deno run -A scripts/run_tests.ts --unit src/     # unit tests under src/ only
 * ```
 *
 * @module
 */
import { SKIP_REPORT_ENV, UNIT_ONLY_ENV } from "../tests/netns/netns.ts";

/** The numbers of deno test's closing summary line. */
export interface TestSummary {
  passed: number;
  failed: number;
  ignored: number;
}

/**
 * Reads deno test's closing line (`ok | 12 passed (3 steps) | 0 failed | 2 ignored (40ms)`, colours
 * allowed) from its output; the last one wins. Undefined when the run ended without one.
 */
export function parseSummary(output: string): TestSummary | undefined {
  // deno-lint-ignore no-control-regex
  const plain = output.replace(/\x1b\[[0-9;]*m/g, "");
  const lines = plain.split("\n").filter((l) => /^(ok|FAILED) \| \d+ passed/.test(l));
  const last = lines.at(-1);
  if (last === undefined) return undefined;
  const count = (word: string) => Number(last.match(new RegExp(`(\\d+) ${word}`))?.[1] ?? 0);
  return { passed: count("passed"), failed: count("failed"), ignored: count("ignored") };
}

/** What {@link verdict} decides: the closing line and the exit status. */
export interface Verdict {
  line: string;
  code: number;
}

/**
 * The closing line and exit status of a run, from deno test's exit code, its summary and the
 * reasons the data-plane gate reported (one per test module that skipped; repeats allowed).
 */
export function verdict(
  run: { code: number; summary?: TestSummary; skipReasons: readonly string[] },
  opts: { unitOnly: boolean },
): Verdict {
  const { code, summary } = run;
  if (summary === undefined) {
    return { line: `deno test ended without its summary (exit status ${code})`, code: code || 1 };
  }
  const reasons = [...new Set(run.skipReasons)].join("; ");
  const skipped = reasons !== "" && summary.ignored > 0;
  const failed = summary.failed > 0 || code !== 0 ? `${summary.failed} failed; ` : "";
  if (opts.unitOnly) {
    const what = skipped ? `: ${summary.ignored} data-plane tests skipped on request` : "";
    return { line: `${failed}unit tests only (deno task test:unit)${what}`, code };
  }
  if (skipped) {
    return {
      line: `${failed}${summary.ignored} data-plane tests skipped: ${reasons}. Not a full pass: ` +
        `run as root with nft and ip for every test, or \`deno task test:unit\` for the others only.`,
      code: code || 1,
    };
  }
  if (summary.ignored > 0) {
    return { line: `${failed}${summary.ignored} tests ignored by their own declaration`, code };
  }
  if (failed !== "") return { line: `${summary.failed} failed (no test was skipped)`, code };
  return { line: "every test ran, the data-plane tests included", code };
}

async function main(args: string[]): Promise<number> {
  const unitOnly = args[0] === "--unit";
  const testArgs = unitOnly ? args.slice(1) : args;
  const report = await Deno.makeTempFile({ prefix: "knp-test-skips-" });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["test", "-A", ...testArgs],
      stdin: "inherit",
      stdout: "piped",
      stderr: "inherit",
      env: { [SKIP_REPORT_ENV]: report, ...(unitOnly ? { [UNIT_ONLY_ENV]: "1" } : {}) },
    }).spawn();
    // Pass the output through as it comes (deno test keeps its colours on a pipe), keeping the
    // tail, where the summary is.
    let tail = "";
    const decoder = new TextDecoder();
    for await (const chunk of child.stdout) {
      await Deno.stdout.write(chunk);
      tail = (tail + decoder.decode(chunk, { stream: true })).slice(-4096);
    }
    const { code } = await child.status;
    const skipReasons = (await Deno.readTextFile(report)).split("\n").filter((l) => l !== "");
    const result = verdict({ code, summary: parseSummary(tail), skipReasons }, { unitOnly });
    console.log(result.line);
    return result.code;
  } finally {
    await Deno.remove(report);
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
