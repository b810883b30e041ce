/**
 * Generates `docs/configuration.md`, the configuration reference, from the code that defines the
 * configuration: every field of the `Config` type (its JSDoc, read with `deno doc --json`), the
 * upstream file field and flags that set it (`describeField`), its default (`--help`'s, else
 * `DEFAULT_CONFIG`'s) and every other flag `--help` lists. The result goes through `deno fmt`,
 * so the file passes `deno fmt --check` as written.
 *
 * tests/deploy/config_docs_test.ts regenerates it and fails when the file is out of date.
 *
 * @example
 * ```sh
 * deno run -A scripts/gen_config_docs.ts          # rewrite docs/configuration.md
 * deno run -A scripts/gen_config_docs.ts --check  # exit 1 if it is out of date
 * ```
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { type Config, DEFAULT_CONFIG } from "../src/config/config.ts";
import { formatGoDuration } from "../src/config/duration.ts";
import { helpText } from "../src/config/flags.ts";
import { describeField } from "../src/config/validation.ts";

/** The repository root, with a trailing slash. */
export const ROOT: string = fileURLToPath(new URL("../", import.meta.url));

/** Where the reference is written, relative to {@link ROOT}. */
export const CONFIG_DOCS_PATH = "docs/configuration.md";

/** One flag as `--help` lists it. */
export interface HelpFlag {
  /** Its spellings, long form last: `["-v", "--v"]`, `["--mode"]`. */
  names: string[];
  /** The value placeholder (`<path>`, `[bool]`), or "" for a flag without one. */
  argument: string;
  /** The help sentence without its `(default: …)` suffix. */
  description: string;
  /** What `(default: …)` says, or `undefined` when the help names no default. */
  default: string | undefined;
}

/**
 * Reads the flags out of a commander help text (the `Options:` section): one entry per flag,
 * continuation lines joined, the trailing `(default: …)` split off.
 *
 * @example
 * ```ts
 * parseHelp(helpText()).find((flag) => flag.names.includes("--mode"));
 * // { names: ["--mode"], argument: "<mode>", description: "backend: …", default: "nft" }
 * ```
 */
export function parseHelp(text: string): HelpFlag[] {
  const lines = text.split("\n");
  const start = lines.findIndex((line) => line.trim() === "Options:");
  if (start < 0) throw new Error("help text has no Options: section");
  const entries: { head: string; words: string[] }[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === "") continue;
    const first = /^ {2}(-\S.*?)(?: {2,}(.*))?$/.exec(line);
    if (first !== null) entries.push({ head: first[1], words: [first[2] ?? ""] });
    else if (entries.length > 0 && /^ {3,}\S/.test(line)) {
      entries[entries.length - 1].words.push(line.trim());
    } else break;
  }
  return entries.map(({ head, words }) => {
    const [spellings, ...argument] = head.split(" ").reduce<string[]>((parts, word) => {
      // "-v, --v <level>" → ["-v, --v", "<level>"]
      if (parts.length > 0 && parts[parts.length - 1].endsWith(",")) {
        parts[parts.length - 1] += ` ${word}`;
      } else parts.push(word);
      return parts;
    }, []);
    const sentence = words.filter((word) => word !== "").join(" ");
    const match = /^(.*?)\s*\(default: (.*)\)$/.exec(sentence);
    return {
      names: spellings.split(/,\s*/),
      argument: argument.join(" "),
      description: match === null ? sentence : match[1],
      default: match === null ? undefined : match[2],
    };
  });
}

/** A field of the `Config` type as `deno doc` describes it. */
export interface ConfigField {
  /** The field name. */
  key: keyof Config;
  /** Its JSDoc text. */
  doc: string;
  /** What kind of value it holds, for readers: `text`, `true or false`, `duration`, … */
  value: string;
}

interface DocProperty {
  name: string;
  jsDoc?: { doc?: string };
  tsType?: { kind?: string; repr?: string };
}

interface DocJson {
  nodes: Record<string, {
    symbols?: {
      name: string;
      declarations: { kind: string; def?: { properties?: DocProperty[] } }[];
    }[];
  }>;
}

