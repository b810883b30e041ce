/**
 * The events every source emits: add, update and delete of raw Kubernetes objects.
 *
 * The API reflector and the file source both speak this vocabulary, so nothing downstream knows
 * which one is running. Objects are passed raw (parsed JSON/YAML); only `src/model/` reads them.
 *
 * @module
 */

/** The object kinds a source delivers. */
export type ObjectKind = "Service" | "EndpointSlice" | "Node" | "ServiceCIDR";

/** A raw Kubernetes object as parsed from JSON or YAML. */
export type RawObject = Record<string, unknown>;

/** One change of one object; `previous` is absent on add, `current` absent on delete. */
export interface ObjectEvent {
  kind: ObjectKind;
  previous?: RawObject;
  current?: RawObject;
}

/** What a source calls as objects change. */
export interface SourceHandler {
  /** One object was added, changed or deleted. */
  onEvent(event: ObjectEvent): void;
  /** Every kind has been listed once: a sync may now run with complete state. */
  onSynced(): void;
}

/** A running source of objects; `stop()` ends it and resolves when it has stopped. */
export interface Source {
  start(handler: SourceHandler): Promise<void>;
  stop(): Promise<void>;
}
