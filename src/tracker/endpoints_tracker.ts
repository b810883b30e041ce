/**
 * The endpoint-slice change tracker: pending EndpointSlice changes per Service, the applied
 * slices, and the merged endpoints per service port they produce.
 *
 * Slices are grouped by the Service named in their `kubernetes.io/service-name` label; a slice
 * moving to another Service leaves the first one. A change back to the applied state vanishes.
 * {@link EndpointsChangeTracker.apply} returns the service port keys whose endpoints changed.
 *
 * @module
 */
import {
  convertEndpointSlice,
  mergeSlices,
  type SliceInfo,
  sliceTriggerTime,
} from "../model/convert_endpoint_slice.ts";
import type { Endpoint } from "../model/endpoint.ts";
import { getString } from "../model/raw.ts";
import { serviceKey } from "../model/service_port.ts";
import { sameJson } from "./service_tracker.ts";

/** Options of an {@link EndpointsChangeTracker}. */
export interface EndpointsTrackerOptions {
  /** This node's name: endpoints with this `nodeName` are local. */
  hostname: string;
  /** Receives one line per refused slice or dropped endpoint. Default: console.error. */
  log?: (line: string) => void;
  /** Called once per refused slice (for counters). */
  onRejected?: (reason: string) => void;
}

/** Tracks EndpointSlice changes and owns the applied endpoints per service port. */
export class EndpointsChangeTracker {
  /** Applied endpoints by service port key. Changed only by {@link apply}. */
  readonly endpoints: Map<string, readonly Endpoint[]> = new Map();
  readonly #hostname: string;
  readonly #log: (line: string) => void;
  readonly #onRejected: (reason: string) => void;
  /** Applied slices: service (`ns/name`) → slice name → slice. */
  readonly #applied = new Map<string, Map<string, SliceInfo>>();
  /** Pending slices: service → slice name → slice, or null for "removed". */
  readonly #pending = new Map<string, Map<string, SliceInfo | null>>();
  /** Which service each slice (`ns/slice`) currently belongs to, pending changes included. */
  readonly #owner = new Map<string, string>();
  /** Service port keys with endpoints, per service. */
  readonly #portsOf = new Map<string, Set<string>>();
  /** Trigger times of the pending changes, per service (upstream's lastChangeTriggerTimes). */
  readonly #triggerTimes = new Map<string, number[]>();
  /** Trigger times of the changes folded in by the last {@link apply}. */
  #appliedTriggerTimes: number[] = [];

  constructor(options: EndpointsTrackerOptions) {
    this.#hostname = options.hostname;
    this.#log = options.log ?? ((line) => console.error(line));
    this.#onRejected = options.onRejected ?? (() => {});
  }

  /** Number of Services with pending endpoint changes. */
  get pendingCount(): number {
    return this.#pending.size;
  }

  /** Records an added, updated or deleted EndpointSlice. Returns true if a change is pending. */
  update(previous: unknown, current: unknown): boolean {
    const raw = current ?? previous;
    const namespace = getString(raw, ["metadata", "namespace"], "default") ?? "";
    const sliceName = getString(raw, ["metadata", "name"]) ?? "";
    const sliceId = serviceKey({ namespace, name: sliceName });
    let info: SliceInfo | null = null;
    if (current !== undefined) {
      const converted = convertEndpointSlice(current);
      if (!converted.ok) {
        this.#log(converted.message);
        this.#onRejected(converted.message);
      } else {
        converted.warnings.forEach((w) => this.#log(w));
        info = converted.slice;
      }
    }
    const oldOwner = this.#owner.get(sliceId);
    const newOwner = info
      ? serviceKey({ namespace: info.namespace, name: info.serviceName })
      : undefined;
    if (oldOwner !== undefined && oldOwner !== newOwner) {
      this.#setPending(oldOwner, sliceName, null);
    }
    const triggered = current === undefined ? null : sliceTriggerTime(current);
    if (triggered !== null && newOwner !== undefined) {
      const times = this.#triggerTimes.get(newOwner) ?? [];
      times.push(triggered);
      this.#triggerTimes.set(newOwner, times);
    }
    if (info && newOwner) {
      this.#setPending(newOwner, sliceName, info);
      this.#owner.set(sliceId, newOwner);
    } else this.#owner.delete(sliceId);
    return (oldOwner !== undefined && this.#pending.has(oldOwner)) ||
      (newOwner !== undefined && this.#pending.has(newOwner));
  }

  #setPending(service: string, sliceName: string, info: SliceInfo | null): void {
    const pending = this.#pending.get(service) ?? new Map<string, SliceInfo | null>();
    pending.set(sliceName, info);
    const applied = this.#applied.get(service);
    const unchanged = [...pending].every(([name, slice]) =>
      sameJson(applied?.get(name) ?? null, slice)
    );
    if (unchanged) this.#pending.delete(service);
    else this.#pending.set(service, pending);
  }

  /**
   * Trigger times (ms since the epoch) of the endpoint changes the last {@link apply} folded
   * in; a sync that succeeds observes `now - t` for each as network programming latency.
   */
  get appliedTriggerTimes(): readonly number[] {
    return this.#appliedTriggerTimes;
  }

  /** Folds pending changes into {@link endpoints}; returns the changed service port keys. */
  apply(): Set<string> {
    const changed = new Set<string>();
    this.#appliedTriggerTimes = [];
    for (const service of this.#pending.keys()) {
      this.#appliedTriggerTimes.push(...this.#triggerTimes.get(service) ?? []);
    }
    this.#triggerTimes.clear();
    for (const [service, pending] of this.#pending) {
      const slices = new Map(this.#applied.get(service));
      for (const [name, slice] of pending) {
        if (slice === null) slices.delete(name);
        else slices.set(name, slice);
      }
      if (slices.size > 0) this.#applied.set(service, slices);
      else this.#applied.delete(service);
      const merged = mergeSlices(slices.values(), this.#hostname);
      const oldPorts = this.#portsOf.get(service) ?? new Set<string>();
      for (const [key, endpoints] of merged) {
        if (!sameJson(this.endpoints.get(key), endpoints)) changed.add(key);
        this.endpoints.set(key, Object.freeze(endpoints));
        oldPorts.delete(key);
      }
      for (const key of oldPorts) {
        this.endpoints.delete(key);
        changed.add(key);
      }
      if (merged.size > 0) this.#portsOf.set(service, new Set(merged.keys()));
      else this.#portsOf.delete(service);
    }
    this.#pending.clear();
    return changed;
  }
}
