/**
 * Property: the proxy never crashes on bad input. Any stream of events — inconsistent ones too
 * (deletes of unknown objects, updates whose `previous` is not what was added, objects under
 * the wrong kind, garbage everywhere) — is taken by {@link ProxyState} and rendered by
 * {@link NftPlanner} without throwing, and every script it renders is clean: one command per
 * line, no object name outside sanitized comments and chain names.
 *
 * Pure (no kernel): the kernel's verdict on such scripts is kernel_accepts_property_test.ts.
 *
 * @module
 */
import fc from "fast-check";
import type { ObjectEvent, ObjectKind } from "../../src/source/events.ts";
import { clusterObject, configVariant } from "./arbitraries.ts";
import {
  assertClean,
  playSequence,
  propertyRuns,
  propertySeed,
  reportChecked,
  sequence,
  SimulatedProxy,
  stringsOf,
} from "./cluster.ts";

/** One step of a chaotic stream: an event, or a sync (full or partial). */
type Step = { event: ObjectEvent } | { sync: "full" | "partial" };

const kind = fc.constantFrom<ObjectKind>("Service", "EndpointSlice", "Node", "ServiceCIDR");

const step: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, kind),
      previous: fc.option(clusterObject, { nil: undefined }),
      current: fc.option(clusterObject, { nil: undefined }),
    }).map(({ kind, previous, current }): Step => ({
      event: {
        // Usually the kind of the object itself; sometimes another kind entirely.
        kind: kind ?? current?.kind ?? previous?.kind ?? "Service",
        previous: previous?.object,
        current: current?.object,
      },
    })),
  },
  { weight: 1, arbitrary: fc.constantFrom<Step>({ sync: "full" }, { sync: "partial" }) },
);

Deno.test("ProxyState and NftPlanner never throw on any event stream, and render only clean scripts", () => {
  let generated = 0;
  let checked = 0;
  fc.assert(
    fc.property(configVariant, fc.array(step, { maxLength: 40 }), (config, steps) => {
      const proxy = new SimulatedProxy(config, "t");
      const names = stringsOf(
        steps.flatMap((s) =>
          "event" in s
            ? [s.event.previous, s.event.current].filter((o) => o !== undefined).map((object) => ({
              kind: s.event.kind,
              object,
            }))
            : []
        ),
      );
      for (const s of [...steps, { sync: "partial" } as const]) {
        if ("event" in s) proxy.onEvent(s.event);
        else {
          generated++;
          const script = proxy.sync({ full: s.sync === "full" });
          assertClean(script, { tables: ["t"], names, tolerateKnown: true });
          checked++;
        }
      }
    }),
    { seed: propertySeed(), numRuns: Math.ceil(propertyRuns() / 4) },
  );
  reportChecked("never-crash property (event streams)", { checked, generated, unit: "syncs" });
});

Deno.test("NftPlanner's partial syncs after any source event sequence never throw and stay clean", () => {
  let generated = 0;
  let checked = 0;
  fc.assert(
    fc.property(sequence, (seq) => {
      generated += seq.steps.length + 2;
      const run = playSequence(seq, "t");
      const names = stringsOf([
        ...seq.initial,
        ...seq.steps.flat().flatMap((o) => "object" in o ? [o.object] : []),
      ]);
      for (const script of [...run.scripts, run.fresh]) {
        assertClean(script, { tables: ["t"], names, tolerateKnown: true });
        checked++;
      }
    }),
    { seed: propertySeed(), numRuns: Math.ceil(propertyRuns() / 4) },
  );
  reportChecked("never-crash property (sequences)", { checked, generated, unit: "syncs" });
});
