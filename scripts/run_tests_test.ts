import assert from "node:assert/strict";
import { parseSummary, verdict } from "./run_tests.ts";

Deno.test("parseSummary() reads deno test's closing line, colours and steps included", () => {
  const out = "running 2 tests\n\n\x1b[0m\x1b[32mok\x1b[0m | 457 passed (12 steps) | 0 failed | " +
    "72 ignored (1 step) \x1b[0m\x1b[38;5;245m(23s)\x1b[0m\n\n";
  assert.deepEqual(parseSummary(out), { passed: 457, failed: 0, ignored: 72 });
  assert.deepEqual(parseSummary("FAILED | 3 passed | 2 failed (1s)\n"), {
    passed: 3,
    failed: 2,
    ignored: 0,
  });
  assert.equal(parseSummary("error: Module not found\n"), undefined);
});

Deno.test("verdict() fails a run that skipped data-plane tests and says why", () => {
  const summary = { passed: 457, failed: 0, ignored: 72 };
  const reasons = ["network namespaces need root", "network namespaces need root"];
  const v = verdict({ code: 0, summary, skipReasons: reasons }, { unitOnly: false });
  assert.equal(v.code, 1);
  assert.match(v.line, /^72 data-plane tests skipped: network namespaces need root\. Not a full/);
});

Deno.test("verdict() lets test:unit pass with the data-plane tests skipped on request", () => {
  const summary = { passed: 457, failed: 0, ignored: 72 };
  const skipReasons = ["unit tests only (deno task test:unit)"];
  const v = verdict({ code: 0, summary, skipReasons }, { unitOnly: true });
  assert.deepEqual(v, {
    line: "unit tests only (deno task test:unit): 72 data-plane tests skipped on request",
    code: 0,
  });
});

Deno.test("verdict() keeps deno test's failure, says so, and reports a full run plainly", () => {
  const full = { passed: 529, failed: 0, ignored: 0 };
  assert.deepEqual(verdict({ code: 0, summary: full, skipReasons: [] }, { unitOnly: false }), {
    line: "every test ran, the data-plane tests included",
    code: 0,
  });
  const failed = { passed: 500, failed: 2, ignored: 72 };
  const v = verdict({ code: 1, summary: failed, skipReasons: ["nft is not installed"] }, {
    unitOnly: false,
  });
  assert.equal(v.code, 1);
  assert.match(v.line, /^2 failed; 72 data-plane tests skipped: nft is not installed/);
  const none = { passed: 504, failed: 29, ignored: 0 };
  assert.deepEqual(verdict({ code: 1, summary: none, skipReasons: [] }, { unitOnly: false }), {
    line: "29 failed (no test was skipped)",
    code: 1,
  });
  assert.equal(verdict({ code: 1, skipReasons: [] }, { unitOnly: false }).code, 1);
});
