/**
 * Specs of the proxy's start-up as a user meets it: every error a user can cause — a cluster
 * file that is hostile, too deep, missing or badly indented, a bad flag or config file, an API
 * server a one-shot run cannot reach — ends `main.ts` within a bounded time with exactly one
 * line naming the input and the problem, exit status 2 and no stack trace; and SIGTERM or SIGINT
 * end a one-shot run that is still waiting, at once.
 *
 * Each run happens inside a throwaway network namespace (`knp-…`): `--once` sets conntrack
 * sysctls and would program rules, which must never touch the machine's own namespace.
 *
 * @module
 */
import assert from "node:assert/strict";
import { aliasBomb } from "../fixtures/alias_bomb.ts";
import {
  createNamespace,
  deleteNamespace,
  netnsTestGate,
  run,
  shortId,
  startProcess,
} from "../netns/netns.ts";
import { cacheProxyDependencies, MAIN } from "./proxy_harness.ts";

const gate = await netnsTestGate();

/** What one run of main.ts did. */
interface Outcome {
  code: number;
  /** stderr's lines, without the `I …` log lines. */
  errors: string[];
  stderr: string;
  ms: number;
}

/** Runs main.ts with `args` in namespace `ns`. */
async function proxy(ns: string, args: string[]): Promise<Outcome> {
  const started = performance.now();
  const out = await run(
    [Deno.execPath(), "run", "--cached-only", "-A", MAIN, "--hostname-override=node-a", ...args],
    { ns, timeoutMs: 30_000, env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" } },
  );
  const ms = performance.now() - started;
  const errors = out.stderr.split("\n").filter((l) =>
    l !== "" && !/^[IW]\d{4} \d\d:\d\d:\d\d\.\d{6} /.test(l)
  );
  return { code: out.code, errors, stderr: out.stderr, ms };
}

/** Runs `fn` with a fresh namespace and a temporary directory, both removed afterwards. */
async function withNamespace(fn: (ns: string, dir: string) => Promise<void>): Promise<void> {
  gate.assertUsable();
  await cacheProxyDependencies();
  const ns = `knp-start-${shortId()}`;
  const dir = await Deno.makeTempDir({ prefix: "knp-start-" });
  await createNamespace(ns);
  try {
    await fn(ns, dir);
  } finally {
    await deleteNamespace(ns, { killProcesses: true });
    await Deno.remove(dir, { recursive: true });
  }
}

/** Asserts one error line, exactly `line` (or matching it), exit 2, no stack, within `ms`. */
function assertOneLine(outcome: Outcome, line: string | RegExp, ms = 2000): void {
  assert.equal(outcome.code, 2, outcome.stderr);
  assert.equal(outcome.errors.length, 1, outcome.stderr);
  if (typeof line === "string") assert.equal(outcome.errors[0], line);
  else assert.match(outcome.errors[0], line);
  assert.doesNotMatch(outcome.stderr, /^\s+at /m, "no stack trace");
  assert.ok(outcome.ms < ms, `took ${Math.round(outcome.ms)} ms`);
}

Deno.test({
  name: "main.ts --once refuses each bad cluster file with one line and exit 2, within 2 s",
  ignore: gate.ignore,
  fn: () =>
    withNamespace(async (ns, dir) => {
      const files: [string, string, string][] = [
        [
          "bomb.yaml",
          aliasBomb({ spec: true }),
          "line 9, column 42: aliases expand to more than 10000 values, the limit for a file of " +
          "this size; write the values out instead",
        ],
        [
          "deep.yaml",
          `apiVersion: v1\nkind: Service\nmetadata: {name: deep}\nspec: {ports: ${"[".repeat(150)}${
            "]".repeat(150)
          }}\n`,
          "line 4, column 113: nesting exceeded maxDepth (100)",
        ],
        [
          "indent.yaml",
          "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n namespace: default\n",
          "line 5, column 2: bad indentation of a mapping entry",
        ],
      ];
      for (const [name, text, problem] of files) {
        await Deno.writeTextFile(`${dir}/${name}`, text);
        assertOneLine(
          await proxy(ns, [`--from-file=${dir}/${name}`, "--once"]),
          `kube-nftproxy: cannot parse cluster file ${dir}/${name}: ${problem}`,
        );
      }
      assertOneLine(
        await proxy(ns, [`--from-file=${dir}/missing.yaml`, "--once"]),
        `kube-nftproxy: cannot read cluster file ${dir}/missing.yaml: no such file`,
      );
    }),
});

Deno.test({
  name: "main.ts refuses a bad flag with one line and exit 2",
  ignore: gate.ignore,
  fn: () =>
    withNamespace(async (ns) => {
      assertOneLine(
        await proxy(ns, ["--mode=ipvs", "--once"]),
        'kube-nftproxy: flag --mode is "ipvs", must be nft or iptables',
      );
    }),
});

Deno.test({
  name: "main.ts refuses a hostile or oversized --config file with one line and exit 2, within 2 s",
  ignore: gate.ignore,
  fn: () =>
    withNamespace(async (ns, dir) => {
      const levels = [`  l0: &l0 [${Array(10).fill("lol").join(", ")}]`];
      for (let i = 1; i < 9; i++) {
        levels.push(`  l${i}: &l${i} [${Array(10).fill(`*l${i - 1}`)}]`);
      }
      const bomb = `${dir}/bomb.conf`;
      await Deno.writeTextFile(
        bomb,
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n" +
          `featureGates:\n${levels.join("\n")}\n`,
      );
      assertOneLine(
        await proxy(ns, [`--config=${bomb}`, "--once"]),
        new RegExp(
          `^kube-nftproxy: config ${bomb}: not valid YAML: aliases expand to more than 10000 ` +
            "values, the limit for a file of this size; write the values out instead \\(7:\\d+\\)$",
        ),
      );
      const huge = `${dir}/huge.conf`;
      await Deno.writeTextFile(huge, `kind: KubeProxyConfiguration\n#${"x".repeat(2 ** 20)}\n`);
      assertOneLine(
        await proxy(ns, [`--config=${huge}`, "--once"]),
        `kube-nftproxy: config ${huge}: cannot read: larger than 1 MiB`,
      );
    }),
});

Deno.test({
  name:
    "main.ts --once gives up on an API server that does not answer after one sync period: one line, exit 2",
  ignore: gate.ignore,
  fn: () =>
    withNamespace(async (ns) => {
      // Nothing listens on 127.0.0.1:6443 inside the fresh namespace: connections are refused.
      const outcome = await proxy(ns, [
        "--master=http://127.0.0.1:6443",
        "--once",
        "--nftables-sync-period=2s",
      ]);
      assertOneLine(
        outcome,
        /^kube-nftproxy: the API server at http:\/\/127\.0\.0\.1:6443 did not send the initial state within 2 s: cannot watch-list \w+s: .*Connection refused/,
        5000,
      );
      assert.ok(outcome.ms > 2000, "waited the sync period");
    }),
});

for (const signal of ["SIGTERM", "SIGINT"] as const) {
  Deno.test({
    name: `main.ts --dry-run waiting for an API server ends at once on ${signal}, applying nothing`,
    ignore: gate.ignore,
    fn: () =>
      withNamespace(async (ns) => {
        const process = startProcess(
          [Deno.execPath(), "run", "--cached-only", "-A", MAIN, "--hostname-override=node-a"]
            .concat(["--master=http://127.0.0.1:6443", "--dry-run"]),
          { ns, env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" } },
        );
        try {
          await process.waitForOutput(/cannot watch-list/, 15_000);
          const sent = performance.now();
          Deno.kill(process.pid, signal);
          const status = await Promise.race([
            process.status,
            new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 3000)),
          ]);
          assert.ok(status !== undefined, `still running 3 s after ${signal}`);
          assert.ok(performance.now() - sent < 1000, "ended within 1 s");
          assert.equal(status.code, 1, process.output());
          assert.match(process.output(), /interrupted before the sync; nothing was applied/);
          assert.doesNotMatch(process.output(), /^\s+at /m);
        } finally {
          await process.stop();
        }
      }),
  });
}
