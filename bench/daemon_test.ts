import assert from "node:assert/strict";
import { loadAll } from "js-yaml";
import { generateCluster } from "./cluster.ts";
import { clusterYaml } from "./daemon.ts";

Deno.test("clusterYaml() writes the whole cluster as YAML documents that read back equal", () => {
  const cluster = generateCluster({ services: 3, endpoints: 2 });
  const yaml = clusterYaml(cluster);
  assert.ok(!yaml.trimStart().startsWith("{"), "block YAML, not JSON documents");
  assert.deepEqual(loadAll(yaml), [
    cluster.node,
    cluster.serviceCIDR,
    ...cluster.services,
    ...cluster.slices.flat(),
  ]);
});
