/**
 * The configuration reference stays what the code says: docs/configuration.md is exactly what
 * scripts/gen_config_docs.ts generates from the `Config` type and `--help`, and names every
 * flag `--help` lists and every `Config` field.
 *
 * @module
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../src/config/config.ts";
import { helpText } from "../../src/config/flags.ts";
import {
  CONFIG_DOCS_PATH,
  generateConfigDocs,
  parseHelp,
  ROOT,
} from "../../scripts/gen_config_docs.ts";

const docs = await Deno.readTextFile(`${ROOT}${CONFIG_DOCS_PATH}`);

Deno.test("docs/configuration.md is exactly what scripts/gen_config_docs.ts generates (run it after changing Config or a flag)", async () => {
  assert.equal(
    docs,
    await generateConfigDocs(),
    `${CONFIG_DOCS_PATH} is out of date: run deno run -A scripts/gen_config_docs.ts`,
  );
});

Deno.test("docs/configuration.md names every flag --help lists", () => {
  // Read straight from the help text, independently of the generator's parser.
  const flags = [...helpText().matchAll(/^ {2}(-[\w-]+)(?:, (--[\w-]+))?/gm)]
    .flatMap((match) => match.slice(1).filter((flag) => flag !== undefined));
  assert.ok(flags.length >= 30, `only ${flags.length} flags found in --help`);
  const missing = flags.filter((flag) => !new RegExp(`(?:\`|\`-\\w, )${flag}[\\s,\`]`).test(docs));
  assert.deepEqual(missing, []);
});

Deno.test("docs/configuration.md has a section for every Config field", () => {
  const missing = Object.keys(DEFAULT_CONFIG).filter((key) => !docs.includes(`### \`${key}\`\n`));
  assert.deepEqual(missing, []);
});

Deno.test("parseHelp() reads names, argument, description and default, joining wrapped lines", () => {
  const help = [
    "Usage: kube-nftproxy [flags]",
    "",
    "Options:",
    "  --mode <mode>           backend: nft or iptables (default:",
    "                          nft)",
    "  --once [bool]           do one full sync, then exit (default: false)",
    "  --config <path>         read a KubeProxyConfiguration",
    "  -v, --v <level>         log verbosity (default: 0)",
    "  --version               print the version and exit",
    "",
  ].join("\n");
  assert.deepEqual(parseHelp(help), [
    {
      names: ["--mode"],
      argument: "<mode>",
      description: "backend: nft or iptables",
      default: "nft",
    },
    {
      names: ["--once"],
      argument: "[bool]",
      description: "do one full sync, then exit",
      default: "false",
    },
    {
      names: ["--config"],
      argument: "<path>",
      description: "read a KubeProxyConfiguration",
      default: undefined,
    },
    { names: ["-v", "--v"], argument: "<level>", description: "log verbosity", default: "0" },
    {
      names: ["--version"],
      argument: "",
      description: "print the version and exit",
      default: undefined,
    },
  ]);
});

Deno.test("parseHelp() finds every flag of the real --help", () => {
  const names = parseHelp(helpText()).flatMap((flag) => flag.names);
  const listed = [...helpText().matchAll(/(?:^ {2}|, )(--?[\w-]+)/gm)].map((m) => m[1]);
  assert.deepEqual(names, listed);
});
