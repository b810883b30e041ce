/**
 * The machinery of the property tests: feeding generated clusters through {@link ProxyState}
 * and {@link NftPlanner} the way the sync loop does, simulating a source through random event
 * sequences, judging scripts for leaked object names, and reading tables back from the kernel
 * in a form that can be compared.
 *
 * @module
 */
import fc from "fast-check";
import type { Config } from "../../src/config/config.ts";
import { NftPlanner } from "../../src/render/nft/planner.ts";
import type { ObjectEvent } from "../../src/source/events.ts";
import { objectKey } from "../../src/source/object_key.ts";
import { ProxyState } from "../../src/tracker/proxy_state.ts";
import { runNft } from "../../src/apply/nft.ts";
import {
  type Cluster,
  type ClusterObject,
  clusterObject,
  clusterObjects,
  configFor,
  type ConfigVariant,
  configVariant,
  HOSTNAME,
} from "./arbitraries.ts";

/**
 * How many runs a property makes: `PROPERTY_RUNS` scales them all. The default, 2000, checks
 * 2000 clusters in the kernel, 200 event sequences, and 500 runs of each pure property; a soak
 * is `PROPERTY_RUNS=20000 deno test -A tests/property/`, a replay adds `PROPERTY_SEED=…`.
 */
export function propertyRuns(): number {
  const text = Deno.env.get("PROPERTY_RUNS");
  const runs = text === undefined ? 2000 : Number(text);
  if (!Number.isInteger(runs) || runs < 1) throw new Error(`PROPERTY_RUNS=${text} is not a count`);
  return runs;
}

/** The seed of this run: `PROPERTY_SEED` replays one, otherwise a fresh one (printed). */
export function propertySeed(): number {
  const text = Deno.env.get("PROPERTY_SEED");
  return text === undefined ? Date.now() ^ (Math.random() * 0x7fffffff) : Number(text);
}

/** Least share of a property's generated steps that must have been checked. */
export const MIN_CHECKED_SHARE = 0.9;

/**
 * Prints how many of a property's generated steps (or clusters, pairs, sequences) were checked
 * and fails when fewer than {@link MIN_CHECKED_SHARE} were: a property whose checks are
 * skipped, or whose steps do nothing, proves less than its name says.
 */
export function reportChecked(
  property: string,
  counts: { checked: number; generated: number; unit?: string },
  detail = "",
): void {
  const { checked, generated, unit = "steps" } = counts;
  const share = generated === 0 ? 0 : checked / generated;
  console.log(
    `${property}: ${checked} of ${generated} generated ${unit} checked ` +
      `(${(share * 100).toFixed(1)}%)${detail === "" ? "" : `; ${detail}`}`,
  );
  if (share < MIN_CHECKED_SHARE) {
    throw new Error(
      `${property}: only ${checked} of ${generated} generated ${unit} were checked, ` +
        `under ${MIN_CHECKED_SHARE * 100}%`,
    );
  }
}

/** One proxy as the sync loop drives it: full first, full on global changes, else partial. */
export class SimulatedProxy {
  readonly state: ProxyState;
  readonly #config: Config;
  readonly #planner: NftPlanner;
  #first = true;
  /** Log lines the model wrote (refused objects, dropped fields). */
  readonly log: string[] = [];

  constructor(variant: ConfigVariant, tableName: string) {
    this.state = new ProxyState({ hostname: HOSTNAME, log: (line) => this.log.push(line) });
    this.#config = configFor(variant, tableName);
    this.#planner = new NftPlanner(this.#config);
  }

  /** Records one source event. */
  onEvent(event: ObjectEvent): void {
    this.state.onEvent(event);
  }

  /** Runs one sync and returns its script (committed as if the kernel accepted it). */
  sync(options: { full?: boolean } = {}): string {
    const { changed, global } = this.state.takeChanges();
    const full = this.#first || global || options.full === true;
    const plan = this.#planner.plan(this.state, { full, changed });
    plan.commit();
    this.#first = false;
    return plan.script;
  }
}

