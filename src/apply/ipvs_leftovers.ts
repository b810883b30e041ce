/**
 * What an ipvs-mode kube-proxy leaves on a node, and removing it: the IPVS virtual servers, the
 * `kube-ipvs0` link that holds every Service IP as a local address, the ipvs-mode `KUBE-*`
 * iptables chains (both families, iptables-nft and iptables-legacy) with the jumps to them from
 * the built-in chains, and the `KUBE-*` ipsets those chains matched.
 *
 * In upstream's order (`CleanupLeftovers` in `pkg/proxy/ipvs/proxier.go`): flush IPVS, delete
 * `kube-ipvs0`, clean the iptables chains, then destroy the ipsets — a set still referenced by
 * a rule cannot be destroyed. Each step that cannot run here (no `ip_vs` module, no `ipset`
 * program or kernel support) is skipped with a log line; each failure is reported to
 * `onFailure`, and the other steps still run. The programs run through an injectable
 * {@link LeftoverRunner}, so the steps are specified against a fake one.
 *
 * @module
 */
import type { IPFamily } from "../model/service_port.ts";
import {
  chainRemovalSection,
  parseSave,
  type SavedTables,
  targetOf,
} from "../render/iptables/reconcile.ts";
import { type ProgramResult, runProgram } from "./program.ts";

/** The dummy link ipvs mode puts every Service IP on (`DefaultDummyDevice` upstream). */
export const IPVS_LINK = "kube-ipvs0";

/**
 * The chains ipvs mode creates, per table (upstream's `iptablesCleanupChains`, plus
 * `KUBE-MARK-MASQ`, which ipvs mode creates and its clean-up leaves to the iptables mode's).
 * `KUBE-FIREWALL` is ipvs mode's in `nat` only: the kubelet's `filter` one is not touched.
 */
export const IPVS_CHAINS: Readonly<Record<"nat" | "filter", readonly string[]>> = {
  nat: [
    "KUBE-SERVICES",
    "KUBE-POSTROUTING",
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
    "KUBE-FIREWALL",
    "KUBE-MARK-MASQ",
  ],
  filter: [
    "KUBE-FORWARD",
    "KUBE-NODE-PORT",
    "KUBE-PROXY-FIREWALL",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
  ],
};

/**
 * The ipsets ipvs mode creates (upstream's `ipsetInfo`); an IPv6 proxier names its sets
 * `KUBE-6-…` instead of `KUBE-…`, and both are removed.
 */
export const IPVS_IPSETS: readonly string[] = [
  "KUBE-LOOP-BACK",
  "KUBE-CLUSTER-IP",
  "KUBE-EXTERNAL-IP",
  "KUBE-EXTERNAL-IP-LOCAL",
  "KUBE-LOAD-BALANCER",
  "KUBE-LOAD-BALANCER-FW",
  "KUBE-LOAD-BALANCER-LOCAL",
  "KUBE-LOAD-BALANCER-SOURCE-IP",
  "KUBE-LOAD-BALANCER-SOURCE-CIDR",
  "KUBE-NODE-PORT-TCP",
  "KUBE-NODE-PORT-LOCAL-TCP",
  "KUBE-NODE-PORT-UDP",
  "KUBE-NODE-PORT-LOCAL-UDP",
  "KUBE-NODE-PORT-SCTP-HASH",
  "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
  "KUBE-HEALTH-CHECK-NODE-PORT",
  "KUBE-IPVS-IPS",
].flatMap((name) => [name, name.replace(/^KUBE-/, "KUBE-6-")]);

