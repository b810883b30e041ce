/**
 * The service change tracker: pending Service changes as `{previous, current}` per Service, and
 * the applied service-port map they are folded into.
 *
 * A change that returns a Service to its applied state vanishes from the pending set, so a
 * sync after it renders nothing. {@link ServiceChangeTracker.apply} returns exactly the service
 * port keys whose record changed — the input of a partial sync.
 *
 * Until the first `apply()` nothing is applied, so every Service seen is a change: the initial
 * list is folded into a staged service-port map as it arrives (while the rest of the list
 * streams in) and the first `apply()` only swaps it in, with the same result as folding it all
 * then.
 *
 * @module
 */
import { convertService } from "../model/convert_service.ts";
import { getString } from "../model/raw.ts";
import { serviceKey, type ServicePort, servicePortKey } from "../model/service_port.ts";

/** Options of a {@link ServiceChangeTracker}. */
export interface ServiceTrackerOptions {
  /** Receives one line per refused Service and per skipped part of one. Default: console.error. */
  log?: (line: string) => void;
  /** Called with the reason of each refused Service (for counters). */
  onRejected?: (reason: string) => void;
}

interface Pending {
  readonly previous: readonly ServicePort[];
  current: readonly ServicePort[];
}

/** Tracks Service changes between syncs and owns the applied service-port map. */
export class ServiceChangeTracker {
  #services = new Map<string, ServicePort>();
  /** Before the first {@link apply}: the service ports of every Service seen, by key. */
  #staged: Map<string, ServicePort> | undefined = new Map();
  /** Ports per Service (`ns/name`): applied, or staged before the first {@link apply}. */
  readonly #byService = new Map<string, readonly ServicePort[]>();
  readonly #pending = new Map<string, Pending>();
  readonly #log: (line: string) => void;
  readonly #onRejected: (reason: string) => void;

  constructor(options: ServiceTrackerOptions = {}) {
    this.#log = options.log ?? ((line) => console.error(line));
    this.#onRejected = options.onRejected ?? (() => {});
  }

  /** Applied service ports by {@link servicePortKey}. Changed only by {@link apply}. */
  get services(): Map<string, ServicePort> {
    return this.#services;
  }

  /** Number of Services with a pending change. */
  get pendingCount(): number {
    // Staged: every Service with a port differs from the empty applied state.
    return this.#staged === undefined ? this.#pending.size : this.#byService.size;
  }

  /**
   * Records that a Service was added (`previous` undefined), updated or deleted (`current`
   * undefined). A refused Service counts as having no ports. Returns true when a change is
   * now pending for it.
   */
  update(previous: unknown, current: unknown): boolean {
    const converted = current === undefined ? undefined : convertService(current);
    // Only a deleted Service's name is read: the previous ports are the applied ones.
    const id = converted ? serviceKey(converted) : serviceKey({
      namespace: getString(previous, ["metadata", "namespace"], "default") ?? "",
      name: getString(previous, ["metadata", "name"]) ?? "",
    });
    let ports: readonly ServicePort[] = [];
    if (converted?.ok) {
      ports = converted.ports;
      converted.warnings.forEach((line) => this.#log(line));
    } else if (converted) {
      this.#log(converted.message);
      this.#onRejected(converted.reason);
    }
    if (this.#staged !== undefined) return this.#stage(id, ports, this.#staged);
    const pending = this.#pending.get(id) ??
      { previous: this.#byService.get(id) ?? [], current: [] };
    pending.current = ports;
    if (samePorts(pending.previous, pending.current)) this.#pending.delete(id);
    else this.#pending.set(id, pending);
    return this.#pending.has(id);
  }

  /** Before the first {@link apply}: `id` now has `ports` in the staged map. */
  #stage(id: string, ports: readonly ServicePort[], staged: Map<string, ServicePort>): boolean {
    for (const port of this.#byService.get(id) ?? []) staged.delete(servicePortKey(port.name));
    for (const port of ports) staged.set(servicePortKey(port.name), port);
    if (ports.length > 0) this.#byService.set(id, ports);
    else this.#byService.delete(id);
    return ports.length > 0;
  }

  /** Folds pending changes into {@link services}; returns the keys of changed service ports. */
  apply(): Set<string> {
    if (this.#staged !== undefined) {
      // Nothing was applied before: every staged port is new.
      this.#services = this.#staged;
      this.#staged = undefined;
      return new Set(this.#services.keys());
    }
    const changed = new Set<string>();
    for (const [id, { previous, current }] of this.#pending) {
      const before = new Map(previous.map((p) => [servicePortKey(p.name), p]));
      for (const key of before.keys()) this.#services.delete(key);
      for (const port of current) {
        const key = servicePortKey(port.name);
        this.#services.set(key, port);
        if (!sameJson(before.get(key), port)) changed.add(key);
        before.delete(key);
      }
      for (const key of before.keys()) changed.add(key);
      if (current.length > 0) this.#byService.set(id, current);
      else this.#byService.delete(id);
    }
    this.#pending.clear();
    return changed;
  }
}

function samePorts(a: readonly ServicePort[], b: readonly ServicePort[]): boolean {
  return a.length === b.length && a.every((p, i) => sameJson(p, b[i]));
}

/** Deep equality for records built by the same converter (same key order). */
export function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  // A record against nothing (a new port): no need to write either out.
  if (a === undefined || b === undefined || a === null || b === null) return false;
  return JSON.stringify(a) === JSON.stringify(b);
}