/** The elements a script adds: family, set, key text, and the rest (comment and value). */
export function scriptElements(
  script: string,
): { family: string; set: string; key: string; rest: string }[] {
  const out: { family: string; set: string; key: string; rest: string }[] = [];
  for (const line of script.split("\n")) {
    const m = /^add element (ip6?) \S+ (\S+) \{ (.*) \}$/.exec(line);
    if (!m) continue;
    for (const item of m[3].split(", ")) {
      const cut = item.search(/ comment "| : /);
      const key = cut < 0 ? item : item.slice(0, cut);
      out.push({ family: m[1], set: m[2], key, rest: item.slice(key.length) });
    }
  }
  return out;
}

/** Adds every object of a cluster, as a source's initial list does, and renders a full sync. */
export function renderFull(cluster: Cluster, tableName: string): string {
  const proxy = new SimulatedProxy(cluster.config, tableName);
  for (const { kind, object } of cluster.objects) proxy.onEvent({ kind, current: object });
  return proxy.sync();
}

// ---------------------------------------------------------------------------------------------
// Event sequences

/** One change a source reports. Targets index the objects currently present (modulo). */
export type Op =
  | { readonly op: "put"; readonly object: ClusterObject }
  | { readonly op: "update"; readonly target: number; readonly object: ClusterObject }
  | { readonly op: "delete"; readonly target: number }
  | { readonly op: "revert"; readonly target: number };

/** A configuration, the initial objects, and syncs each preceded by a few changes. */
export interface Sequence {
  readonly config: ConfigVariant;
  readonly initial: readonly ClusterObject[];
  readonly steps: readonly (readonly Op[])[];
}

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 2, arbitrary: clusterObject.map((object): Op => ({ op: "put", object })) },
  {
    weight: 3,
    arbitrary: fc.record({ target: fc.nat(), object: clusterObject }).map(({ target, object }) =>
      ({ op: "update", target, object }) as const
    ),
  },
  { weight: 2, arbitrary: fc.nat().map((target): Op => ({ op: "delete", target })) },
  { weight: 2, arbitrary: fc.nat().map((target): Op => ({ op: "revert", target })) },
);

/** Random event sequences over random clusters. */
export const sequence: fc.Arbitrary<Sequence> = fc.record({
  config: configVariant,
  initial: clusterObjects,
  steps: fc.array(fc.array(op, { maxLength: 5 }), { minLength: 1, maxLength: 5 }),
});

/**
 * A source's view of the cluster: objects by key, emitting add/update/delete events only for
 * real differences, and skipping objects without a usable identity as the real sources do.
 */
export class SimulatedSource {
  readonly #objects = new Map<string, ClusterObject>();
  readonly #original: ReadonlyMap<string, ClusterObject>;

  constructor(initial: readonly ClusterObject[]) {
    for (const o of initial) {
      const key = objectKey(o.kind, o.object);
      if (key !== undefined) this.#objects.set(key, o);
    }
    this.#original = new Map(this.#objects);
  }