const BUILT_IN_CHAINS = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/** ipvs mode's chains whose names the iptables mode (upstream's and ours) also uses. */
const SHARED_CHAINS: Readonly<Record<"nat" | "filter", readonly string[]>> = {
  nat: ["KUBE-SERVICES", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"],
  filter: ["KUBE-FORWARD", "KUBE-PROXY-FIREWALL"],
};

/**
 * Whether a family's tables show ipvs mode: one of its own chains, or a rule matching one of
 * its ipsets. Without that, the chains it shares with the iptables mode are the iptables mode's.
 */
function showsIpvsMode(saved: SavedTables): boolean {
  return (["nat", "filter"] as const).some((table) =>
    IPVS_CHAINS[table].some((c) =>
      !SHARED_CHAINS[table].includes(c) && saved[table].chains.has(c)
    ) ||
    saved[table].rules.some((rule) => {
      const i = rule.words.indexOf("--match-set");
      return i >= 0 && IPVS_IPSETS.includes(rule.words[i + 1]);
    })
  );
}

/**
 * The `iptables-restore --noflush` input removing ipvs mode's chains from one family's saved
 * tables: the jumps to them from the built-in chains, then the chains (flushed, then deleted).
 * Chains named in `keep` (the iptables mode's own, when it runs) are left, and so is a chain a
 * rule of another, foreign chain still jumps to. The chains whose names the iptables mode also
 * uses (`KUBE-SERVICES`, …) are taken only when the tables show ipvs mode (one of its own
 * chains, or a rule matching one of its ipsets). Returns "" when there is nothing to remove.
 *
 * @example
 * ```ts
 * ipvsChainsCleanupScript(parseSave(saved), { nat: [], filter: [] });
 * // "*nat\n:KUBE-NODE-PORT - [0:0]\n-D PREROUTING …\n-X KUBE-NODE-PORT\nCOMMIT\n"
 * ```
 */
export function ipvsChainsCleanupScript(
  saved: SavedTables,
  keep: Readonly<Record<"nat" | "filter", readonly string[]>>,
): string {
  let script = "";
  const ipvs = showsIpvsMode(saved);
  for (const table of ["nat", "filter"] as const) {
    const t = saved[table];
    const candidates = new Set(
      IPVS_CHAINS[table].filter((c) =>
        t.chains.has(c) && !keep[table].includes(c) && (ipvs || !SHARED_CHAINS[table].includes(c))
      ),
    );
    if (candidates.size === 0) continue;
    // A chain a foreign chain jumps to stays, with what it jumps to in turn.
    const kept = new Set<string>();
    for (let grew = true; grew;) {
      grew = false;
      for (const rule of t.rules) {
        const to = targetOf(rule);
        const from = rule.chain;
        const foreign = !BUILT_IN_CHAINS.has(from) && (!candidates.has(from) || kept.has(from));
        if (to !== undefined && candidates.has(to) && foreign && !kept.has(to)) {
          kept.add(to);
          grew = true;
        }
      }
    }
    const remove = [...candidates].filter((c) => !kept.has(c));
    if (remove.length === 0) continue;
    const jumps = t.rules.filter((r) => {
      const to = targetOf(r);
      return BUILT_IN_CHAINS.has(r.chain) && to !== undefined && remove.includes(to);
    });
    script += chainRemovalSection(table, remove, jumps);
  }
  return script;
}

/** Runs one program (no shell); throws when it cannot be started (not installed). */
export type LeftoverRunner = (
  argv: readonly string[],
  options?: { stdin?: string },
) => Promise<ProgramResult>;

/** Options of {@link removeIpvsLeftovers}. */
export interface RemoveIpvsLeftoversOptions {
  /** Receives the line saying what was removed. */
  log: (line: string) => void;
  /** Receives one line per step skipped because it cannot run here. Default: {@link log}. */
  note?: (line: string) => void;
  /** Receives each step that failed: what could not be removed, and why (not logged here). */
  onFailure: (what: string, err: unknown) => void;
  /**
   * Chains not to remove, per table: the iptables mode's own while it runs (it shares
   * `KUBE-SERVICES`, `KUBE-POSTROUTING`, `KUBE-MARK-MASQ`, … with ipvs mode). Default none.
   */
  keep?: Readonly<Record<"nat" | "filter", readonly string[]>>;
  /** Runs the programs. Default: {@link runProgram} in `netns`, 30 s limit each. */
  run?: LeftoverRunner;
  /**
   * Whether the kernel has the `ip_vs` module; `undefined` when that cannot be seen (Deno wants
   * `--allow-all` to look into /sys, which the image does not grant). Default:
   * `/sys/module/ip_vs` exists.
   */
  hasIpvsModule?: () => Promise<boolean | undefined>;
  /** Work inside this network namespace (`ip netns exec`); for tests. */
  netns?: string;
}

/**
 * Removes what an ipvs-mode kube-proxy left on this node (see the module doc for the steps and
 * their order). Never throws: failures go to `options.onFailure`. Resolves with the names of
 * what was removed (empty when the node holds nothing of ipvs mode).
 *
 * @example
 * ```ts
 * await removeIpvsLeftovers({ log: (l) => log.info(l), onFailure: (what, err) => count(what) });
 * ```
 */
export async function removeIpvsLeftovers(options: RemoveIpvsLeftoversOptions): Promise<string[]> {
  const run: LeftoverRunner = options.run ??
    ((argv, opts) =>
      runProgram(argv, { netns: options.netns, stdin: opts?.stdin, timeoutMs: 30_000 }));
  const hasIpvsModule = options.hasIpvsModule ?? defaultHasIpvsModule;
  const keep = options.keep ?? { nat: [], filter: [] };
  const note = options.note ?? options.log;
  const removed: string[] = [];
  const fail = (what: string, err: unknown) => options.onFailure(what, err);
  /** Runs a step's program; a non-zero exit is an error carrying its stderr. */
  const must = async (argv: readonly string[], stdin?: string) => {
    const result = await run(argv, { stdin }).catch((err) => {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
      throw new Error(`${argv[0]} is not installed (needed for: ${argv.join(" ")})`, {
        cause: err,
      });
    });
    if (result.code !== 0) {
      throw new Error(`${argv.join(" ")}: ${result.stderr.trim() || `exit code ${result.code}`}`);
    }
    return result.stdout;
  };

  // Read first, changing nothing: ipvs mode's ipsets (undefined where they cannot be listed).
  let listed: ProgramResult | undefined;
  try {
    listed = await run(["ipset", "list", "-n"]);
    if (listed.code !== 0) {
      note(`ipset cannot list sets here (${listed.stderr.trim()}): no KUBE-* ipsets to remove`);
      listed = undefined;
    }
  } catch {
    note("no ipset program: no KUBE-* ipsets to look for");
  }
  const sets = listed?.stdout.split("\n").map((l) => l.trim())
    .filter((name) => IPVS_IPSETS.includes(name));

  // Read first, changing nothing: does the node hold ipvs mode's link?
  let link = false;
  try {
    link = (await run(["ip", "-o", "link", "show", "dev", IPVS_LINK])).code === 0;
  } catch (err) {
    fail(`link ${IPVS_LINK}`, err);
  }

  // 1. IPVS virtual servers, where the kernel has IPVS at all (upstream checks the same). Where
  // the module cannot be seen, a node that shows ipvs mode (its link or its ipsets) has it: the
  // old kube-proxy needed it, and asking IPVS on any other node could load the module.
  const module = (await hasIpvsModule()) ??
    (link || (sets?.length ?? 0) > 0);
  if (!module) {
    note("no ip_vs module in this kernel: no IPVS virtual servers to flush");
  } else {
    try {
      const services = (await must(["ipvsadm", "-S", "-n"])).split("\n")
        .filter((line) => line.startsWith("-A "));
      if (services.length > 0) {
        await must(["ipvsadm", "-C"]);
        removed.push(`IPVS virtual servers (${services.length})`);
      }
    } catch (err) {
      fail("the IPVS virtual servers", err);
    }
  }

  // 2. kube-ipvs0, which holds every Service IP as a local address.
  if (link) {
    try {
      await must(["ip", "link", "delete", "dev", IPVS_LINK]);
      removed.push(`link ${IPVS_LINK}`);
    } catch (err) {
      fail(`link ${IPVS_LINK}`, err);
    }
  }

  // 3. The iptables chains, from both back ends and both families: only on a node that shows
  // ipvs mode (its link or its ipsets; the chains cannot outlive the sets they match), which
  // spares every other start four iptables-save runs.
  const shows = link || sets === undefined || sets.length > 0;
  for (const backend of shows ? (["nft", "legacy"] as const) : []) {
    for (const family of ["IPv4", "IPv6"] as const) {
      const prefix = family === "IPv6" ? "ip6tables" : "iptables";
      let saved: SavedTables;
      try {
        const result = await run([`${prefix}-${backend}-save`]);
        if (result.code !== 0) continue; // this back end or family is not here
        saved = parseSave(result.stdout);
      } catch {
        continue; // not installed
      }
      const script = ipvsChainsCleanupScript(saved, keep);
      if (script === "") continue;
      try {
        await must([`${prefix}-${backend}-restore`, "--noflush", "-w", "5"], script);
        removed.push(`${describeChains(script, family, backend)}`);
      } catch (err) {
        fail(`the ${family} iptables-${backend} chains`, err);
      }
    }
  }

  // 4. The ipsets, now that no rule references them.
  if (sets !== undefined) {
    const destroyed: string[] = [];
    for (const name of sets) {
      try {
        await must(["ipset", "destroy", name]);
        destroyed.push(name);
      } catch (err) {
        fail(`ipset ${name}`, err);
      }
    }
    if (destroyed.length > 0) removed.push(`ipsets ${destroyed.join(", ")}`);
  }

  if (removed.length > 0) {
    options.log(`removed what kube-proxy's ipvs mode left on this node: ${removed.join("; ")}`);
  }
  return removed;
}

/** `IPv4 iptables-nft chains nat KUBE-NODE-PORT, …` for the log, from a clean-up script. */
function describeChains(script: string, family: IPFamily, backend: string): string {
  const chains: string[] = [];
  let table = "";
  for (const line of script.split("\n")) {
    if (line.startsWith("*")) table = line.slice(1);
    if (line.startsWith("-X ")) chains.push(`${table} ${line.slice(3)}`);
  }
  return `${family} iptables-${backend} chains ${chains.join(", ")}`;
}

async function defaultHasIpvsModule(): Promise<boolean | undefined> {
  try {
    await Deno.stat("/sys/module/ip_vs");
    return true;
  } catch (err) {
    return err instanceof Deno.errors.NotCapable ? undefined : false;
  }
}
