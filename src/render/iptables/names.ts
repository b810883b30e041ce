/**
 * Names in the iptables layout: every fixed KUBE-* chain, the per-service chain names hashed
 * exactly like upstream kube-proxy's, and the comment quoting, defined once.
 *
 * Per-service chains are `KUBE-<KIND>-` + the first 16 characters of base32(sha256(text)), where
 * text is the service-port name (`namespace/name:port`) + the lower-case protocol (+ the
 * endpoint `ip:port` for `KUBE-SEP-`), as upstream's `portProtoHash` and
 * `servicePortEndpointChainName`; the same Service gets the same chain names under both
 * proxies, and names stay within iptables' 28-character limit whatever the object names are.
 *
 * @module
 */
import { formatServicePortName, type ServicePortName } from "../../model/service_port.ts";

/** The fixed chains of the `nat` table. */
export const NAT = {
  /** Dispatch: one rule per cluster, external and load-balancer IP, then node ports. */
  services: "KUBE-SERVICES",
  /** Node ports (entered from the tail of KUBE-SERVICES for the node-port addresses). */
  nodePorts: "KUBE-NODEPORTS",
  /** Masquerades packets carrying the masquerade mark (hooked into POSTROUTING). */
  postrouting: "KUBE-POSTROUTING",
  /** Sets the masquerade bit of the packet mark. */
  markMasq: "KUBE-MARK-MASQ",
} as const;

/** The fixed chains of the `filter` table. */
export const FILTER = {
  /** Rejects/drops new connections to cluster IPs without (local) endpoints. */
  services: "KUBE-SERVICES",
  /** Rejects/drops new connections to external IPs, LB IPs and node ports without endpoints. */
  externalServices: "KUBE-EXTERNAL-SERVICES",
  /** Accepts masqueraded and established forwarded traffic; drops conntrack-invalid packets. */
  forward: "KUBE-FORWARD",
  /** Accepts health-check node ports. */
  nodePorts: "KUBE-NODEPORTS",
  /** Drops traffic to LB IPs that KUBE-FW-* did not let through (loadBalancerSourceRanges). */
  proxyFirewall: "KUBE-PROXY-FIREWALL",
  /**
   * Ours (no upstream equivalent): rejects a cluster IP on a port no service uses and drops
   * unallocated IPs of the service CIDRs, as the nft backend's `cluster-ips-check`.
   */
  clusterIPs: "KUBE-CLUSTER-IPS",
} as const;

/** The two tables the proxy writes rules to. */
export type Table = "filter" | "nat";

/**
 * An empty chain in the mangle, nat and filter tables of each family, as upstream kube-proxy's
 * `KUBE-PROXY-CANARY`: it holds no rule and nothing jumps to it, so it is gone only when
 * someone else deleted our chains (`iptables -X`, a firewall reload). The rules watcher
 * (`src/apply/iptables_watch.ts`) looks for it to notice that our rules need restoring.
 */
export const CANARY = "KUBE-PROXY-CANARY";

/** The tables holding a {@link CANARY}: mangle first, the small table upstream watches. */
export const CANARY_TABLES = ["mangle", "nat", "filter"] as const;

/** Every fixed chain, per table, in the order a script declares them. */
export const FIXED_CHAINS: Readonly<Record<Table, readonly string[]>> = {
  filter: [
    FILTER.services,
    FILTER.externalServices,
    FILTER.forward,
    FILTER.nodePorts,
    FILTER.proxyFirewall,
    FILTER.clusterIPs,
    CANARY,
  ],
  nat: [NAT.services, NAT.nodePorts, NAT.postrouting, NAT.markMasq, CANARY],
};

/** Prefixes of the per-service chains (all in `nat`). */
export const SERVICE_CHAIN_PREFIXES = [
  "KUBE-SVC-",
  "KUBE-SVL-",
  "KUBE-EXT-",
  "KUBE-FW-",
  "KUBE-SEP-",
] as const;

/** True for a per-service chain name (`KUBE-SVC-…`, `KUBE-SEP-…`, …), like upstream's test. */
export function isServiceChainName(name: string): boolean {
  return SERVICE_CHAIN_PREFIXES.some((p) => name.startsWith(p));
}

/** The per-service chains of one service port. */
export interface ServiceChainNames {
  /** `KUBE-SVC-…`: balances over all usable endpoints (Cluster traffic policy). */
  readonly cluster: string;
  /** `KUBE-SVL-…`: balances over this node's endpoints (Local traffic policy). */
  readonly local: string;
  /** `KUBE-EXT-…`: external IPs, LB IPs and node ports (masquerade, eTP Local short-circuit). */
  readonly external: string;
  /** `KUBE-FW-…`: loadBalancerSourceRanges. */
  readonly firewall: string;
}

/** The per-service chain names of a service port. */
export function serviceChainNames(spn: ServicePortName): ServiceChainNames {
  const hash = hash16(formatServicePortName(spn) + spn.protocol.toLowerCase());
  return {
    cluster: `KUBE-SVC-${hash}`,
    local: `KUBE-SVL-${hash}`,
    external: `KUBE-EXT-${hash}`,
    firewall: `KUBE-FW-${hash}`,
  };
}