  /** The objects as they are now, in key insertion order. */
  get objects(): ClusterObject[] {
    return [...this.#objects.values()];
  }

  /** Events that list the current objects (what a new source would deliver). */
  listEvents(): ObjectEvent[] {
    return this.objects.map(({ kind, object }) => ({ kind, current: object }));
  }

  /** Applies one change; returns the events a source would emit for it. */
  apply(change: Op): ObjectEvent[] {
    const keys = [...this.#objects.keys()];
    switch (change.op) {
      case "put":
        return this.#put(change.object);
      case "update": {
        if (keys.length === 0) return [];
        const target = this.#objects.get(keys[change.target % keys.length])!;
        // Keep the target's identity, take the rest from the generated object.
        const metadata = {
          ...(isRecord(change.object.object.metadata) ? change.object.object.metadata : {}),
          name: (target.object.metadata as Record<string, unknown>).name,
          namespace: (target.object.metadata as Record<string, unknown>).namespace,
        };
        return this.#put({
          kind: target.kind,
          object: { ...change.object.object, kind: target.kind, metadata },
        });
      }
      case "delete": {
        if (keys.length === 0) return [];
        return this.#delete(keys[change.target % keys.length]);
      }
      case "revert": {
        const all = [...new Set([...keys, ...this.#original.keys()])];
        if (all.length === 0) return [];
        const key = all[change.target % all.length];
        const original = this.#original.get(key);
        return original ? this.#put(original) : this.#delete(key);
      }
    }
  }

  #put(next: ClusterObject): ObjectEvent[] {
    const key = objectKey(next.kind, next.object);
    if (key === undefined) return [];
    const previous = this.#objects.get(key);
    if (previous && JSON.stringify(previous.object) === JSON.stringify(next.object)) return [];
    this.#objects.set(key, next);
    return [{ kind: next.kind, previous: previous?.object, current: next.object }];
  }

  #delete(key: string): ObjectEvent[] {
    const previous = this.#objects.get(key);
    if (previous === undefined) return [];
    this.#objects.delete(key);
    return [{ kind: previous.kind, previous: previous.object }];
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** What one sequence renders: the first full script, then one script per step. */
export interface SequenceRun {
  readonly scripts: string[];
  /** A fresh proxy's first full sync of the final objects. */
  readonly fresh: string;
}

/** Plays a sequence through one proxy, and renders its final state with a fresh proxy. */
export function playSequence(seq: Sequence, tableName: string): SequenceRun {
  const source = new SimulatedSource(seq.initial);
  const proxy = new SimulatedProxy(seq.config, tableName);
  source.listEvents().forEach((e) => proxy.onEvent(e));
  const scripts = [proxy.sync()];
  for (const step of seq.steps) {
    for (const change of step) source.apply(change).forEach((e) => proxy.onEvent(e));
    scripts.push(proxy.sync());
  }
  const fresh = new SimulatedProxy(seq.config, tableName);
  source.listEvents().forEach((e) => fresh.onEvent(e));
  return { scripts, fresh: fresh.sync() };
}

// ---------------------------------------------------------------------------------------------
// Script hygiene

/** Characters an object name must never carry into a script. */
const INJECTION = /["\n;{}#]/;

/** A command line of a script: verb, object kind, family, table. */
const COMMAND =
  /^(add|delete|flush) (table|chain|rule|set|map|element) (ip|ip6) ([A-Za-z][\w.-]*)(?: |$)/;

/** A quoted string in a script and what stands before it. */
const QUOTED = /(comment|iifname(?: !=)?) "([^"\n]*)"/g;

/** Safe text inside a quoted string: no quote, brace, semicolon, hash, backslash or control. */
// deno-lint-ignore no-control-regex -- control characters are exactly what must not appear
const SAFE_QUOTED = /^[^"{};#\\\u0000-\u001f\u007f]*$/;

/** Longest comment nft accepts, in bytes. */
const MAX_COMMENT = 128;

/** Per-service chain names: no character that nft could read as syntax. */
const SAFE_CHAIN = /^[A-Za-z0-9_./-]{1,256}$/;

/**
 * What is wrong with a script's hygiene, one line per problem (empty when it is clean): every
 * line one command on the expected tables; quoted strings only as comments (or the configured
 * interface) and free of quotes, braces, semicolons, `#` and control characters; nothing
 * quoted outside them; chain names made of safe characters; and no object name containing
 * injection characters appearing verbatim.
 */
export function scriptProblems(
  script: string,
  options: { tables: readonly string[]; names: readonly string[] },
): string[] {
  const problems: string[] = [];
  if (script !== "" && !script.endsWith("\n")) problems.push("script does not end in a newline");
  const lines = script === "" ? [] : script.slice(0, -1).split("\n");
  lines.forEach((line, i) => {
    const at = `line ${i + 1} ${JSON.stringify(line.slice(0, 160))}`;
    const command = COMMAND.exec(line);
    if (!command) return problems.push(`${at}: not one command`);
    if (!options.tables.includes(command[4])) problems.push(`${at}: unexpected table`);
    for (const [, , text] of line.matchAll(QUOTED)) {
      if (!SAFE_QUOTED.test(text)) {
        problems.push(`${at}: unsafe quoted text ${JSON.stringify(text)}`);
      }
      if (new TextEncoder().encode(text).length > MAX_COMMENT) {
        problems.push(`${at}: comment too long, 128 characters maximum allowed`);
      }
    }
    const bare = line.replace(QUOTED, "$1 Q");
    if (/["#]/.test(bare)) problems.push(`${at}: quote or # outside a comment`);
    if ((command[2] === "rule" || command[2] === "element") && bare.includes(";")) {
      problems.push(`${at}: ; in a rule or element`);
    }
    const opens = bare.split("{").length - 1;
    if (opens !== bare.split("}").length - 1 || opens > 1) {
      problems.push(`${at}: unbalanced braces`);
    }
    for (const chain of chainNames(command[2], bare)) {
      if (!SAFE_CHAIN.test(chain)) {
        problems.push(`${at}: unsafe chain name ${JSON.stringify(chain)}`);
      }
    }
  });
  for (const name of options.names) {
    if (name.length >= 6 && INJECTION.test(name) && script.includes(name)) {
      problems.push(`object name ${JSON.stringify(name)} appears verbatim`);
    }
  }
  return problems;
}

/**
 * Throws when a script is unclean (see {@link scriptProblems}). Problems that are the symptom
 * of a known bug are thrown only when nothing else is wrong — so that callers can count them
 * as known — and not at all with `tolerateKnown`.
 */
export function assertClean(
  script: string,
  options: { tables: readonly string[]; names: readonly string[]; tolerateKnown?: boolean },
): void {
  const problems = scriptProblems(script, options);
  const real = problems.filter((p) => knownBug(p) === undefined);
  if (real.length > 0) throw new Error(`unclean script:\n${real.slice(0, 5).join("\n")}`);
  if (problems.length > 0 && !options.tolerateKnown) throw new Error(problems[0]);
}

/** Chain names a command line mentions (its own and jump/goto targets). */
function chainNames(kind: string, bare: string): string[] {
  const words = bare.split(" ");
  const names: string[] = [];
  if (kind === "chain" || kind === "rule") names.push(words[4] ?? "");
  for (let i = 0; i < words.length - 1; i++) {
    if (words[i] === "goto" || words[i] === "jump") names.push(words[i + 1].replace(/,$/, ""));
  }
  return names;
}

/** Every string in the objects of a cluster (names, labels, ports…), for the leak check. */
export function stringsOf(objects: readonly ClusterObject[]): string[] {
  const out = new Set<string>();
  const visit = (node: unknown) => {
    if (typeof node === "string") out.add(node);
    else if (Array.isArray(node)) node.forEach(visit);
    else if (isRecord(node)) {
      for (const [k, v] of Object.entries(node)) {
        out.add(k);
        visit(v);
      }
    }
  };
  objects.forEach((o) => visit(o.object));
  return [...out];
}

// ---------------------------------------------------------------------------------------------
// Reading tables back

/** One table as listed by the kernel: chains with their rules in order, sets and maps. */
export interface TableView {
  readonly chains: ReadonlyMap<string, { readonly def: unknown; readonly rules: unknown[] }>;
  /** By `set NAME` / `map NAME`, elements sorted. */
  readonly sets: ReadonlyMap<string, unknown>;
}

/**
 * Every table of a namespace's ruleset by `family name`, normalised for comparison: rule
 * handles dropped, elements sorted.
 *
 * With `ignoreProtocolDependency`, a DNAT rule's `tcp dport` (or `udp`, `sctp`) is read as
 * `th dport`: when a map's value names `tcp dport`, nft 1.0.6 compiles a hidden
 * `meta l4proto tcp` match into the first `dnat … map` rule of a transaction that uses it, and
 * not into later ones, so which rules carry it depends on sync history. With one endpoint map
 * per protocol the hidden match is always the rule's own protocol, so it changes nothing.
 */
export async function listTables(
  netns: string,
  options: {
    ignoreProtocolDependency?: boolean;
  } = {},
): Promise<Map<string, TableView>> {
  const out = await runNft(["-j", "list", "ruleset"], { netns });
  if (out.code !== 0) throw new Error(`nft list ruleset failed: ${out.stderr}`);
  const items = (JSON.parse(out.stdout) as { nftables: Record<string, unknown>[] }).nftables;
  const tables = new Map<
    string,
    { chains: Map<string, { def: unknown; rules: unknown[] }>; sets: Map<string, unknown> }
  >();
  const tableOf = (o: Record<string, unknown>) => {
    const id = `${o.family} ${o.table ?? o.name}`;
    let t = tables.get(id);
    if (t === undefined) tables.set(id, t = { chains: new Map(), sets: new Map() });
    return t;
  };
  for (const item of items) {
    const [kind, body] = Object.entries(item)[0] as [string, Record<string, unknown>];
    const clean = withoutHandles(body) as Record<string, unknown>;
    if (kind === "table") tableOf(clean);
    else if (kind === "chain") {
      const chains = tableOf(clean).chains;
      const name = String(clean.name);
      chains.set(name, { def: clean, rules: chains.get(name)?.rules ?? [] });
    } else if (kind === "rule") {
      const chains = tableOf(clean).chains;
      const name = String(clean.chain);
      const chain = chains.get(name) ?? { def: null, rules: [] };
      const dnat = JSON.stringify(clean.expr).includes('"dnat"');
      chain.rules.push(
        options.ignoreProtocolDependency && dnat
          ? withoutProtocolDependency(clean.expr)
          : clean.expr,
      );
      chains.set(name, chain);
    } else if (kind === "set" || kind === "map") {
      const elements = Array.isArray(clean.elem) ? clean.elem.map((e) => JSON.stringify(e)) : [];
      tableOf(clean).sets.set(`${kind} ${clean.name}`, { ...clean, elem: elements.sort() });
    }
  }
  return tables;
}

/** A table view as canonical text (for equality and diffs), leaving out the `without` sets. */
export function tableText(
  view: TableView | undefined,
  options: { without?: ReadonlySet<string> } = {},
): string {
  if (view === undefined) return "(missing)";
  const sorted = <V>(m: ReadonlyMap<string, V>) =>
    [...m].filter(([k]) => !options.without?.has(k)).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
  return JSON.stringify({ chains: sorted(view.chains), sets: sorted(view.sets) }, null, 1);
}

function withoutProtocolDependency(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutProtocolDependency);
  if (!isRecord(value)) return value;
  const payload = value.payload;
  if (
    isRecord(payload) && payload.field === "dport" &&
    (payload.protocol === "tcp" || payload.protocol === "udp" || payload.protocol === "sctp")
  ) {
    return { payload: { protocol: "th", field: "dport" } };
  }
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [k, withoutProtocolDependency(v)]),
  );
}

function withoutHandles(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutHandles);
  if (!isRecord(value)) return value;
  return Object.fromEntries(
    Object.entries(value).filter(([k]) => k !== "handle").map(([k, v]) => [k, withoutHandles(v)]),
  );
}

/** The first lines where two texts differ, for a readable failure message. */
export function firstDifference(a: string, b: string, context = 6): string {
  const x = a.split("\n");
  const y = b.split("\n");
  const i = x.findIndex((line, n) => line !== y[n]);
  const at = i < 0 ? Math.min(x.length, y.length) : i;
  const from = Math.max(0, at - 2);
  return [
    `first difference at line ${at + 1}:`,
    "--- after partial syncs",
    ...x.slice(from, at + context),
    "--- fresh full render",
    ...y.slice(from, at + context),
  ].join("\n");
}

// ---------------------------------------------------------------------------------------------
// Counterexamples

/** Longest time spent shrinking one counterexample. */
const SHRINK_TIME_LIMIT_MS = 60_000;

/**
 * Replays run `index` of a sampled property (same seed) under fast-check so it shrinks to a
 * minimal failing value, and returns a report: how to replay, the value, and the error.
 * `check` must throw for a failing value.
 */
export async function shrinkCounterexample<T>(
  arb: fc.Arbitrary<T>,
  check: (value: T) => Promise<void>,
  options: { seed: number; index: number; numRuns: number },
): Promise<string> {
  const details = await fc.check(fc.asyncProperty(arb, check), {
    seed: options.seed,
    path: String(options.index),
    numRuns: options.numRuns,
    // Shrinking replays kernel checks: bound it, and report the smallest case found in time.
    interruptAfterTimeLimit: SHRINK_TIME_LIMIT_MS,
    markInterruptAsFailure: false,
  });
  if (!details.failed) {
    return `run ${options.index} of seed ${options.seed} failed once but not when replayed`;
  }
  const error = details.errorInstance instanceof Error
    ? details.errorInstance.message
    : String(details.errorInstance);
  const value = fc.stringify(details.counterexample?.[0]);
  return [
    `replay: PROPERTY_SEED=${options.seed} (run ${options.index}, shrunk ${details.numShrinks} times` +
    ` to path ${details.counterexamplePath})`,
    `minimal counterexample: ${value.length > 6000 ? `${value.slice(0, 6000)}…` : value}`,
    `error: ${error}`,
  ].join("\n");
}

/** The first failures of a run, one paragraph each, for an assertion message. */
export function summary(failures: readonly { index: number; error: string }[], max = 5): string {
  return failures.slice(0, max).map(({ index, error }) =>
    `- run ${index}: ${error.length > 1500 ? `${error.slice(0, 1500)}…` : error}`
  ).join("\n");
}

// ---------------------------------------------------------------------------------------------
// Known bugs

/** A bug pinned by a failing test in regressions_test.ts, recognised by the error it causes here. */
export interface KnownBug {
  /** The name of the ignored test in regressions_test.ts that pins it. */
  readonly pinnedBy: string;
  /** Whether a failure message is this bug's symptom. */
  readonly matches: (error: string) => boolean;
}

/**
 * Open bugs the properties found and regressions_test.ts pins. The properties count failures that
 * match one as "known" instead of failing, so that CI stays green until the owner fixes them;
 * `PROPERTY_STRICT=1` turns them back into failures. Remove an entry with its fix.
 */
export const KNOWN_BUGS: readonly KnownBug[] = [];

/** The known bug a failure message shows, unless `PROPERTY_STRICT=1`. */
export function knownBug(error: string): KnownBug | undefined {
  if (Deno.env.get("PROPERTY_STRICT") === "1") return undefined;
  return KNOWN_BUGS.find((bug) => bug.matches(error));
}

/** Known-bug counts as one line (`2× long comments, …`), or "none". */
export function knownSummary(known: ReadonlyMap<KnownBug, number>): string {
  if (known.size === 0) return "none";
  return [...known].map(([bug, n]) => `${n}× "${bug.pinnedBy}"`).join(", ");
}
