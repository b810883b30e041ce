/**
 * The Dockerfile, its build script and `.dockerignore`, checked without a Docker engine (the
 * image itself is built and run by `deno task image:test`, tests/image/): the build runs on the
 * official Deno image at the Deno version CI uses (or any base given as a build argument),
 * compiles or bundles `main.ts` with the image's permissions, and ships it on a slim Debian with
 * the kernel tools as an exec-form ENTRYPOINT.
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

const BUILD_SCRIPT = await Deno.readTextFile(`${ROOT}scripts/image_build.sh`);

/** The permission flags scripts/image_build.sh gives the proxy, as it prints them. */
async function imagePermissions(env: Record<string, string> = {}): Promise<string[]> {
  const out = await new Deno.Command("sh", {
    args: ["scripts/image_build.sh", "permissions"],
    cwd: ROOT,
    env,
    stdout: "piped",
  }).output();
  assert.ok(out.success);
  return new TextDecoder().decode(out.stdout).trim().split(" ");
}

Deno.test("Dockerfile builds in two stages whose images are build arguments: by default the official Deno image at CI's Deno version, then debian:bookworm-slim", async () => {
  assert.equal(dockerfile.stages.length, 2);
  assert.equal(build.from, "${DENO_IMAGE}");
  assert.equal(build.image, `denoland/deno:${await ciDenoVersion()}`);
  assert.equal(build.name, "build");
  assert.equal(runtime.from, "${BASE_IMAGE}");
  assert.equal(runtime.image, "debian:bookworm-slim");
});

// Read from the file: `deno task image:test` builds and runs the image for real (bundle mode,
// since deno compile needs a denort download this machine cannot make, DESIGN.md §2).
Deno.test("Dockerfile's build stage installs the locked npm packages before copying the source, then runs scripts/image_build.sh in the mode BUILD names (compile by default)", () => {
  const arg = (name: string) =>
    build.instructions.find((i) => i.keyword === "ARG" && i.args.split("=")[0] === name)?.args;
  assert.equal(arg("BUILD"), "BUILD=compile");
  assert.equal(arg("DENORT_BIN"), 'DENORT_BIN=""');
  assert.equal(arg("DENO_CERT"), "DENO_CERT", "no default: an empty DENO_CERT breaks Deno's TLS");
  assert.equal(arg("FFI"), "FFI=on");
  const keywords = build.instructions.map((i) => `${i.keyword} ${i.args}`);
  const install = keywords.indexOf("RUN deno install --frozen");
  assert.ok(install >= 0 && install < keywords.indexOf("COPY . ."), keywords.join("\n"));
  assert.deepEqual(
    runs(build.instructions).at(-1),
    'FFI="${FFI}" sh scripts/image_build.sh "${BUILD}" /out',
  );
});

Deno.test("scripts/image_build.sh compiles main.ts with the image's permissions, the lockfile and the worker module, ignores an empty DENORT_BIN, and runs what it built", () => {
  assert.match(
    BUILD_SCRIPT,
    /deno compile \$PERMISSIONS --no-prompt --frozen --include "\$worker" \\\n\s+--output "\$out\/bin\/kube-nftproxy" main\.ts/,
  );
  assert.match(BUILD_SCRIPT, /^worker=src\/source\/cluster_file_worker\.ts$/m);
  assert.match(BUILD_SCRIPT, /if \[ -z "\$\{DENORT_BIN:-\}" \]; then unset DENORT_BIN; fi/);
  assert.match(BUILD_SCRIPT, /"\$out\/bin\/kube-nftproxy" --version/);
  // The bundle's launcher runs Deno with the same flags, and nothing else grants any.
  assert.match(
    BUILD_SCRIPT,
    /exec \$app\/deno run --no-config --no-lock --no-prompt \$PERMISSIONS /,
  );
  const code = BUILD_SCRIPT.split("\n").filter((line) => !line.trimStart().startsWith("#"));
  assert.doesNotMatch(code.join("\n"), /--allow-all|\s-A\s/);
  // FFI is granted in one place, for libc's one file.
  assert.deepEqual(code.filter((line) => line.includes("--allow-ffi")), [
    '  PERMISSIONS="$PERMISSIONS --allow-ffi=$libc"',
  ]);
});

