/**
 * The Dockerfile and `.dockerignore`, checked without a Docker engine: the build runs on the
 * official Deno image at the Deno version CI uses, compiles `main.ts` into one binary (honouring
 * DENORT_BIN), and ships it on a slim Debian with the kernel tools as an exec-form ENTRYPOINT.
 * The `DLxxxx` rows are the hadolint rules that matter for this file, restated because hadolint
 * itself is not installable here.
 *
 * @module
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  type Dockerfile,
  dockerignore,
  execForm,
  type Instruction,
  parseDockerfile,
} from "./dockerfile.ts";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const dockerfile = parseDockerfile(await Deno.readTextFile(`${ROOT}Dockerfile`));
const [build, runtime] = dockerfile.stages;

/** The Deno version CI runs (`npx -y deno@X` in .ci/run): the build image must match it. */
async function ciDenoVersion(): Promise<string> {
  const match = /deno@(\d+\.\d+\.\d+)/.exec(await Deno.readTextFile(`${ROOT}.ci/run`));
  assert.ok(match, ".ci/run names no deno@X.Y.Z");
  return match[1];
}

function runs(instructions: readonly Instruction[]): string[] {
  return instructions.filter((i) => i.keyword === "RUN").map((i) => i.args);
}

Deno.test("Dockerfile builds in two stages: the official Deno image at CI's Deno version, then debian:bookworm-slim", async () => {
  assert.equal(dockerfile.stages.length, 2);
  assert.equal(build.image, `denoland/deno:${await ciDenoVersion()}`);
  assert.equal(build.name, "build");
  assert.equal(runtime.image, "debian:bookworm-slim");
});

// Read from the file, not built: no Docker engine here, and `deno compile` needs a denort
// download this machine cannot make (DESIGN.md §2). What the instructions say is what is checked.
Deno.test("Dockerfile's build stage asks deno compile for main.ts with every permission and the lockfile, then runs the binary's --version", () => {
  const compile = runs(build.instructions).find((run) => run.includes("deno compile"));
  assert.ok(compile, "no RUN deno compile in the build stage");
  assert.match(compile, /deno compile (?:.* )?(?:--allow-all|-A) /);
  assert.match(compile, / --frozen /, "the lockfile must decide the npm versions");
  assert.match(compile, / --output \/kube-nftproxy main\.ts/);
  assert.match(
    compile,
    / --include src\/source\/cluster_file_worker\.ts /,
    "the cluster file parser's worker module must be embedded",
  );
  assert.match(compile, /&& \/kube-nftproxy --version/, "the binary is run once in the build");
});

Deno.test("Dockerfile's build stage takes DENORT_BIN as a build argument and ignores it when empty", () => {
  const arg = build.instructions.find((i) =>
    i.keyword === "ARG" && i.args.startsWith("DENORT_BIN")
  );
  assert.ok(arg, "no ARG DENORT_BIN in the build stage");
  // deno compile reads DENORT_BIN when it is set at all; an empty value must not reach it.
  const compile = runs(build.instructions).find((run) => run.includes("deno compile"))!;
  assert.match(
    compile,
    /^if \[ -z "\$\{DENORT_BIN\}" \]; then unset DENORT_BIN; fi && deno compile/,
  );
});

Deno.test("Dockerfile's runtime stage installs nftables, iptables, conntrack and iproute2 without recommends and cleans the apt lists in the same layer", () => {
  const install = runs(runtime.instructions).find((run) => run.includes("apt-get install"));
  assert.ok(install, "no RUN apt-get install in the runtime stage");
  const packages = /apt-get install ((?:-\S+ )*)(.*?)(?: &&|$)/.exec(install);
  assert.ok(packages);
  assert.deepEqual(packages[2].split(" ").sort(), [
    "conntrack",
    "iproute2",
    "iptables",
    "nftables",
  ]);
  assert.match(install, /^apt-get update && apt-get install /);
  assert.match(install, /&& rm -rf \/var\/lib\/apt\/lists\/\*$/);
});

Deno.test("Dockerfile's ENTRYPOINT is the compiled binary in exec form, so the container's args reach it as main.ts's flags", () => {
  const entrypoints = runtime.instructions.filter((i) => i.keyword === "ENTRYPOINT");
  assert.equal(entrypoints.length, 1);
  assert.deepEqual(execForm(entrypoints[0].args), ["/usr/local/bin/kube-nftproxy"]);
  assert.equal(runtime.instructions.some((i) => i.keyword === "CMD"), false);
  const copies = runtime.instructions.filter((i) => i.keyword === "COPY");
  assert.deepEqual(copies.map((i) => i.args), [
    "--from=build /kube-nftproxy /usr/local/bin/kube-nftproxy",
  ]);
});

