/**
 * Specs of the logger: klog's text lines and klog's JSON lines, parsed back field by field as a
 * log pipeline would, and `-v` verbosity.
 *
 * @module
 */
import assert from "node:assert/strict";
import { createLogger, goQuote, type LoggerOptions } from "./log.ts";

/** klog's text header and body: severity, MMDD, time to µs, thread id, file:line, then `"msg"`. */
const KLOG_TEXT =
  /^([IWE])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) +(\d+) ([^ :]+):(\d+)\] ("(?:[^"\\]|\\.)*")(.*)$/;

function recorded(options: LoggerOptions = {}) {
  const lines: string[] = [];
  const log = createLogger({ ...options, write: (line) => lines.push(line) });
  return { log, lines };
}

Deno.test('text lines have klog\'s header, the quoted message and key="value" pairs', () => {
  const at = new Date(2026, 10, 24, 12, 4, 0, 123);
  const { log, lines } = recorded({ now: () => at, pid: 1234, caller: () => "proxy.ts:12" });
  log.info("serving metrics", { address: "127.0.0.1:10249", port: 10249 });
  log.warn('no Node named "node-a" was listed');
  log.error("sync failed", { err: new Error("nft: exit 1\nline 2") });
  assert.deepEqual(lines, [
    'I1124 12:04:00.123000    1234 proxy.ts:12] "serving metrics" address="127.0.0.1:10249" port=10249',
    'W1124 12:04:00.123000    1234 proxy.ts:12] "no Node named \\"node-a\\" was listed"',
    'E1124 12:04:00.123000    1234 proxy.ts:12] "sync failed" err="nft: exit 1\\nline 2"',
  ]);
});

Deno.test("text lines parse back: the message and values unquote to what was logged", () => {
  const { log, lines } = recorded();
  const message = 'cannot use Service default/web: spec.ports[1].port is "x"\tand \u0001';
  log.warn(message, { service: "default/web" });
  const m = KLOG_TEXT.exec(lines[0]);
  assert.ok(m, lines[0]);
  assert.equal(m[1], "W");
  assert.equal(Number(m[8]), Deno.pid, "the thread id is the process id");
  assert.equal(m[9], "log_test.ts", "the caller is the file that logged");
  assert.equal(JSON.parse(m[11].replace(/\\x([0-9a-f]{2})/g, "\\u00$1")), message);
  assert.equal(m[12], ' service="default/web"');
});

Deno.test("JSON lines carry klog's keys: ts, caller, msg, v, the pairs, and err for errors", () => {
  const at = new Date(Date.UTC(2026, 10, 24, 12, 4, 0, 123));
  const { log, lines } = recorded({ format: "json", now: () => at, caller: () => "proxy.ts:12" });
  log.info("serving metrics", { address: "127.0.0.1:10249" });
  log.error("sync failed", { err: new Error("nft: exit 1") });
  const [info, error] = lines.map((line) => JSON.parse(line));
  assert.deepEqual(info, {
    ts: at.getTime() / 1000,
    caller: "proxy.ts:12",
    msg: "serving metrics",
    v: 0,
    address: "127.0.0.1:10249",
  });
  assert.deepEqual(error, {
    ts: at.getTime() / 1000,
    caller: "proxy.ts:12",
    msg: "sync failed",
    err: "nft: exit 1",
  });
  assert.deepEqual(Object.keys(info).slice(0, 4), ["ts", "caller", "msg", "v"], "klog's order");
});

Deno.test("JSON lines are one line each, whatever the message holds", () => {
  const { log, lines } = recorded({ format: "json" });
  log.warn('two\nlines and a "quote"');
  assert.equal(lines.length, 1);
  assert.ok(!lines[0].includes("\n"));
  assert.equal(JSON.parse(lines[0]).msg, 'two\nlines and a "quote"');
  assert.match(JSON.parse(lines[0]).caller, /^log_test\.ts:\d+$/);
});

Deno.test("debug lines appear only at -v of their level or more, with v set in JSON", () => {
  const quiet = recorded({ format: "json", verbosity: 1 });
  quiet.log.debug(2, "hidden");
  quiet.log.debug(1, "shown");
  assert.deepEqual(quiet.lines.map((l) => JSON.parse(l)).map((e) => [e.msg, e.v]), [["shown", 1]]);
  const text = recorded({ verbosity: 4 });
  text.log.debug(4, "detail");
  assert.match(text.lines[0], /^I\d{4} .*\] "detail"$/);
});

Deno.test("goQuote() escapes as Go's %q does", () => {
  assert.equal(goQuote('a "b" \\ c'), '"a \\"b\\" \\\\ c"');
  assert.equal(goQuote("tab\tnl\n\u0000\u007f"), '"tab\\tnl\\n\\x00\\x7f"');
  assert.equal(goQuote("ünïcode"), '"ünïcode"');
});