Deno.test("the image's permissions: only the kernel tools, the network, the config and service-account paths, /tmp and FFI for libc's one file (none with FFI=off); no --allow-all", async () => {
  const arch = await new Deno.Command("uname", { args: ["-m"], stdout: "piped" }).output();
  const libc = `/lib/${new TextDecoder().decode(arch.stdout).trim()}-linux-gnu/libc.so.6`;
  const withFfi = await imagePermissions();
  assert.equal(withFfi.at(-1), `--allow-ffi=${libc}`);
  const flags = await imagePermissions({ FFI: "off" });
  assert.deepEqual(withFfi.slice(0, -1), flags);
  const value = (flag: string) =>
    flags.find((f) => f.startsWith(`${flag}=`))?.slice(flag.length + 1);
  const programs = value("--allow-run")!.split(",");
  assert.deepEqual(
    programs.filter((p) => !/^ip6?tables(-nft|-legacy)?(-save|-restore)?$/.test(p)),
    ["nft", "ip", "conntrack", "ipset", "ipvsadm"],
  );
  assert.equal(programs.length, 5 + 2 * 3 * 3, "every iptables program of both families");
  assert.deepEqual(value("--allow-read")!.split(","), [
    "/etc/kube-nftproxy",
    "/var/lib/kube-proxy",
    "/var/run/secrets/kubernetes.io",
    "/run/secrets/kubernetes.io",
    "/tmp",
    "/usr/local/lib/kube-nftproxy",
  ]);
  assert.equal(value("--allow-write"), "/tmp");
  assert.equal(value("--allow-sys"), "hostname,networkInterfaces");
  assert.deepEqual(flags.filter((f) => !f.includes("=")), ["--allow-net", "--allow-env"]);
  assert.equal(flags.length, 6);
});

Deno.test("README states the image's permissions exactly as scripts/image_build.sh gives them", async () => {
  const readme = await Deno.readTextFile(`${ROOT}README.md`);
  for (const flag of await imagePermissions()) {
    // README shows libc's path on x86_64.
    const shown = flag.replace(
      /^--allow-ffi=\/lib\/[^/]+-linux-gnu\//,
      "--allow-ffi=/lib/x86_64-linux-gnu/",
    );
    assert.ok(readme.includes(shown), `README lacks ${shown}`);
  }
});

Deno.test("Dockerfile's runtime stage installs nftables, iptables, conntrack, iproute2, ipset and ipvsadm without recommends and cleans apt's lists and the documentation in the same layer", () => {
  const install = runs(runtime.instructions).find((run) => run.includes("apt-get install"));
  assert.ok(install, "no RUN apt-get install in the runtime stage");
  const packages = /apt-get install ((?:-\S+ )*)(.*?)(?: &&|$)/.exec(install);
  assert.ok(packages);
  assert.deepEqual(packages[2].split(" ").sort(), [
    "conntrack",
    "iproute2",
    "ipset",
    "iptables",
    "ipvsadm",
    "nftables",
  ]);
  assert.match(install, /^apt-get update && apt-get install /);
  assert.match(install, /&& rm -rf \/var\/lib\/apt\/lists\/\* /);
  assert.match(install, / \/usr\/share\/doc /);
});

Deno.test("Dockerfile's ENTRYPOINT is the proxy in exec form, so the container's args reach it as main.ts's flags", () => {
  const entrypoints = runtime.instructions.filter((i) => i.keyword === "ENTRYPOINT");
  assert.equal(entrypoints.length, 1);
  assert.deepEqual(execForm(entrypoints[0].args), ["/usr/local/bin/kube-nftproxy"]);
  assert.equal(runtime.instructions.some((i) => i.keyword === "CMD"), false);
  const copies = runtime.instructions.filter((i) => i.keyword === "COPY");
  assert.deepEqual(copies.map((i) => i.args), ["--from=build /out/ /usr/local/"]);
  assert.match(BUILD_SCRIPT, /mkdir -p "\$out\/bin"/, "both modes put the proxy in bin/");
});

/** hadolint's rules that apply to this file: `[id, what it asks, instructions breaking it]`. */
const LINT_RULES: [string, string, (file: Dockerfile) => Instruction[]][] = [
  [
    "DL3006",
    "every FROM names a tag or digest",
    (file) =>
      file.stages.filter((stage) => !/[:@]/.test(stage.image)).map((stage) =>
        file.instructions.find((i) => i.keyword === "FROM" && i.args.startsWith(stage.from))!
      ),
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
  for (const path of ["deno.lock", "denort", "scripts/image_build.sh"]) {
    assert.equal(ignored(path), false, path);
  }
  for (
    const path of [
      "tests/fixtures/objects.ts",
      "src/config/flags_test.ts",
      ".git/HEAD",
      "kube-nftproxy",
      "bench/scale.ts",
      "scripts/image.sh",
      "node_modules/x/index.js",
    ]
  ) {
    assert.equal(ignored(path), true, path);
  }
});
