import assert from "node:assert/strict";
import type { IPFamily } from "../model/service_port.ts";
import { runOk } from "../../tests/netns/netns.ts";
import { kernelGate, withIptablesScratch } from "../../tests/e2e/iptables_harness.ts";
import {
  parseTableInfo,
  sameTableInfo,
  TABLE_INFO_SIZE,
  type TableInfo,
  tableInfoRequest,
} from "./iptables_info.ts";

/** A `struct ipt_getinfo` as the kernel fills it in (little-endian), named `name`. */
function answer(name: string, fields: number[]): Uint8Array {
  const buffer = tableInfoRequest(name);
  const view = new DataView(buffer.buffer);
  fields.forEach((value, i) => view.setUint32(32 + 4 * i, value, true));
  return buffer;
}

const NONE = 0xffffffff;

Deno.test("tableInfoRequest() names the table in the first 32 bytes of an 84-byte buffer", () => {
  const request = tableInfoRequest("nat");
  assert.equal(request.length, TABLE_INFO_SIZE);
  assert.deepEqual([...request.subarray(0, 4)], [110, 97, 116, 0]);
  assert.ok(request.subarray(3).every((b) => b === 0));
  assert.throws(() => tableInfoRequest("x".repeat(32)), RangeError);
});

Deno.test("parseTableInfo() reads hooks, chain offsets, entries and size of an empty nat table", () => {
  // What the kernel answers for a fresh iptables-legacy nat table (no FORWARD hook).
  const info = parseTableInfo(
    answer("nat", [27, 0, 152, NONE, 304, 456, 0, 152, NONE, 304, 456, 5, 784]),
  );
  assert.deepEqual(info, {
    validHooks: 27,
    hookEntry: [0, 152, NONE, 304, 456],
    underflow: [0, 152, NONE, 304, 456],
    numEntries: 5,
    size: 784,
  });
  assert.throws(() => parseTableInfo(new Uint8Array(80)), RangeError);
});

Deno.test("sameTableInfo() tells a changed entry count, size or chain offset from the same table", () => {
  const base = parseTableInfo(
    answer("nat", [27, 0, 152, NONE, 304, 456, 0, 152, NONE, 304, 456, 5, 784]),
  );
  const with_ = (change: Partial<TableInfo>): TableInfo => ({ ...base, ...change });
  assert.ok(sameTableInfo(base, with_({})));
  assert.ok(!sameTableInfo(base, with_({ numEntries: 6 })));
  assert.ok(!sameTableInfo(base, with_({ size: 936 })));
  assert.ok(!sameTableInfo(base, with_({ underflow: [152, 152, NONE, 304, 456] })));
  assert.ok(!sameTableInfo(base, with_({ hookEntry: [0, 304, NONE, 456, 608] })));
});

/** Whether `iptables-legacy` is installed; without it the kernel test is skipped. */
async function hasLegacy(): Promise<boolean> {
  try {
    const out = await new Deno.Command("iptables-legacy", { args: ["--version"] }).output();
    return out.success;
  } catch {
    return false;
  }
}

const legacy = await hasLegacy();
const MODULE = new URL("./iptables_info.ts", import.meta.url).href;
const FAMILIES: readonly IPFamily[] = ["IPv4", "IPv6"];

/** `readTableInfo` of nat and mangle, per family, run by a process inside `ns` (needs FFI). */
async function readInside(ns: string): Promise<Record<string, TableInfo>> {
  const code = `import { readTableInfo } from ${JSON.stringify(MODULE)};
const out = {};
for (const f of ${
    JSON.stringify(FAMILIES)
  }) for (const t of ["nat", "mangle"]) out[f + " " + t] = readTableInfo(f, t);
console.log(JSON.stringify(out));`;
  return JSON.parse(await runOk([Deno.execPath(), "eval", "--no-config", code], { ns }));
}

/** Rules, user chains and built-in chains of one table of `iptables-legacy-save` output. */
function entriesSaved(saved: string, table: string): number {
  const lines = saved.split("\n");
  const start = lines.indexOf(`*${table}`);
  const body = lines.slice(start + 1, lines.indexOf("COMMIT", start));
  const builtIn = body.filter((l) => /^:\S+ [A-Z]+ /.test(l) && !l.includes(" - ")).length;
  const user = body.filter((l) => l.startsWith(":") && l.includes(" - ")).length;
  const rules = body.filter((l) => l.startsWith("-A ")).length;
  // Each rule one entry, each user chain a head and a return, each built-in chain its policy,
  // and one error entry closing the table.
  return rules + 2 * user + builtIn + 1;
}

Deno.test({
  name:
    "readTableInfo() counts every nat and mangle entry of iptables-legacy in the process's namespace, and changes when a rule is added or a table flushed",
  ignore: kernelGate.ignore || !legacy,
  async fn() {
    await withIptablesScratch(async (k) => {
      const iptables = (family: IPFamily, ...args: string[]) =>
        runOk([`${family === "IPv6" ? "ip6" : "ip"}tables-legacy`, ...args], { ns: k.ns });
      const agrees = async (label: string) => {
        const infos = await readInside(k.ns);
        for (const family of FAMILIES) {
          const saved = await k.saveText(family, "legacy");
          for (const table of ["nat", "mangle"]) {
            assert.equal(
              infos[`${family} ${table}`].numEntries,
              entriesSaved(saved, table),
              `${label}: ${family} ${table} entries`,
            );
          }
        }
        return infos;
      };

      const empty = await agrees("fresh tables");
      assert.equal(empty["IPv4 nat"].numEntries, 5, "four policies and the closing entry");
      assert.equal(empty["IPv4 mangle"].numEntries, 6);

      await iptables("IPv4", "-t", "nat", "-N", "KUBE-SERVICES");
      await iptables("IPv4", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES");
      await iptables("IPv4", "-t", "mangle", "-N", "KUBE-PROXY-CANARY");
      const ours = await agrees("a chain, a jump and the canary added");
      assert.ok(!sameTableInfo(ours["IPv4 nat"], empty["IPv4 nat"]), "nat changed");
      assert.ok(!sameTableInfo(ours["IPv4 mangle"], empty["IPv4 mangle"]), "mangle changed");
      assert.ok(sameTableInfo(ours["IPv6 nat"], empty["IPv6 nat"]), "IPv6 nat untouched");
      assert.deepEqual(await readInside(k.ns), ours, "nothing changed: the same answer");

      await iptables("IPv4", "-t", "nat", "-F");
      const flushed = await agrees("nat flushed");
      assert.ok(!sameTableInfo(flushed["IPv4 nat"], ours["IPv4 nat"]), "a flush is seen");
      assert.ok(sameTableInfo(flushed["IPv4 mangle"], ours["IPv4 mangle"]));

      await iptables("IPv4", "-t", "mangle", "-X", "KUBE-PROXY-CANARY");
      const deleted = await agrees("canary deleted");
      assert.ok(sameTableInfo(deleted["IPv4 mangle"], empty["IPv4 mangle"]));

      await iptables("IPv6", "-t", "nat", "-A", "OUTPUT", "-d", "fd00::1", "-j", "RETURN");
      const v6 = await agrees("an IPv6 rule added");
      assert.ok(!sameTableInfo(v6["IPv6 nat"], empty["IPv6 nat"]), "IPv6 is read as IPv6");
    });
  },
});
