import assert from "node:assert/strict";
import { ConfigError, invalidValue, showValue } from "./config_error.ts";

Deno.test("ConfigError is a named Error carrying the field and the cause", () => {
  const cause = new SyntaxError("bad");
  const error = new ConfigError("config k.yaml: mode is 1, must be a string", {
    field: "config k.yaml: mode",
    cause,
  });
  assert.ok(error instanceof Error);
  assert.equal(error.name, "ConfigError");
  assert.equal(error.field, "config k.yaml: mode");
  assert.equal(error.cause, cause);
  assert.equal(new ConfigError("x").field, "");
  assert.equal("cause" in new ConfigError("x"), false);
});

Deno.test("invalidValue() words the error as '<field> is <value>, <rule>'", () => {
  const error = invalidValue("config kube-proxy.yaml: iptables.masqueradeBit", 40, {
    rule: "must be 0-31",
  });
  assert.equal(error.message, "config kube-proxy.yaml: iptables.masqueradeBit is 40, must be 0-31");
  assert.equal(error.field, "config kube-proxy.yaml: iptables.masqueradeBit");
});

Deno.test("showValue() shows values as they are typed", () => {
  assert.equal(showValue("ipvs"), '"ipvs"');
  assert.equal(showValue(""), '""');
  assert.equal(showValue(40), "40");
  assert.equal(showValue(false), "false");
  assert.equal(showValue(null), "null");
  assert.equal(showValue(undefined), "missing");
  assert.equal(showValue(["a", 1]), '["a",1]');
});
