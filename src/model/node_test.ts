import assert from "node:assert/strict";
import { convertNode, TO_BE_DELETED_TAINT } from "./node.ts";
import { node } from "../../tests/fixtures/objects.ts";

Deno.test("convertNode() reads a node being deleted or drained by the cluster autoscaler as going away", () => {
  const plain = node("node-a", { ips: ["192.168.77.1"] });
  assert.equal(convertNode(plain).node.deleting, false);
  const deleted = {
    ...plain,
    metadata: { ...plain.metadata as object, deletionTimestamp: "2026-11-22T10:00:00Z" },
  };
  assert.equal(convertNode(deleted).node.deleting, true);
  const tainted = (key: string) => ({
    ...plain,
    spec: { ...plain.spec as object, taints: [{ key, value: "1763805600", effect: "NoSchedule" }] },
  });
  assert.equal(convertNode(tainted(TO_BE_DELETED_TAINT)).node.deleting, true);
  assert.equal(
    convertNode(tainted("DeletionCandidateOfClusterAutoscaler")).node.deleting,
    false,
    "a mere candidate still serves",
  );
});