/** The fields of `Config` in declaration order, with their JSDoc, from `deno doc --json`. */
export async function readConfigFields(): Promise<ConfigField[]> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["doc", "--json", "src/config/config.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!output.success) {
    throw new Error(`deno doc failed: ${new TextDecoder().decode(output.stderr)}`);
  }
  const json: DocJson = JSON.parse(new TextDecoder().decode(output.stdout));
  const symbol = Object.values(json.nodes).flatMap((node) => node.symbols ?? [])
    .find((s) => s.name === "Config");
  const properties = symbol?.declarations.find((d) => d.kind === "interface")?.def?.properties;
  if (properties === undefined) throw new Error("deno doc: no interface Config");
  return properties.map((property) => {
    const key = property.name as keyof Config;
    if (!(key in DEFAULT_CONFIG)) throw new Error(`Config.${key} has no default`);
    return { key, doc: property.jsDoc?.doc ?? "", value: valueKind(key, property) };
  });
}

function valueKind(key: keyof Config, property: DocProperty): string {
  if (key.endsWith("Ms")) return "duration (`30s`, `1m0s`, `500ms`)";
  if (key.endsWith("Bytes")) return "bytes (`1048576`, `64Ki`, `128Mi`, `1Gi`)";
  if (key === "kubeApiQps") return "number (`5`, `0.5`)";
  if (property.tsType?.kind === "array") return "list (comma-separated in a flag)";
  switch (typeof DEFAULT_CONFIG[key]) {
    case "boolean":
      return "`true` or `false`";
    case "number":
      return "whole number";
    default:
      return "text";
  }
}

/** How one {@link Config} field is set: the upstream file fields and flags, both modes merged. */
function settersOf(key: keyof Config): { fileFields: string[]; flags: string[] } {
  const fileFields = new Set<string>();
  const flags = new Set<string>();
  for (const mode of ["nft", "iptables"] as const) {
    for (const name of describeField(key, mode).split("/")) {
      (name.startsWith("-") ? flags : fileFields).add(name);
    }
  }
  return { fileFields: [...fileFields], flags: [...flags] };
}

function code(text: string): string {
  return `\`${text}\``;
}

/** A table cell: pipes escaped, `{@link X}` reduced to `X`. */
function cell(text: string): string {
  return prose(text).replaceAll("|", "\\|");
}

function prose(text: string): string {
  return text.replace(/\{@link\s+([^}\s]+)\s*\}/g, "`$1`").replace(/\s+/g, " ").trim();
}

