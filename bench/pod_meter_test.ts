import assert from "node:assert/strict";
import {
  parseMachineCpu,
  parseMemoryStat,
  parseProcStatCpu,
  parseProcStatus,
} from "./pod_meter.ts";

Deno.test("parseProcStatus() reads VmHWM and VmRSS in MiB", () => {
  const text = "Name:\tdeno\nVmPeak:\t 9999999 kB\nVmHWM:\t  307200 kB\nVmRSS:\t  204800 kB\n";
  assert.deepEqual(parseProcStatus(text), { peakRssMiB: 300, rssMiB: 200 });
  assert.throws(() => parseProcStatus("Name:\tkthreadd\n"), /no VmHWM/);
});

Deno.test("parseProcStatCpu() adds utime and stime, whatever the command name holds", () => {
  const stat = "42 (deno) S 1 42 42 0 -1 4194560 1 0 0 0 150 50 7 9 20 0 9 0 1 1 1";
  assert.equal(parseProcStatCpu(stat, 100), 2);
  const odd = "42 (a (b) c) R 1 42 42 0 -1 4194560 1 0 0 0 10 20 0 0 20 0 9 0 1 1 1";
  assert.equal(parseProcStatCpu(odd, 100), 0.3);
});

Deno.test("parseMemoryStat() takes the hierarchical totals", () => {
  assert.deepEqual(parseMemoryStat("cache 1\nrss 2\ntotal_cache 4096\ntotal_rss 8192\n"), {
    rss: 8192,
    cache: 4096,
  });
});

Deno.test("parseMachineCpu() counts idle and iowait as not busy, the rest of the first line as busy", () => {
  const stat = "cpu  100 5 50 800 20 3 2 1 0 0\ncpu0 50 2 25 400 10 1 1 0 0 0\n";
  assert.deepEqual(parseMachineCpu(stat), { busy: 161, total: 981 });
});
