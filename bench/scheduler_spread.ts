/**
 * How evenly each scheduler's pick spreads new connections over N endpoints, measured in a real
 * kernel (issue 21): the exact expressions the balancers use (`numgen random`, `numgen inc`,
 * `jhash ip saddr … seed 0x0`) index a verdict map whose chains count packets, and a sender in
 * the namespace sends one UDP datagram from each of `--clients` distinct source addresses (for
 * `round-robin`, all from one address: its spread does not depend on the client).
 *
 * Prints one line per scheduler and endpoint count: the share of the busiest and the idlest
 * endpoint, relative to an even share (1.00 = perfect), and the chi-square statistic. Run as
 * root: `deno run -A bench/scheduler_spread.ts --clients 4000`.
 *
 * @module
 */
import { Command } from "@commander-js/extra-typings";
import { integerIn } from "./cli.ts";
import { createNamespace, deleteNamespace, runOk, shortId } from "../tests/netns/netns.ts";
import { endpointPick } from "../src/render/nft/scheduler.ts";
import type { EndpointScheduler } from "../src/config/config.ts";

const SENDER = `
import dgram from "node:dgram";
const [count, distinct] = Deno.args.map(Number);
for (let i = 0; i < count; i++) {
  const source = distinct ? \`10.77.\${Math.floor(i / 250)}.\${(i % 250) + 1}\` : "10.77.0.1";
  const socket = dgram.createSocket("udp4");
  await new Promise((resolve) => socket.bind(0, source, resolve));
  await new Promise((resolve) => socket.send("x", 9, "10.78.0.1", resolve));
  socket.close();
}
`;

/** The packets each of `n` counting chains saw, after `clients` datagrams through `pick`. */
async function spread(
  ns: string,
  scheduler: EndpointScheduler,
  n: number,
  clients: number,
): Promise<number[]> {
  const chains = Array.from({ length: n }, (_, i) => `c${i}`);
  const pick = endpointPick(scheduler, "ip", n);
  const script = [
    "table ip spread {",
    ...chains.map((c) => `  chain ${c} { counter drop; }`),
    "  chain out { type filter hook output priority 0; policy accept;",
    `    udp dport 9 ${pick} vmap { ${chains.map((c, i) => `${i} : goto ${c}`).join(", ")} }`,
    "  }",
    "}",
  ].join("\n");
  await runOk(["nft", "-f", "-"], { ns, stdin: `${script}\n` });
  try {
    const distinct = scheduler === "round-robin" ? "0" : "1";
    await runOk([Deno.execPath(), "eval", SENDER, String(clients), distinct], {
      ns,
      timeoutMs: 300_000,
    });
    const listed = await runOk(["nft", "list", "table", "ip", "spread"], { ns });
    return chains.map((c) => {
      const m = new RegExp(`chain ${c} \\{\\s*counter packets (\\d+)`).exec(listed);
      return Number(m?.[1] ?? 0);
    });
  } finally {
    await runOk(["nft", "delete", "table", "ip", "spread"], { ns });
  }
}

const program = new Command("scheduler_spread")
  .option(
    "--clients <n>",
    "datagrams (distinct clients for random and source-hash)",
    integerIn(10, 60_000),
    4000,
  )
  .option("--endpoints <list>", "endpoint counts, comma-separated", "2,3,5,10");
program.parse();
const options = program.opts();
const ns = `knp-${shortId()}-spread`;
await createNamespace(ns);
try {
  await runOk(["ip", "route", "add", "local", "10.77.0.0/16", "dev", "lo"], { ns });
  await runOk(["ip", "route", "add", "local", "10.78.0.0/16", "dev", "lo"], { ns });
  for (const n of options.endpoints.split(",").map(Number)) {
    for (const scheduler of ["random", "round-robin", "source-hash"] as const) {
      const counts = await spread(ns, scheduler, n, options.clients);
      const total = counts.reduce((a, b) => a + b, 0);
      const even = total / n;
      const chi = counts.reduce((sum, c) => sum + (c - even) ** 2 / even, 0);
      console.log(
        `${scheduler.padEnd(11)} N=${String(n).padEnd(2)} packets=${total} ` +
          `max/even=${(Math.max(...counts) / even).toFixed(2)} ` +
          `min/even=${(Math.min(...counts) / even).toFixed(2)} chi2=${chi.toFixed(1)} ` +
          `(df ${n - 1}) counts=${counts.join(",")}`,
      );
    }
  }
} finally {
  await deleteNamespace(ns);
}