/** `KUBE-SEP-…`: the chain of one endpoint (`ip:port`, IPv6 in brackets) of a service port. */
export function endpointChainName(spn: ServicePortName, endpoint: string): string {
  return `KUBE-SEP-${hash16(formatServicePortName(spn) + spn.protocol.toLowerCase() + endpoint)}`;
}

/**
 * A `-m comment --comment "…"` argument: the text quoted for iptables-restore, with every
 * character that could end the quote or the line replaced, and capped at iptables' 256 bytes.
 */
export function comment(text: string): string {
  return `-m comment --comment "${text.replace(/[^A-Za-z0-9_./:@ ;>,[\]-]/g, "_").slice(0, 255)}"`;
}

const BASE32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** The first 16 characters of base32(sha256(text)), as upstream's chain-name hashes. */
function hash16(text: string): string {
  const digest = sha256(text);
  let out = "";
  // 16 base32 characters are 80 bits: two groups of 5 bytes (40 bits, exact in a double).
  for (let group = 0; group < 2; group++) {
    let bits = 0;
    for (let i = 0; i < 5; i++) {
      const byte = group * 5 + i;
      bits = bits * 256 + ((digest[byte >> 2] >>> (24 - 8 * (byte & 3))) & 0xff);
    }
    for (let c = 7; c >= 0; c--) out += BASE32[Math.floor(bits / 2 ** (c * 5)) % 32];
  }
  return out;
}

const K = new Int32Array([
  0x428a2f98,
  0x71374491,
  0xb5c0fbcf,
  0xe9b5dba5,
  0x3956c25b,
  0x59f111f1,
  0x923f82a4,
  0xab1c5ed5,
  0xd807aa98,
  0x12835b01,
  0x243185be,
  0x550c7dc3,
  0x72be5d74,
  0x80deb1fe,
  0x9bdc06a7,
  0xc19bf174,
  0xe49b69c1,
  0xefbe4786,
  0x0fc19dc6,
  0x240ca1cc,
  0x2de92c6f,
  0x4a7484aa,
  0x5cb0a9dc,
  0x76f988da,
  0x983e5152,
  0xa831c66d,
  0xb00327c8,
  0xbf597fc7,
  0xc6e00bf3,
  0xd5a79147,
  0x06ca6351,
  0x14292967,
  0x27b70a85,
  0x2e1b2138,
  0x4d2c6dfc,
  0x53380d13,
  0x650a7354,
  0x766a0abb,
  0x81c2c92e,
  0x92722c85,
  0xa2bfe8a1,
  0xa81a664b,
  0xc24b8b70,
  0xc76c51a3,
  0xd192e819,
  0xd6990624,
  0xf40e3585,
  0x106aa070,
  0x19a4c116,
  0x1e376c08,
  0x2748774c,
  0x34b0bcb5,
  0x391c0cb3,
  0x4ed8aa4a,
  0x5b9cca4f,
  0x682e6ff3,
  0x748f82ee,
  0x78a5636f,
  0x84c87814,
  0x8cc70208,
  0x90befffa,
  0xa4506ceb,
  0xbef9a3f7,
  0xc67178f2,
]);
const encoder = new TextEncoder();
let input = new Uint8Array(256);
const words = new Int32Array(64);
const state = new Int32Array(8);

/**
 * SHA-256 of the UTF-8 text, as eight big-endian 32-bit words (in a buffer reused by the next
 * call). Written out because a chain name is hashed per endpoint and sync — 110,000 times at
 * 10k×10 — and node:crypto's `createHash` cost ~2.5 µs and a few hundred bytes of garbage each.
 */
function sha256(text: string): Int32Array {
  if (input.length < text.length * 3 + 72) input = new Uint8Array(text.length * 3 + 72);
  const { written } = encoder.encodeInto(text, input);
  const blocks = ((written + 8) >> 6) + 1;
  input.fill(0, written, blocks * 64);
  input[written] = 0x80;
  const bits = written * 8;
  input[blocks * 64 - 4] = bits >>> 24;
  input[blocks * 64 - 3] = bits >>> 16;
  input[blocks * 64 - 2] = bits >>> 8;
  input[blocks * 64 - 1] = bits;
  state.set([
    0x6a09e667,
    0xbb67ae85,
    0x3c6ef372,
    0xa54ff53a,
    0x510e527f,
    0x9b05688c,
    0x1f83d9ab,
    0x5be0cd19,
  ]);
  for (let block = 0; block < blocks; block++) {
    const o = block * 64;
    for (let i = 0; i < 16; i++) {
      const j = o + i * 4;
      words[i] = (input[j] << 24) | (input[j + 1] << 16) | (input[j + 2] << 8) | input[j + 3];
    }
    for (let i = 16; i < 64; i++) {
      const w15 = words[i - 15];
      const w2 = words[i - 2];
      const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
      const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
      words[i] = (words[i - 16] + s0 + words[i - 7] + s1) | 0;
    }
    let a = state[0], b = state[1], c = state[2], d = state[3];
    let e = state[4], f = state[5], g = state[6], h = state[7];
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const t1 = (h + s1 + ((e & f) ^ (~e & g)) + K[i] + words[i]) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const t2 = (s0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    state[0] += a;
    state[1] += b;
    state[2] += c;
    state[3] += d;
    state[4] += e;
    state[5] += f;
    state[6] += g;
    state[7] += h;
  }
  return state;
}
