import assert from "node:assert/strict";
import { parseSelector, traceCommand, type TracedConnection, type TraceIO } from "./command.ts";
import type { LeftoverOutcome } from "./leftover.ts";

const fixture = (name: string) =>
  Deno.readTextFile(new URL(`../../tests/fixtures/trace/${name}`, import.meta.url));

/** A kernel that replays captured trace lines and answers lookups from tables. */
function fakeIO(
  options: { lines?: string[]; chains?: string; leftover?: LeftoverOutcome; dies?: boolean } = {},
) {
  const applied: string[] = [];
  const printed: string[] = [];
  const errors: string[] = [];
  let stopped = false;
  const io: TraceIO = {
    nft: (args) => {
      if (args[0] === "list") return Promise.resolve(options.chains ?? "");
      if (args[0] === "get" && args[4] === "service-ips") {
        return Promise.resolve(
          'elements = { 10.96.0.10 . tcp . 80 comment "default/web:http" : goto lb-tcp-3 }',
        );
      }
      return Promise.reject(new Error("no such element"));
    },
    applyNft: (script) => {
      applied.push(script);
      return Promise.resolve();
    },
    removeLeftover: () => Promise.resolve(options.leftover ?? "none"),
    monitor: () => {
      let stop!: () => void;
      const stopping = new Promise<void>((r) => stop = r);
      return {
        lines: (async function* () {
          await new Promise((r) => setTimeout(r, 50)); // armed meanwhile
          for (const line of options.lines ?? []) yield line;
          if (!options.dies) await stopping; // like nft, it runs until stopped
        })(),
        ready: Promise.resolve(),
        stop: () => {
          stopped = true;
          stop();
          return Promise.resolve();
        },
      };
    },
    conntrack: (flow) =>
      Promise.resolve({
        original: {
          src: flow.source,
          dst: flow.destination,
          sport: flow.sourcePort,
          dport: flow.destinationPort,
        },
        reply: { src: "10.244.1.12", dst: "10.244.1.1", sport: 8080, dport: 40000 },
      }),
    owner: () => Promise.resolve({ pid: 1, start: "2", pidns: "pid:[3]" }),
    signalled: () => ({ promise: new Promise<void>(() => {}), dispose: () => {} }),
    print: (text) => printed.push(text),
    printError: (line) => errors.push(line),
  };
  return { io, applied, printed, errors, stopped: () => stopped };
}

Deno.test("trace says it is nft-mode only in iptables mode, and arms nothing", async () => {
  const fake = fakeIO();
  assert.equal(await traceCommand(["--to=10.96.0.10:80", "--proxy-mode=iptables"], fake.io), 2);
  assert.match(fake.errors.join("\n"), /nft mode only \(this proxy is in iptables mode\)/);
  assert.deepEqual(fake.applied, []);
});

Deno.test("trace needs --to or --from", async () => {
  const fake = fakeIO();
  assert.equal(await traceCommand(["--count=3"], fake.io), 2);
  assert.match(fake.errors.join("\n"), /trace needs --to or --from/);
});

Deno.test("trace refuses to start while another trace runs", async () => {
  const fake = fakeIO({ leftover: "live" });
  assert.equal(await traceCommand(["--to=10.96.0.10"], fake.io), 1);
  assert.match(fake.errors.join("\n"), /another trace is running/);
  assert.deepEqual(fake.applied, []);
});

Deno.test("trace reports --count connections, then removes its table", async () => {
  const fake = fakeIO({
    lines: (await fixture("monitor-nft-1.0.6.txt")).split("\n"),
    chains: await fixture("list-chains.txt"),
  });
  const code = await traceCommand(["--from=192.168.77.2", "--count=2", "--output=json"], fake.io);
  assert.equal(code, 0, fake.errors.join("\n"));
  const connections: TracedConnection[] = fake.printed.map((line) => JSON.parse(line));
  assert.equal(connections.length, 2);
  assert.equal(connections[0].servicePort, "default/web:http");
  assert.deepEqual(connections[0].endpoint, { ip: "10.244.1.12", port: 8080, from: "conntrack" });
  assert.equal(connections[1].servicePort, "default/node-port-local:http");
  assert.match(fake.applied[0], /^create table inet kube-nftproxy-trace /);
  assert.equal(
    fake.applied.at(-1),
    "add table inet kube-nftproxy-trace\ndelete table inet kube-nftproxy-trace\n",
  );
  assert.ok(fake.stopped());
});

Deno.test("trace stops at its timeout with what it saw, and removes its table", async () => {
  const fake = fakeIO({ lines: [] });
  assert.equal(await traceCommand(["--to=10.96.0.10:80", "--timeout=400ms"], fake.io), 0);
  assert.deepEqual(fake.printed, []);
  assert.match(fake.errors.join("\n"), /0 connection\(s\) traced/);
  assert.match(fake.applied.at(-1)!, /^add table inet kube-nftproxy-trace\ndelete table/);
});

Deno.test("parseSelector() reads --to with and without port and protocol, and --from", () => {
  assert.deepEqual(parseSelector("10.96.0.10:80/udp", undefined), {
    to: "10.96.0.10",
    port: 80,
    protocol: "udp",
  });
  assert.deepEqual(parseSelector("10.96.0.10", undefined), {
    to: "10.96.0.10",
  });
  assert.deepEqual(parseSelector("[fd00::10]:443", "fd00:77::/64"), {
    to: "fd00::10",
    port: 443,
    protocol: "tcp",
    from: "fd00:77::/64",
  });
  assert.deepEqual(parseSelector("fd00::10", undefined), { to: "fd00::10" });
  assert.throws(() => parseSelector("10.96.0.10:80", "fd00::/64"), /different IP families/);
  assert.throws(() => parseSelector(undefined, "10.0.0.0/33"), /prefix length/);
  assert.throws(() => parseSelector("web:80", undefined), /not an IP address/);
});

Deno.test("trace fails when nft monitor ends, and still removes its table", async () => {
  const fake = fakeIO({ lines: [], dies: true });
  assert.equal(await traceCommand(["--to=10.96.0.10:80", "--timeout=30s"], fake.io), 1);
  assert.match(fake.errors.join("\n"), /nft monitor trace ended early/);
  assert.match(fake.applied.at(-1)!, /^add table inet kube-nftproxy-trace\ndelete table/);
});
