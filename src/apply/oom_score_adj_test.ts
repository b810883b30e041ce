import assert from "node:assert/strict";
import { applyOomScoreAdj } from "./oom_score_adj.ts";

Deno.test("applyOomScoreAdj() writes the value when it differs, and reports before → after", async () => {
  const dir = await Deno.makeTempDir({ prefix: "knp-cfg-oom-" });
  try {
    const path = `${dir}/oom_score_adj`;
    await Deno.writeTextFile(path, "0\n");
    assert.deepEqual(await applyOomScoreAdj(-999, { path }), {
      changed: "oom_score_adj: 0 → -999",
    });
    assert.equal((await Deno.readTextFile(path)).trim(), "-999");
    assert.deepEqual(await applyOomScoreAdj(-999, { path }), {});
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("applyOomScoreAdj() reports a refusal instead of failing", async () => {
  const report = await applyOomScoreAdj(-999, {
    path: "/proc/self/oom_score_adj",
    files: {
      read: () => Promise.resolve("0\n"),
      write: () => Promise.reject(new Deno.errors.PermissionDenied("Permission denied")),
    },
  });
  assert.deepEqual(report, {
    refused: "cannot set oom_score_adj to -999, it stays 0 (Permission denied)",
  });
});

Deno.test("applyOomScoreAdj() sets this process's own adjustment in /proc", async () => {
  const before = (await Deno.readTextFile("/proc/self/oom_score_adj")).trim();
  // Raising it needs no privilege; put it back after (lowering needs CAP_SYS_RESOURCE).
  const raised = Math.min(1000, Number(before) + 1);
  try {
    const report = await applyOomScoreAdj(raised);
    assert.equal(report.refused, undefined);
    assert.equal((await Deno.readTextFile("/proc/self/oom_score_adj")).trim(), String(raised));
  } finally {
    await applyOomScoreAdj(Number(before));
  }
});
