import assert from "node:assert/strict";
import { kernelGate } from "../../tests/nft_scratch.ts";
import { createNamespace, deleteNamespace, runOk, shortId } from "../../tests/netns/netns.ts";
import { listLocalAddresses, parseIpAddressJson } from "./addresses.ts";

Deno.test("parseIpAddressJson() keeps host and global addresses, skipping link-local ones", () => {
  const text = JSON.stringify([
    {
      ifname: "lo",
      addr_info: [{ local: "127.0.0.1", scope: "host" }, { local: "::1", scope: "host" }],
    },
    {
      ifname: "eth0",
      addr_info: [
        { local: "192.168.77.1", scope: "global" },
        { local: "FD00:77::1", scope: "global" },
        { local: "fe80::1", scope: "link" },
      ],
    },
    { ifname: "down0" },
  ]);
  assert.deepEqual(parseIpAddressJson(text), ["127.0.0.1", "::1", "192.168.77.1", "fd00:77::1"]);
});

Deno.test({
  name: "listLocalAddresses() reads the addresses of a namespace's interfaces",
  ignore: kernelGate.ignore,
  fn: async () => {
    kernelGate.assertUsable();
    const ns = `knp-${shortId()}-addr`;
    await createNamespace(ns);
    try {
      await runOk([
        "ip",
        "-n",
        ns,
        "link",
        "add",
        "knp-a0",
        "type",
        "veth",
        "peer",
        "name",
        "knp-a1",
      ]);
      await runOk(["ip", "-n", ns, "addr", "add", "10.77.0.1/24", "dev", "knp-a0"]);
      assert.deepEqual(
        (await listLocalAddresses({ netns: ns })).filter((a) => a.startsWith("10.77.")),
        ["10.77.0.1"],
      );
    } finally {
      await deleteNamespace(ns);
    }
  },
});
