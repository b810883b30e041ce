import assert from "node:assert/strict";
import { parsePhaseLine, parseSyncLine } from "./daemon_log.ts";

Deno.test("parseSyncLine() reads full and partial sync lines and ignores others", () => {
  assert.deepEqual(
    parseSyncLine(
      "I 2026-11-25T10:00:00.000Z synced partially: 1 service ports changed, 312 bytes sent, 21 ms",
    ),
    { full: false, servicePortsChanged: 1, bytes: 312, durationMs: 21 },
  );
  assert.equal(
    parseSyncLine("I … synced fully: 10000 service ports changed, 9200000 bytes sent, 1850 ms")
      ?.full,
    true,
  );
  assert.equal(parseSyncLine("I … kube-nftproxy 0.1.0 starting: mode nft"), undefined);
});

Deno.test("parsePhaseLine() takes every key=number pair after the mark", () => {
  assert.deepEqual(
    parsePhaseLine(
      "I 2026-11-25T10:00:00.000Z first sync timing: startup=123 list=456 track=78 render=90 " +
        "apply=1200 total=2100",
    ),
    { startup: 123, list: 456, track: 78, render: 90, apply: 1200, total: 2100 },
  );
  assert.deepEqual(
    parsePhaseLine("I x first sync timing: list=4.5ms convert=12, source=api total=20"),
    { list: 4.5, convert: 12, total: 20 },
  );
  assert.equal(parsePhaseLine("I x synced fully: 1 service ports changed"), undefined);
});
