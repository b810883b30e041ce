/**
 * The proxy process's OOM-killer adjustment, set at start-up as upstream kube-proxy does
 * (`oomScoreAdj`, default -999), so that a node short of memory kills workloads before the
 * proxy that routes their traffic. Lowering it needs CAP_SYS_RESOURCE: a proxy without it (a
 * container with CAP_NET_ADMIN only) keeps the value it was given, which the kubelet already
 * lowers for node-critical pods; upstream logs that at verbosity 2, and so does main.ts.
 *
 * @module
 */
import { denoSysctlFiles, type SysctlFiles } from "./conntrack_sysctls.ts";

/** The file the kernel reads this process's adjustment from. */
export const OOM_SCORE_ADJ = "/proc/self/oom_score_adj";

/** What {@link applyOomScoreAdj} did: `changed` (`before → after`) or `refused` (why). */
export interface OomScoreReport {
  readonly changed?: string;
  readonly refused?: string;
}

/**
 * Writes `value` to {@link OOM_SCORE_ADJ} (or `options.path`) unless it is already there. Never
 * throws: a refusal is reported.
 *
 * @example
 * ```ts
 * const report = await applyOomScoreAdj(-999);
 * if (report.refused) console.error(report.refused);
 * ```
 */
export async function applyOomScoreAdj(
  value: number,
  options: { files?: SysctlFiles; path?: string } = {},
): Promise<OomScoreReport> {
  const files = options.files ?? denoSysctlFiles;
  const path = options.path ?? OOM_SCORE_ADJ;
  let before: number;
  try {
    before = Number((await files.read(path)).trim());
  } catch (err) {
    return { refused: `cannot read ${path} (${(err as Error).message})` };
  }
  if (before === value) return {};
  try {
    await files.write(path, String(value));
    return { changed: `oom_score_adj: ${before} → ${value}` };
  } catch (err) {
    return {
      refused: `cannot set oom_score_adj to ${value}, it stays ${before} (${
        (err as Error).message
      })`,
    };
  }
}
