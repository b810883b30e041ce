/**
 * Spec of `--dry-run` on a live node: next to rules a proxy programmed, `main.ts --dry-run`
 * prints the transaction that would bring the kernel to a changed cluster — and applies none
 * of it. Applying what it printed builds exactly the tables the proxy itself programs for the
 * changed cluster, after which a dry run has nothing left to say. And `explain --live`, which
 * reads the same diff, says whether the kernel holds the rules it explains for one packet.
 *
 * @module
 */
import assert from "node:assert/strict";
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import { createNamespace, deleteNamespace, netnsTestGate, run, shortId } from "../netns/netns.ts";
import { cacheProxyDependencies, MAIN } from "./proxy_harness.ts";
import { stringify } from "./yaml.ts";
import { applyNft } from "../../src/apply/nft.ts";
import type { DryRunDiff } from "../../src/dryrun/table_diff.ts";
import type { RawObject } from "../../src/source/events.ts";
import { listTables, tableText } from "../property/cluster.ts";

const gate = await netnsTestGate();

function cluster(webEndpoints: string[], withOther: boolean): RawObject[] {
  return [
    node("node-a", { ips: ["192.168.50.2"] }),
    serviceCIDR("kubernetes", ["10.96.0.0/16"]),
    service({ name: "web", clusterIPs: ["10.96.0.10"] }),
    endpointSlice({ name: "web-1", service: "web", endpoints: webEndpoints }),
    ...(withOther
      ? [
        service({ name: "other", clusterIPs: ["10.96.0.20"] }),
        endpointSlice({ name: "other-1", service: "other", endpoints: ["10.244.1.30"] }),
      ]
      : []),
  ];
}

/** Runs main.ts in `ns` with `args`; returns stdout (throws on failure). */
async function runMain(ns: string, args: string[]): Promise<string> {
  const out = await run([Deno.execPath(), "run", "-A", MAIN, ...args], { ns, timeoutMs: 60_000 });
  assert.equal(out.code, 0, out.stderr);
  return out.stdout;
}

/** The node's flags, with the cluster in `file`. */
const nodeFlags = (file: string) => [
  `--from-file=${file}`,
  "--hostname-override=node-a",
  "--cluster-cidr=10.244.0.0/16",
];

/** Runs the proxy in `ns` with the cluster in `file`; returns stdout. */
function proxy(ns: string, file: string, args: string[]): Promise<string> {
  return runMain(ns, [...nodeFlags(file), ...args]);
}

/**
 * Runs `fn` with two cluster files: web with two endpoints and the other service, then web
 * with a third endpoint (and the other service only if `keepOther`). Removed afterwards.
 */
