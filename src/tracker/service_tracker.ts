/**
 * The service change tracker: pending Service changes as `{previous, current}` per Service, and
 * the applied service-port map they are folded into.
 *
 * A change that returns a Service to its applied state vanishes from the pending set, so a
 * sync after it renders nothing. {@link ServiceChangeTracker.apply} returns exactly the service
 * port keys whose record changed — the input of a partial sync.
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
  /** Applied service ports by {@link servicePortKey}. Changed only by {@link apply}. */
  readonly services: Map<string, ServicePort> = new Map();
  readonly #byService = new Map<string, readonly ServicePort[]>();
  readonly #pending = new Map<string, Pending>();
  readonly #log: (line: string) => void;
  readonly #onRejected: (reason: string) => void;

  constructor(options: ServiceTrackerOptions = {}) {
    this.#log = options.log ?? ((line) => console.error(line));
    this.#onRejected = options.onRejected ?? (() => {});
  }

  /** Number of Services with a pending change. */
  get pendingCount(): number {
    return this.#pending.size;
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
    const pending = this.#pending.get(id) ??
      { previous: this.#byService.get(id) ?? [], current: [] };
    pending.current = ports;
    if (samePorts(pending.previous, pending.current)) this.#pending.delete(id);
    else this.#pending.set(id, pending);
    return this.#pending.has(id);
  }

  /** Folds pending changes into {@link services}; returns the keys of changed service ports. */
  apply(): Set<string> {
    const changed = new Set<string>();
    for (const [id, { previous, current }] of this.#pending) {
      const before = new Map(previous.map((p) => [servicePortKey(p.name), p]));
      for (const key of before.keys()) this.services.delete(key);
      for (const port of current) {
        const key = servicePortKey(port.name);
        this.services.set(key, port);
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