/** The JSDoc without its closing "Default …" sentence, which the Default line restates. */
function withoutDefault(doc: string): string {
  return doc.replace(/\s*Default:? (?:[^`.]|`[^`]*`|\.\S)*\.?$/, "");
}

function showDefault(key: keyof Config, help: HelpFlag | undefined): string {
  const fromHelp = help?.default;
  if (fromHelp !== undefined) {
    return /\s/.test(fromHelp) || fromHelp === "none" ? fromHelp : code(fromHelp);
  }
  const value = DEFAULT_CONFIG[key];
  if (key.endsWith("Ms")) return code(formatGoDuration(value as number));
  if (Array.isArray(value)) return value.length === 0 ? "none" : code(value.join(","));
  return code(value === "" ? '""' : `${value}`);
}

/**
 * The whole reference as Markdown, before formatting: a summary table of every option, a
 * section per option, then the flags that are actions rather than options.
 */
export function renderConfigDocs(
  fields: readonly ConfigField[],
  help: readonly HelpFlag[],
): string {
  const byName = new Map(help.flatMap((flag) => flag.names.map((name) => [name, flag])));
  const used = new Set<HelpFlag>();
  const rows: string[] = [];
  const sections: string[] = [];
  for (const field of fields) {
    const { fileFields, flags } = settersOf(field.key);
    const helpFlags = flags.map((name) => {
      const flag = byName.get(name);
      if (flag === undefined) throw new Error(`Config.${field.key}: ${name} is not in --help`);
      used.add(flag);
      return flag;
    });
    const shown = helpFlags.map((flag) => code(flag.names.join(", ")));
    const defaultText = showDefault(field.key, helpFlags.find((f) => f.default !== undefined));
    rows.push(
      `| [${code(field.key)}](#${field.key.toLowerCase()}) | ${shown.join(", ")} | ` +
        `${fileFields.map(code).join(", ") || "—"} | ${cell(defaultText)} |`,
    );
    sections.push(
      [
        `### ${code(field.key)}`,
        "",
        withoutDefault(prose(field.doc)),
        "",
        ...helpFlags.map((flag) =>
          `- Flag ${code([flag.names.join(", "), flag.argument].join(" ").trim())}: ` +
          `${prose(flag.description)}.`
        ),
        `- Config file: ${
          fileFields.length === 0
            ? "none (flag only)"
            : fileFields.map(code).join(", ") + (fileFields.length > 1 ? " (by mode)" : "")
        }.`,
        `- Value: ${field.value}.`,
        `- Default: ${defaultText}.`,
      ].join("\n"),
    );
  }
  const actions = help.filter((flag) => !used.has(flag)).map((flag) =>
    `| ${code([flag.names.join(", "), flag.argument].join(" ").trim())} | ` +
    `${cell(flag.description)}${
      flag.default === undefined ? "" : ` (default: ${cell(flag.default)})`
    } |`
  );
  return [
    "# Configuration reference",
    "",
    "<!-- Generated by scripts/gen_config_docs.ts from the Config type (src/config/config.ts) " +
    "and the flags (src/config/flags.ts). Do not edit by hand: run " +
    "`deno run -A scripts/gen_config_docs.ts`. tests/deploy/config_docs_test.ts fails when this " +
    "file is out of date. -->",
    "",
    "Each option has a default, can be set in the `KubeProxyConfiguration` file given with " +
    "`--config` (kube-proxy's own v1alpha1 schema, so an existing kube-proxy ConfigMap works), " +
    "and can be set by a flag. Flags override the file, which overrides the defaults — except " +
    "the flags upstream ignores when `--config` is given (`--bind-address`, " +
    "`--healthz-bind-address`, `--metrics-bind-address`, `--healthz-port`, `--metrics-port`, " +
    "`--cluster-cidr`, `--nodeport-addresses`, `--detect-local-mode`, `--proxy-mode`, " +
    "`--oom-score-adj`, `--feature-gates`, `--profiling`, `--show-hidden-metrics-for-version`), " +
    "which are then ignored with one warning naming them. Flag values follow kube-proxy's " +
    "habits: `--flag=value` or `--flag value`, booleans as `--flag` or `--flag=false`, lists " +
    "comma-separated. `kube-nftproxy --help` prints the same flags.",
    "",
    "The file is decoded as upstream decodes it: strictly, and when only strictness fails " +
    "(unknown fields such as the removed `udpIdleTimeout`, or a repeated key, the last of which " +
    "wins) leniently, with one warning naming what was skipped; a wrong type or a bad value is " +
    "an error naming the field. Upstream fields that have no effect here (`featureGates`, " +
    "`winkernel`, `enableProfiling`, `showHiddenMetricsForVersion`, `configSyncPeriod`, " +
    "`portRange`, a protobuf `clientConnection.contentType`, `logging.vmodule`, …) are " +
    "type-checked and, when set, listed once at start-up with the reason.",
    "",
    "Where an option has one config-file field per mode (`nftables.*` and `iptables.*`), the " +
    "field of the mode in use counts. `--iptables-sync-period` and `--iptables-min-sync-period` " +
    "set the periods in nft mode too, as upstream; `--nftables-*` (ours) apply in nft mode only, " +
    'over them. Flags marked "an extension of ours" do not exist upstream; flags marked ' +
    '"accepted, no effect" are upstream\'s and log one warning saying why when given.',
    "",
    "## Options",
    "",
    "| Option | Flags | Config file | Default |",
    "| --- | --- | --- | --- |",
    ...rows,
    "",
    ...sections.flatMap((section) => [section, ""]),
    "## Actions and other flags",
    "",
    "These flags do not set an option of their own: they choose what the process does, or are " +
    "upstream's, accepted for compatibility.",
    "",
    "| Flag | What it does |",
    "| --- | --- |",
    ...actions,
    "",
  ].join("\n");
}

/** Formats Markdown with `deno fmt`, using the repository's settings (line width 100). */
export async function formatMarkdown(text: string): Promise<string> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--ext=md", "-"],
    cwd: ROOT,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(text));
  await writer.close();
  const output = await child.output();
  if (!output.success) {
    throw new Error(`deno fmt failed: ${new TextDecoder().decode(output.stderr)}`);
  }
  return new TextDecoder().decode(output.stdout);
}

/** The formatted reference, exactly as `docs/configuration.md` must hold it. */
export async function generateConfigDocs(): Promise<string> {
  return await formatMarkdown(renderConfigDocs(await readConfigFields(), parseHelp(helpText())));
}

if (import.meta.main) {
  const text = await generateConfigDocs();
  const path = `${ROOT}${CONFIG_DOCS_PATH}`;
  if (Deno.args.includes("--check")) {
    const current = await Deno.readTextFile(path).catch(() => "");
    if (current !== text) {
      console.error(
        `${CONFIG_DOCS_PATH} is out of date: run deno run -A scripts/gen_config_docs.ts`,
      );
      Deno.exit(1);
    }
  } else {
    await Deno.writeTextFile(path, text);
    console.error(`wrote ${CONFIG_DOCS_PATH}`);
  }
}
