import assert from "node:assert/strict";
import { kernelGate, withScratch } from "../../tests/nft_scratch.ts";
import {
  getSetElementsRequest,
  type KernelElement,
  NetlinkError,
  readElements,
  readMessages,
} from "./nft_netlink.ts";
import { parseElementCounts } from "./service_counters.ts";
import { runNft } from "./nft.ts";

const GOLDEN = new URL("../../nft/golden/clusterip.nft", import.meta.url);

/** One netlink attribute: length, type, value padded to 4 bytes. */
function attr(type: number, value: Uint8Array): Uint8Array {
  const out = new Uint8Array((4 + value.length + 3) & ~3);
  new DataView(out.buffer).setUint16(0, 4 + value.length, true);
  new DataView(out.buffer).setUint16(2, type, true);
  out.set(value, 4);
  return out;
}
const concat = (...parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  parts.reduce((offset, p) => (out.set(p, offset), offset + p.length), 0);
  return out;
};
const text = (s: string) => new TextEncoder().encode(`${s}\0`);
const u64 = (n: number) => {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(n), false);
  return out;
};
function message(type: number, seq: number, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(16 + body.length);
  const view = new DataView(out.buffer);
  view.setUint32(0, out.length, true);
  view.setUint16(4, type, true);
  view.setUint32(8, seq, true);
  out.set(body, 16);
  return out;
}

Deno.test("getSetElementsRequest() asks for a dump of one table's set", () => {
  const request = getSetElementsRequest(2, "t", "s", 7);
  const view = new DataView(request.buffer);
  assert.equal(view.getUint32(0, true), request.length);
  assert.equal(view.getUint16(4, true), (10 << 8) | 13, "nftables subsystem, GETSETELEM");
  assert.equal(view.getUint16(6, true), 0x301, "a request for a dump");
  assert.equal(request[16], 2, "family ip");
  assert.deepEqual([...request.subarray(20)], [...concat(attr(1, text("t")), attr(2, text("s")))]);
});

Deno.test("readMessages() reads each element's key, comment and counter, and the dump's end", () => {
  const key = new Uint8Array([10, 96, 0, 1, 6, 0, 0, 0, 0, 80, 0, 0]);
  const comment = text("default/web:http");
  const userdata = concat(new Uint8Array([0, comment.length]), comment);
  const counter = concat(
    attr(1, text("counter")),
    attr(2, concat(attr(1, u64(640)), attr(2, u64(7)))),
  );
  const element = attr(1, concat(attr(1, attr(1, key)), attr(6, userdata), attr(7, counter)));
  const plain = attr(1, attr(1, attr(1, new Uint8Array([10, 96, 0, 2]))));
  const elements = attr(3 | 0x8000, concat(element, plain));
  const body = concat(new Uint8Array([2, 0, 0, 0]), attr(1, text("t")), elements);
  const out: KernelElement[] = [];
  const collect = (view: DataView, start: number, end: number) =>
    readElements(view, start, end, out);
  assert.equal(readMessages(message((10 << 8) | 12, 9, body), 9, collect), false);
  assert.equal(readMessages(message(3, 9, new Uint8Array(4)), 9, collect), true);
  assert.deepEqual(out, [
    { key, comment: "default/web:http", packets: 7 },
    { key: new Uint8Array([10, 96, 0, 2]), comment: "" },
  ]);
});

Deno.test("readMessages() turns the kernel's error answer into a NetlinkError with its errno", () => {
  const error = new Uint8Array(4);
  new DataView(error.buffer).setInt32(0, -2, true);
  assert.throws(
    () => readMessages(message(2, 9, error), 9, () => {}),
    (e: unknown) => e instanceof NetlinkError && e.errno === 2 && /ENOENT/.test(e.message),
  );
});