async function withClusters(
  keepOther: boolean,
  fn: (before: string, after: string) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "knp-dry-" });
  const before = `${dir}/before.yaml`;
  const after = `${dir}/after.yaml`;
  try {
    await Deno.writeTextFile(before, stringify(cluster(["10.244.1.11", "10.244.1.12"], true)));
    await Deno.writeTextFile(
      after,
      stringify(cluster(["10.244.1.11", "10.244.1.12", "10.244.1.13"], keepOther)),
    );
    await fn(before, after);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test({
  name:
    "--dry-run on a live node prints the diff to the changed cluster, applies nothing, and its transaction builds what the proxy would",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await cacheProxyDependencies();
    const id = shortId();
    const [live, reference] = [`knp-${id}-dry`, `knp-${id}-ref`];
    // One more endpoint for web; the other service is gone.
    await withClusters(false, async (before, after) => {
      try {
        await createNamespace(live);
        await createNamespace(reference);
        await proxy(live, before, ["--once"]);
        const programmed = tableText((await listTables(live)).get("ip kube-nftproxy"));

        assert.match(await proxy(live, before, ["--dry-run"]), /^# no change: /m);

        const text = await proxy(live, after, ["--dry-run"]);
        assert.match(text, /^# ip kube-nftproxy: changed: /m);
        assert.match(text, /^# ip6 kube-nftproxy: no change$/m);
        assert.match(
          text,
          /^add element ip kube-nftproxy cluster-endpoints-tcp \{ 10\.96\.0\.10 \. tcp \. 80 \. 2 : 10\.244\.1\.13 \. 8080 \}$/m,
        );
        assert.match(
          text,
          /^delete element ip kube-nftproxy service-ips \{ .*10\.96\.0\.20 \. tcp \. 80\b/m,
        );
        assert.match(text, /^delete chain ip kube-nftproxy lb-tcp-2$/m, "web moves to lb-tcp-3");
        assert.doesNotMatch(text, /^delete table/m, "changed in place, not recreated");

        const json = JSON.parse(
          await proxy(live, after, ["--dry-run", "--output=json"]),
        ) as DryRunDiff;
        const ip = json.tables.find((t) => t.family === "ip")!;
        assert.equal(ip.state, "changed");
        assert.ok(
          ip.commands.some((c) =>
            c.op === "add" && c.object === "element" && c.name === "cluster-endpoints-tcp" &&
            c.items?.some((e) => e.includes("10.244.1.13"))
          ),
        );
        assert.equal(json.script, text.split("\n").filter((l) => !l.startsWith("#")).join("\n"));

        assert.equal(
          tableText((await listTables(live)).get("ip kube-nftproxy")),
          programmed,
          "a dry run changes nothing in the kernel",
        );

        await applyNft(json.script, { netns: live });
        await proxy(reference, after, ["--once"]);
        const quirks = { ignoreProtocolDependency: true };
        const [patched, fresh] = [
          await listTables(live, quirks),
          await listTables(reference, quirks),
        ];
        for (const table of ["ip kube-nftproxy", "ip6 kube-nftproxy"]) {
          assert.equal(tableText(patched.get(table)), tableText(fresh.get(table)), table);
        }
        assert.match(await proxy(live, after, ["--dry-run"]), /^# no change: /m);
      } finally {
        await deleteNamespace(live);
        await deleteNamespace(reference);
      }
    });
  },
});

Deno.test({
  name:
    "explain --live reads the node's kernel: the explained rules hold, or what a sync would change for the packet",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await cacheProxyDependencies();
    const ns = `knp-${shortId()}-live`;
    const explain = (file: string) =>
      runMain(ns, [
        "explain",
        "--from=192.168.50.9",
        "--to=10.96.0.10:80/tcp",
        ...nodeFlags(file),
        "--live",
      ]);
    await withClusters(true, async (before, after) => {
      try {
        await createNamespace(ns);
        await proxy(ns, before, ["--once"]);
        assert.match(await explain(before), /^kernel: +the live rules are these/m);
        const behind = await explain(after);
        assert.match(behind, /^verdict: +dnat/m);
        assert.match(
          behind,
          /10\.244\.1\.13:8080 +33\.3%/,
          "the explanation is of the wanted rules",
        );
        assert.match(behind, /^kernel: +the live rules DIFFER for this packet/m);
        assert.match(
          behind,
          /^ {2}add element ip kube-nftproxy cluster-endpoints-tcp \{ 10\.96\.0\.10 \. tcp \. 80 \. 2 .* 10\.244\.1\.13 \. 8080 \}$/m,
        );
      } finally {
        await deleteNamespace(ns);
      }
    });
  },
});

Deno.test({
  name:
    "--dry-run in iptables mode prints, per family, only the chains a sync would rewrite, and applies nothing",
  ignore: gate.ignore,
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await cacheProxyDependencies();
    await withClusters(true, async (before, after) => {
      for (const backend of ["nft", "legacy"]) {
        const ns = `knp-${shortId()}-dryipt`;
        const mode = ["--mode=iptables", `--iptables-backend=${backend}`];
        const save = async () =>
          (await run([`iptables-${backend}-save`, "-t", "nat"], { ns })).stdout
            .split("\n").filter((l) => l.startsWith("-A KUBE-") || l.startsWith(":KUBE-"))
            .map((l) => l.replace(/\[\d+:\d+\]/, "")).join("\n");
        try {
          await createNamespace(ns);
          await proxy(ns, before, [...mode, "--once"]);
          const programmed = await save();
          assert.equal(
            await proxy(ns, before, [...mode, "--dry-run"]),
            `# IPv4 (iptables-${backend}): no change\n# IPv6 (iptables-${backend}): no change\n`,
          );
          const text = await proxy(ns, after, [...mode, "--dry-run"]);
          assert.match(
            text,
            new RegExp(
              `^# IPv4 \\(iptables-${backend}\\): 2 chains written; input for iptables-restore --noflush$`,
              "m",
            ),
          );
          assert.match(text, /^-A KUBE-SEP-\w+ .*--to-destination 10\.244\.1\.13:8080$/m);
          assert.match(text, /^# IPv6 \(iptables-\w+\): no change$/m);
          const json = JSON.parse(await proxy(ns, after, [...mode, "--dry-run", "--output=json"]));
          assert.deepEqual(json.families[0].chainsWritten.map((c: string) => c.split("-")[0]), [
            "nat/KUBE",
            "nat/KUBE",
          ]);
          assert.equal(await save(), programmed, "a dry run changes nothing");
          // What it printed, restored, leaves nothing more to do.
          const ipv4 = text.split("# IPv6")[0].split("\n").filter((l) => !l.startsWith("#"))
            .join("\n");
          const restored = await run([`iptables-${backend}-restore`, "--noflush"], {
            ns,
            stdin: ipv4,
          });
          assert.equal(restored.code, 0, restored.stderr);
          assert.match(
            await proxy(ns, after, [...mode, "--dry-run"]),
            /^# IPv4 \(.*\): no change$/m,
          );
        } finally {
          await deleteNamespace(ns);
        }
      }
    });
  },
});
