/**
 * Specs of reading the descriptor limit and sizing the servers' connection budget from it.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  connectionBudget,
  countOpenDescriptors,
  parseDescriptorLimit,
  readDescriptorLimit,
} from "./descriptor_limit.ts";

const LIMITS = `Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max open files            1024                 524288               files
Max locked memory         8388608              8388608              bytes
`;

Deno.test("parseDescriptorLimit() reads Max open files out of /proc/<pid>/limits", () => {
  assert.deepEqual(parseDescriptorLimit(LIMITS), { soft: 1024, hard: 524288 });
  assert.deepEqual(
    parseDescriptorLimit(
      "Max open files            unlimited            unlimited            files",
    ),
    { soft: Infinity, hard: Infinity },
  );
  assert.equal(parseDescriptorLimit("Max processes 10 10"), undefined);
});

Deno.test("readDescriptorLimit() and countOpenDescriptors() read this process on Linux", () => {
  const limit = readDescriptorLimit();
  assert.ok(limit !== undefined && limit.soft >= 1 && limit.hard >= limit.soft);
  const open = countOpenDescriptors();
  assert.ok(open !== undefined && open >= 3 && open < limit.soft);
});

Deno.test("connectionBudget() is half the limit less 128, between 16 and 4,096", () => {
  assert.equal(connectionBudget(1024), 384);
  assert.equal(connectionBudget(4096), 1920);
  assert.equal(connectionBudget(524288), 4096);
  assert.equal(connectionBudget(Infinity), 4096);
  assert.equal(connectionBudget(256), 16);
  assert.equal(connectionBudget(undefined), 384, "unknown: taken as 1,024");
});
