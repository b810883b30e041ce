import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../config/config.ts";
import {
  applyConntrackSettings,
  CONNTRACK_HASHSIZE,
  conntrackSettings,
  NETFILTER_SYSCTLS,
  type SysctlFiles,
} from "./conntrack_sysctls.ts";

const at = (name: string) => `${NETFILTER_SYSCTLS}/${name}`;

/** Files in memory; `readOnly` paths refuse writes like the kernel outside the host namespace. */
function fakeFiles(values: Record<string, number>, readOnly: string[] = []) {
  const writes: string[] = [];
  const files: SysctlFiles = {
    read: (path) =>
      path in values
        ? Promise.resolve(`${values[path]}\n`)
        : Promise.reject(new Error("No such file or directory")),
    write: (path, value) => {
      if (readOnly.includes(path)) return Promise.reject(new Error("Permission denied"));
      writes.push(`${path}=${value}`);
      values[path] = Number(value);
      return Promise.resolve();
    },
  };
  return { files, writes, values };
}

Deno.test("conntrackSettings() asks kube-proxy's defaults: a table of 32768 per CPU (at least 131072), 24h and 1h TCP timeouts", () => {
  assert.deepEqual(conntrackSettings(DEFAULT_CONFIG, 2), [
    { path: at("nf_conntrack_max"), value: 131072 },
    { path: at("nf_conntrack_tcp_timeout_established"), value: 86400 },
    { path: at("nf_conntrack_tcp_timeout_close_wait"), value: 3600 },
  ]);
  assert.equal(conntrackSettings(DEFAULT_CONFIG, 8)[0].value, 262144);
});

Deno.test("conntrackSettings() leaves alone what is 0, and sets be_liberal and UDP timeouts only when asked", () => {
  assert.deepEqual(
    conntrackSettings({
      ...DEFAULT_CONFIG,
      conntrackMaxPerCore: 0,
      conntrackTCPEstablishedTimeoutMs: 0,
      conntrackTCPCloseWaitTimeoutMs: 0,
      conntrackTCPBeLiberal: true,
      conntrackUDPTimeoutMs: 30_000,
      conntrackUDPStreamTimeoutMs: 120_000,
    }, 4),
    [
      { path: at("nf_conntrack_udp_timeout"), value: 30 },
      { path: at("nf_conntrack_udp_timeout_stream"), value: 120 },
      { path: at("nf_conntrack_tcp_be_liberal"), value: 1 },
    ],
  );
});

Deno.test("applyConntrackSettings() writes only what differs and raises the hash size to a quarter of the table", async () => {
  const fake = fakeFiles({
    [at("nf_conntrack_max")]: 65536,
    [CONNTRACK_HASHSIZE]: 16384,
    [at("nf_conntrack_tcp_timeout_established")]: 432000,
    [at("nf_conntrack_tcp_timeout_close_wait")]: 3600,
  });
  const report = await applyConntrackSettings(conntrackSettings(DEFAULT_CONFIG, 2), fake.files);
  assert.deepEqual(fake.writes, [
    `${at("nf_conntrack_max")}=131072`,
    `${CONNTRACK_HASHSIZE}=32768`,
    `${at("nf_conntrack_tcp_timeout_established")}=86400`,
  ]);
  assert.deepEqual(report.changed, [
    "nf_conntrack_max: 65536 → 131072",
    "hashsize: 16384 → 32768",
    "nf_conntrack_tcp_timeout_established: 432000 → 86400",
  ]);
  assert.deepEqual(report.refused, []);
});

Deno.test("applyConntrackSettings() reports a refused table size and still sets the timeouts", async () => {
  const fake = fakeFiles({
    [at("nf_conntrack_max")]: 262144,
    [CONNTRACK_HASHSIZE]: 262144,
    [at("nf_conntrack_tcp_timeout_established")]: 432000,
    [at("nf_conntrack_tcp_timeout_close_wait")]: 60,
  }, [at("nf_conntrack_max")]);
  const report = await applyConntrackSettings(conntrackSettings(DEFAULT_CONFIG, 2), fake.files);
  assert.deepEqual(report.refused, [
    "cannot set nf_conntrack_max to 131072, it stays 262144 (Permission denied)",
  ]);
  assert.equal(fake.values[at("nf_conntrack_tcp_timeout_established")], 86400);
  assert.equal(fake.values[at("nf_conntrack_tcp_timeout_close_wait")], 3600);
});