/** hadolint's rules that apply to this file: `[id, what it asks, instructions breaking it]`. */
const LINT_RULES: [string, string, (file: Dockerfile) => Instruction[]][] = [
  [
    "DL3006",
    "every FROM names a tag or digest",
    (file) =>
      file.instructions.filter((i) => i.keyword === "FROM" && !/[:@]/.test(i.args.split(/\s+/)[0])),
  ],
  [
    "DL3007",
    "no FROM uses the latest tag",
    (file) => file.instructions.filter((i) => i.keyword === "FROM" && /:latest\b/.test(i.args)),
  ],
  ["DL3020", "COPY, never ADD", (file) => file.instructions.filter((i) => i.keyword === "ADD")],
  [
    "DL3025",
    "ENTRYPOINT and CMD in exec form",
    (file) =>
      file.instructions.filter((i) =>
        (i.keyword === "ENTRYPOINT" || i.keyword === "CMD") && execForm(i.args) === undefined
      ),
  ],
  [
    "DL3003",
    "WORKDIR instead of cd",
    (file) =>
      file.instructions.filter((i) => i.keyword === "RUN" && /(?:^|&&|;)\s*cd\s/.test(i.args)),
  ],
  [
    "DL3014",
    "apt-get install with -y",
    (file) => file.instructions.filter((i) => /apt-get install(?! -y)/.test(i.args)),
  ],
  [
    "DL3015",
    "apt-get install with --no-install-recommends",
    (file) =>
      file.instructions.filter((i) =>
        /apt-get install/.test(i.args) && !i.args.includes("--no-install-recommends")
      ),
  ],
  [
    "DL3009",
    "apt lists removed in the layer that fetched them",
    (file) =>
      file.instructions.filter((i) =>
        /apt-get update/.test(i.args) && !i.args.includes("rm -rf /var/lib/apt/lists/*")
      ),
  ],
  [
    "DL3027",
    "apt-get, not apt",
    (file) =>
      file.instructions.filter((i) => i.keyword === "RUN" && /(?:^|&&|;)\s*apt\s/.test(i.args)),
  ],
  [
    "DL4000",
    "no MAINTAINER",
    (file) => file.instructions.filter((i) => i.keyword === "MAINTAINER"),
  ],
  ["DL3022", "COPY --from names an earlier stage", (file) =>
    file.instructions.filter((i) => {
      const from = /--from=(\S+)/.exec(i.args)?.[1];
      return i.keyword === "COPY" && from !== undefined &&
        !file.stages.some((stage) => stage.name === from);
    })],
];

for (const [id, rule, broken] of LINT_RULES) {
  Deno.test(`Dockerfile follows hadolint ${id}: ${rule}`, () => {
    assert.deepEqual(broken(dockerfile).map((i) => `line ${i.line}: ${i.keyword} ${i.args}`), []);
  });
}

Deno.test(".dockerignore lets every local module main.ts loads into the build context, and no tests", async () => {
  const ignored = dockerignore(await Deno.readTextFile(`${ROOT}.dockerignore`));
  const info = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "main.ts"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(info.success, new TextDecoder().decode(info.stderr));
  const graph: { modules: { specifier: string }[] } = JSON.parse(
    new TextDecoder().decode(info.stdout),
  );
  const local = graph.modules.map((m) => m.specifier)
    .filter((specifier) => specifier.startsWith("file:"))
    .map((specifier) => fileURLToPath(specifier).slice(ROOT.length));
  assert.ok(local.includes("main.ts") && local.includes("deno.json"), local.join(", "));
  assert.deepEqual(local.filter(ignored), []);
  for (const path of ["deno.lock", "denort"]) assert.equal(ignored(path), false, path);
  for (
    const path of [
      "tests/fixtures/objects.ts",
      "src/config/flags_test.ts",
      ".git/HEAD",
      "kube-nftproxy",
      "bench/scale.ts",
      "node_modules/x/index.js",
    ]
  ) {
    assert.equal(ignored(path), true, path);
  }
});
