/**
 * The endpoint-slice change tracker: pending EndpointSlice changes per Service, the applied
 * slices, and the merged endpoints per service port they produce.
 *
 * Slices are grouped by the Service named in their `kubernetes.io/service-name` label; a slice
 * moving to another Service leaves the first one. A change back to the applied state vanishes.
 * {@link EndpointsChangeTracker.apply} returns the service port keys whose endpoints changed.
 *
 * Until the first `apply()` nothing is applied, so every slice seen is a change: the initial
 * list is taken in as it arrives — each Service's slices merged into a staged endpoints map once
 * its slices have stopped coming (slices of one Service arrive together) — and the first
 * `apply()` merges the few Services still open and swaps the map in, with the same result as
 * folding everything then.
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

/**
 * Before the first apply, how many Services may have slices not yet merged: a Service is merged
 * once this many others have changed after it, so that one whose slices arrive together (as a
 * list sends them, in name order) is merged once, not once per slice.
 */
const UNMERGED_LIMIT = 64;

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
  #endpoints = new Map<string, readonly Endpoint[]>();
  /**
   * Before the first {@link apply}: the merged endpoints of the Services whose slices have been
   * merged so far (see {@link #unmerged}). Undefined afterwards.
   */
  #staged: Map<string, readonly Endpoint[]> | undefined = new Map();
  /** Before the first {@link apply}: Services whose slices changed since they were merged. */
  readonly #unmerged = new Set<string>();
  readonly #hostname: string;
  readonly #log: (line: string) => void;
  readonly #onRejected: (reason: string) => void;
  /** Applied (before the first {@link apply}: staged) slices: service → slice name → slice. */
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

  /** Applied endpoints by service port key. Changed only by {@link apply}. */
  get endpoints(): Map<string, readonly Endpoint[]> {
    return this.#endpoints;
  }

  /** Number of Services with pending endpoint changes. */
  get pendingCount(): number {
    // Staged: every Service with a slice differs from the empty applied state.
    return this.#staged === undefined ? this.#pending.size : this.#applied.size;
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
      this.#change(oldOwner, sliceName, null);
    }
    const triggered = current === undefined ? null : sliceTriggerTime(current);
    if (triggered !== null && newOwner !== undefined) {
      const times = this.#triggerTimes.get(newOwner) ?? [];
      times.push(triggered);
      this.#triggerTimes.set(newOwner, times);
    }
    if (info && newOwner) {
      this.#change(newOwner, sliceName, info);
      this.#owner.set(sliceId, newOwner);
    } else this.#owner.delete(sliceId);
    const pending = this.#staged === undefined ? this.#pending : this.#applied;
    return (oldOwner !== undefined && pending.has(oldOwner)) ||
      (newOwner !== undefined && pending.has(newOwner));
  }

  #change(service: string, sliceName: string, info: SliceInfo | null): void {
    if (this.#staged === undefined) this.#setPending(service, sliceName, info);
    else this.#stage(service, sliceName, info, this.#staged);
  }

  /**
   * Before the first {@link apply}: the slice goes straight into the staged slices; the
   * Service is merged once it has been left alone while {@link UNMERGED_LIMIT} others changed.
   */
  #stage(
    service: string,
    sliceName: string,
    info: SliceInfo | null,
    staged: Map<string, readonly Endpoint[]>,
  ): void {
    const slices = this.#applied.get(service) ?? new Map<string, SliceInfo>();
    if (info === null) slices.delete(sliceName);
    else slices.set(sliceName, info);
    if (slices.size > 0) this.#applied.set(service, slices);
    else this.#applied.delete(service);
    this.#unmerged.delete(service);
    this.#unmerged.add(service);
    if (this.#unmerged.size <= UNMERGED_LIMIT) return;
    const [oldest] = this.#unmerged;
    this.#unmerged.delete(oldest);
    this.#merge(oldest, staged);
  }

  /** Merges one Service's applied slices into `into`; returns its ports whose endpoints changed. */
  #merge(service: string, into: Map<string, readonly Endpoint[]>): Set<string> {
    const changed = new Set<string>();
    const merged = mergeSlices(this.#applied.get(service)?.values() ?? [], this.#hostname);
    const oldPorts = this.#portsOf.get(service) ?? new Set<string>();
    for (const [key, endpoints] of merged) {
      if (!sameJson(into.get(key), endpoints)) changed.add(key);
      into.set(key, Object.freeze(endpoints));
      oldPorts.delete(key);
    }
    for (const key of oldPorts) {
      into.delete(key);
      changed.add(key);
    }
    if (merged.size > 0) this.#portsOf.set(service, new Set(merged.keys()));
    else this.#portsOf.delete(service);
    return changed;
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
    // Before the first apply the pending Services are those with a staged slice.
    const folded = this.#staged === undefined ? this.#pending : this.#applied;
    this.#appliedTriggerTimes = [];
    for (const service of folded.keys()) {
      this.#appliedTriggerTimes.push(...this.#triggerTimes.get(service) ?? []);
    }
    this.#triggerTimes.clear();
    if (this.#staged !== undefined) {
      for (const service of this.#unmerged) this.#merge(service, this.#staged);
      this.#unmerged.clear();
      // Nothing was applied before: every staged service port is new.
      this.#endpoints = this.#staged;
      this.#staged = undefined;
      return new Set(this.#endpoints.keys());
    }
    const changed = new Set<string>();
    for (const [service, pending] of this.#pending) {
      const slices = new Map(this.#applied.get(service));
      for (const [name, slice] of pending) {
        if (slice === null) slices.delete(name);
        else slices.set(name, slice);
      }
      if (slices.size > 0) this.#applied.set(service, slices);
      else this.#applied.delete(service);
      for (const key of this.#merge(service, this.#endpoints)) changed.add(key);
    }
    this.#pending.clear();
    return changed;
  }
}