Deno.test({
  name: "dumpSetElements() reads the same counted elements as nft -j list map, in the kernel",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (scratch) => {
      await scratch.load(await Deno.readTextFile(GOLDEN));
      const module = JSON.stringify(new URL("./nft_netlink.ts", import.meta.url).href);
      const printed = await scratch.evaluate(
        `import { dumpSetElements } from ${module};
         const els = await dumpSetElements("ip", "kube-nftproxy", "service-ips");
         console.log(JSON.stringify(els.map((e) => [e.comment, e.packets, e.key.length])));`,
      );
      const viaNetlink = JSON.parse(printed) as [string, number, number][];
      const listed = await runNft(["-j", "list", "map", "ip", "kube-nftproxy", "service-ips"], {
        netns: scratch.ns,
      });
      const viaNft = parseElementCounts(listed.stdout).map((e) => [e.comment, e.packets, 12]);
      assert.ok(viaNft.length > 0);
      assert.deepEqual(viaNetlink.sort(), viaNft.sort());
    }),
});

/**
 * An nf_tables transaction adding table `ip knp-bg` and `chains` chains to it, each message
 * asking for an ack: heavy enough that the kernel takes a while, and more acks than a 1 MB
 * receive buffer holds.
 */
function chainsTransaction(chains: number): { bytes: Uint8Array; acks: number } {
  const NLM_F_REQUEST = 0x1, NLM_F_ACK = 0x4, NLM_F_CREATE = 0x400;
  const NFTABLES = 10, AF_INET = 2;
  const header = (type: number, flags: number, seq: number, family: number, resId: number) => {
    const out = new Uint8Array(20);
    const view = new DataView(out.buffer);
    view.setUint16(4, type, true);
    view.setUint16(6, flags, true);
    view.setUint32(8, seq, true);
    out[16] = family;
    view.setUint16(18, resId, false);
    return out;
  };
  const withLength = (parts: Uint8Array[]) => {
    const out = concat(...parts);
    new DataView(out.buffer).setUint32(0, out.length, true);
    return out;
  };
  const request = (type: number, seq: number, attrs: Uint8Array[]) =>
    withLength([
      header((NFTABLES << 8) | type, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE, seq, AF_INET, 0),
      ...attrs,
    ]);
  const messages = [
    withLength([header(0x10, NLM_F_REQUEST, 1, 0, NFTABLES)]), // BATCH_BEGIN
    request(0, 2, [attr(1, text("knp-bg"))]), // NEWTABLE, NFTA_TABLE_NAME
  ];
  for (let i = 0; i < chains; i++) {
    // NEWCHAIN: NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME
    messages.push(request(3, 3 + i, [attr(1, text("knp-bg")), attr(3, text(`c${i}`))]));
  }
  messages.push(withLength([header(0x11, NLM_F_REQUEST, 3 + chains, 0, NFTABLES)])); // BATCH_END
  return { bytes: concat(...messages), acks: chains + 1 };
}

Deno.test({
  name:
    "sendBatch() lets the event loop run while the kernel applies a transaction, and reads every ack",
  ignore: kernelGate.ignore,
  fn: () =>
    withScratch(async (scratch) => {
      const chains = 20_000;
      const { bytes, acks } = chainsTransaction(chains);
      const file = await Deno.makeTempFile({ prefix: "knp-batch-" });
      try {
        await Deno.writeFile(file, bytes);
        const module = JSON.stringify(new URL("./nft_netlink.ts", import.meta.url).href);
        // The kernel takes tens of milliseconds for 20,000 chains; a zero-delay timer set
        // before the send runs within ~2 ms when the event loop is free, or only after the
        // send returns when it is held.
        const printed = await scratch.evaluate(
          `import { sendBatch } from ${module};
           const bytes = await Deno.readFile(${JSON.stringify(file)});
           let applied = false;
           let timerDuringSend;
           setTimeout(() => timerDuringSend = !applied, 0);
           await sendBatch(bytes, ${acks}, (seq) => "message " + seq);
           applied = true;
           await new Promise((resolve) => setTimeout(resolve, 5));
           console.log(JSON.stringify({ timerDuringSend }));`,
        );
        assert.deepEqual(JSON.parse(printed), { timerDuringSend: true });
        const listed = await runNft(["list", "chains", "ip"], { netns: scratch.ns });
        assert.equal(listed.stdout.match(/chain c\d+ /g)?.length, chains);
      } finally {
        await Deno.remove(file);
      }
    }),
});
