/**
 * Spec of a running daemon whose cluster file turns hostile: the real proxy (`main.ts
 * --from-file`) in a throwaway namespace has its file replaced by an alias bomb, a file nested
 * past the limit, one with bad indentation and one past the size limit's cousin (a large valid
 * file, to be read while health is asked for). For each bad file it logs one warning and keeps
 * the rules it has; `/healthz` answers within 1 s throughout (asked every 100 ms, from inside
 * the namespace, and measured); and the next good file is synced as usual.
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
import { endpointSlice, node, service, serviceCIDR } from "../fixtures/objects.ts";
import type { RawObject } from "../../src/source/events.ts";
import { startNamespacedApiServer } from "./namespaced_api_server.ts";
import { cacheProxyDependencies, MAIN } from "./proxy_harness.ts";
import { stringify } from "./yaml.ts";

const gate = await netnsTestGate();
const HEALTHZ = "http://127.0.0.1:10256/healthz";

/** Services `web-0` … with one endpoint each, the node and the service CIDR. */
function cluster(services: number): RawObject[] {
  const objects: RawObject[] = [
    node("node-a", { ips: ["192.168.50.2"] }),
    serviceCIDR("kubernetes", ["10.96.0.0/16"]),
  ];
  for (let i = 0; i < services; i++) {
    const name = `web-${i}`;
    objects.push(service({ name, clusterIPs: [`10.96.${(i + 1) >> 8}.${(i + 1) & 255}`] }));
    objects.push(endpointSlice({ name: `${name}-1`, service: name, endpoints: ["10.244.1.5"] }));
  }
  return objects;
}

/** Replaces `path` the way editors and ConfigMap volumes do: a sibling file renamed over it. */
async function replace(path: string, text: string): Promise<void> {
  await Deno.writeTextFile(`${path}.tmp`, text);
  await Deno.rename(`${path}.tmp`, path);
}

Deno.test({
  name:
    "A running daemon keeps its rules and answers /healthz within 1 s while its cluster file turns hostile, then syncs the next good one",
  ignore: gate.ignore,
  fn: async () => {
    gate.assertUsable();
    await cacheProxyDependencies();
    const ns = `knp-hostile-${shortId()}`;
    const dir = await Deno.makeTempDir({ prefix: "knp-hostile-" });
    const file = `${dir}/cluster.yaml`;
    await Deno.writeTextFile(file, stringify(cluster(1)));
    await createNamespace(ns);
    const proxy = startProcess([
      Deno.execPath(),
      "run",
      "--cached-only",
      "-A",
      MAIN,
      `--from-file=${file}`,
      "--hostname-override=node-a",
      "--cluster-cidr=10.244.0.0/16",
      "--healthz-bind-address=127.0.0.1:10256",
      "--metrics-bind-address=",
      "--nftables-min-sync-period=50ms",
      "-v=2",
    ], { ns, env: { NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" } });
    const api = await startNamespacedApiServer(ns);
    const syncs = () => proxy.output().match(/\bsynced /g)?.length ?? 0;
    const warnings = () => proxy.output().match(/objects read last"?$/gm)?.length ?? 0;
    const ruleset = async () => (await run(["nft", "list", "ruleset"], { ns })).stdout;
    let probing = true;
    const latencies: number[] = [];
    const failures: string[] = [];
    try {
      await proxy.waitForOutput(/\bsynced /, 20_000);
      assert.match(await ruleset(), /10\.96\.0\.1 /);
      // Health asked every 100 ms from inside the namespace, each answer timed.
      const probe = (async () => {
        while (probing) {
          const asked = performance.now();
          const answer = await api.fetch(HEALTHZ);
          latencies.push(performance.now() - asked);
          if (!("status" in answer)) failures.push(answer.error);
          await new Promise((r) => setTimeout(r, 100));
        }
      })();
      const hostile: [string, string][] = [
        ["an alias bomb", aliasBomb({ spec: true })],
        [
          "nesting past the limit",
          `${stringify(cluster(1))}---\na: ${"[".repeat(150)}${"]".repeat(150)}\n`,
        ],
        ["bad indentation", "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n namespace: y\n"],
      ];
      for (const [i, [what, text]] of hostile.entries()) {
        const before = syncs();
        await replace(file, text);
        const deadline = Date.now() + 5000;
        while (warnings() < i + 1 && Date.now() < deadline) {
          await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(warnings(), i + 1, `one warning for ${what}:\n${proxy.output().slice(-3000)}`);
        assert.equal(syncs(), before, `no sync for ${what}`);
      }
      assert.match(await ruleset(), /10\.96\.0\.1 /, "the rules stay");
      // A large good file is read, parsed and synced (in several syncs: its changes are taken
      // in slices) while health answers.
      await replace(file, stringify(cluster(10_000)));
      const deadline = Date.now() + 60_000;
      let rules = "";
      while (!/10\.96\.39\.16 /.test(rules) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        rules = await ruleset();
      }
      assert.match(
        rules,
        /10\.96\.39\.16 /,
        `the last of the 10,000 services:\n${proxy.output().slice(-3000)}`,
      );
      probing = false;
      await probe;
      const worst = Math.max(...latencies);
      console.log(
        `hostile file daemon: ${latencies.length} health answers, slowest ${Math.round(worst)} ms`,
      );
      assert.deepEqual(failures, []);
      assert.ok(worst < 1000, `/healthz took ${Math.round(worst)} ms`);
    } finally {
      probing = false;
      await api.close();
      await proxy.stop();
      await deleteNamespace(ns, { killProcesses: true });
      await Deno.remove(dir, { recursive: true });
    }
  },
});
