/**
 * The proxy state: everything a sync renders from — service ports, their endpoints, this node
 * and the service CIDRs — fed by source events and advanced one sync at a time.
 *
 * Events only record pending changes; {@link ProxyState.takeChanges} folds them in at the start
 * of a sync and reports what changed. Between two `takeChanges` calls the state is stable, so
 * a render always sees one consistent snapshot. The initial list is the exception to the work,
 * not to the result: the trackers convert and merge it into staged maps as it arrives, and the
 * first `takeChanges` swaps them in, reporting every service port as changed, as folding it all
 * then would.
 *
 * @module
 */
import type { Endpoint } from "../model/endpoint.ts";
import { convertNode, convertServiceCIDR, type NodeInfo } from "../model/node.ts";
import { getString } from "../model/raw.ts";
import type { ServicePort } from "../model/service_port.ts";
import type { ObjectEvent, ObjectKind, SourceHandler } from "../source/events.ts";
import { EndpointsChangeTracker } from "./endpoints_tracker.ts";
import { sameJson, ServiceChangeTracker } from "./service_tracker.ts";

/** What a sync needs to know about the changes it is folding in. */
export interface StateChanges {
  /** Service port keys whose service or endpoints changed. */
  readonly changed: ReadonlySet<string>;
  /** Something every service depends on changed (node, service CIDRs): render everything. */
  readonly global: boolean;
  /** When the endpoint changes folded in were made (ms since the epoch), where slices say. */
  readonly triggerTimes: readonly number[];
}

/** Options of a {@link ProxyState}. */
export interface ProxyStateOptions {
  /** This node's name: selects the Node object and local endpoints. */
  hostname: string;
  /** One line per refused object or dropped field. Default: console.error. */
  log?: (line: string) => void;
  /**
   * Called once per refused object with its kind and the reason it was refused (the reason or
   * the whole log line), for counters; the object is also logged through `log`.
   */
  onRejected?: (kind: ObjectKind, message: string) => void;
  /** Called with the kind of each event that left a change pending (to request a sync). */
  onChange?: (kind: ObjectKind) => void;
  /** Called once all kinds have been listed. */
  onSynced?: () => void;
}

/** The proxy's view of the cluster. Implements {@link SourceHandler}. */
export class ProxyState implements SourceHandler {
  readonly #services: ServiceChangeTracker;
  readonly #endpoints: EndpointsChangeTracker;
  readonly #hostname: string;
  readonly #log: (line: string) => void;
  readonly #onChange: (kind: ObjectKind) => void;
  readonly #onSynced: () => void;
  #node: NodeInfo | null = null;
  #pendingNode: { value: NodeInfo | null } | null = null;
  readonly #serviceCIDRs = new Map<string, string[]>();
  #cidrsChanged = false;
  #synced = false;

  constructor(options: ProxyStateOptions) {
    this.#hostname = options.hostname;
    this.#log = options.log ?? ((line) => console.error(line));
    this.#onChange = options.onChange ?? (() => {});
    this.#onSynced = options.onSynced ?? (() => {});
    const rejected = options.onRejected ?? (() => {});
    this.#services = new ServiceChangeTracker({
      log: this.#log,
      onRejected: (reason) => rejected("Service", reason),
    });
    this.#endpoints = new EndpointsChangeTracker({
      hostname: options.hostname,
      log: this.#log,
      onRejected: (reason) => rejected("EndpointSlice", reason),
    });
  }

  /** Applied service ports by key. */
  get services(): ReadonlyMap<string, ServicePort> {
    return this.#services.services;
  }

  /** Applied endpoints by service port key. */
  get endpoints(): ReadonlyMap<string, readonly Endpoint[]> {
    return this.#endpoints.endpoints;
  }

  /** This node, once its Node object has been seen. */
  get node(): NodeInfo | null {
    return this.#node;
  }

  /** Service CIDRs from every ServiceCIDR object, sorted and deduplicated. */
  get serviceCIDRs(): string[] {
    return [...new Set([...this.#serviceCIDRs.values()].flat())].sort();
  }

  /** True once the source has listed every kind. */
  get synced(): boolean {
    return this.#synced;
  }

  /** Pending change counts, for metrics. */
  get pending(): { services: number; endpoints: number } {
    return { services: this.#services.pendingCount, endpoints: this.#endpoints.pendingCount };
  }

  /** Records one event from a source. */
  onEvent(event: ObjectEvent): void {
    let pending = false;
    switch (event.kind) {
      case "Service":
        pending = this.#services.update(event.previous, event.current);
        break;
      case "EndpointSlice":
        pending = this.#endpoints.update(event.previous, event.current);
        break;
      case "Node":
        pending = this.#nodeEvent(event);
        break;
      case "ServiceCIDR":
        pending = this.#serviceCIDREvent(event);
        break;
    }
    if (pending) this.#onChange(event.kind);
  }

  /** The source has listed every kind once. */
  onSynced(): void {
    this.#synced = true;
    this.#onSynced();
  }

  /** Folds every pending change into the state and reports what changed. */
  takeChanges(): StateChanges {
    const changed = this.#services.apply();
    for (const key of this.#endpoints.apply()) changed.add(key);
    let global = this.#cidrsChanged;
    if (this.#pendingNode !== null) {
      global ||= !sameJson(this.#node, this.#pendingNode.value);
      this.#node = this.#pendingNode.value;
      this.#pendingNode = null;
    }
    this.#cidrsChanged = false;
    return { changed, global, triggerTimes: this.#endpoints.appliedTriggerTimes };
  }

  #nodeEvent(event: ObjectEvent): boolean {
    const raw = event.current ?? event.previous;
    if (getString(raw, ["metadata", "name"]) !== this.#hostname) return false;
    let value: NodeInfo | null = null;
    if (event.current !== undefined) {
      const { node, warnings } = convertNode(event.current);
      warnings.forEach((w) => this.#log(w));
      value = node;
    }
    this.#pendingNode = sameJson(this.#node, value) ? null : { value };
    return this.#pendingNode !== null;
  }

  #serviceCIDREvent(event: ObjectEvent): boolean {
    const name = getString(event.current ?? event.previous, ["metadata", "name"]) ?? "";
    const before = this.#serviceCIDRs.get(name);
    if (event.current === undefined) this.#serviceCIDRs.delete(name);
    else {
      const { cidrs, warnings } = convertServiceCIDR(event.current);
      warnings.forEach((w) => this.#log(w));
      this.#serviceCIDRs.set(name, cidrs);
    }
    const changed = !sameJson(before, this.#serviceCIDRs.get(name));
    this.#cidrsChanged ||= changed;
    return changed;
  }
}
