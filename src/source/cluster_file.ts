/**
 * The cluster file's content: a multi-document YAML stream (or `v1 List`) of the Nodes,
 * ServiceCIDRs, Services and EndpointSlices the proxy uses, parsed into accepted objects and
 * one line per skipped document. Pure: no file is read here ({@link FileSource} does that).
 *
 * @module
 */

import { YAMLException } from "js-yaml";
import { AliasBudget, loadYamlDocuments } from "../bounded_yaml.ts";
import type { ObjectKind, RawObject } from "./events.ts";
import { isClusterScoped, objectKey } from "./object_key.ts";

/** The apiVersions accepted for each kind the proxy uses; other pairs are skipped. */
const API_VERSIONS: Readonly<Record<ObjectKind, readonly string[]>> = {
  Node: ["v1"],
  Service: ["v1"],
  EndpointSlice: ["discovery.k8s.io/v1"],
  ServiceCIDR: ["networking.k8s.io/v1", "networking.k8s.io/v1beta1"],
};

/** One object read from a cluster file, with the kind it was accepted as. */
export interface ClusterObject<T = RawObject> {
  /** The kind the object was accepted as. */
  kind: ObjectKind;
  /** The object as parsed, namespace defaulted (or what `keep` made of it). */
  object: T;
}

/** What {@link parseClusterFile} found in a cluster file. */
export interface ParsedClusterFile<T = RawObject> {
  /** The accepted objects by {@link objectKey}, in file order. */
  objects: Map<string, ClusterObject<T>>;
  /** One human-readable line per skipped document, List item or overridden duplicate. */
  skipped: string[];
}

/** Options of {@link parseClusterFile}. */
export interface ParseClusterFileOptions<T = RawObject> {
  /** The file name used in error messages. Default `"<cluster file>"`. */
  source?: string;
  /**
   * What to keep of each accepted object, called as each document is parsed. Default the
   * object itself; the file source keeps canonical JSON, so a large file is never held as
   * objects all at once.
   */
  keep?: (kind: ObjectKind, object: RawObject) => T;
}

/**
 * Where a part of a cluster file sits in the whole: a part starts at a line that starts a
 * document (`---`), so that documents and lines are numbered on from those before it.
 */
export interface ClusterFilePart {
  /** Documents before the part, as {@link scanClusterText} counted them. */
  documentsBefore: number;
  /** Lines before the part. */
  linesBefore: number;
  /** The whole file's alias budget: `AliasBudget.forLength` of the whole text. */
  aliases: AliasBudget;
}

/** Where an accepted object came from, and what it was: for the line of a later duplicate. */
export interface ObjectOrigin {
  /** `document 3`, or `document 3 item 2` in a List. */
  where: string;
  /** `v1 Service default/web`. */
  what: string;
}

/** What {@link parseClusterPart} found in one part of a cluster file. */
export interface ParsedClusterPart<T = RawObject> extends ParsedClusterFile<T> {
  /** The documents the part held (empty ones included). */
  documents: number;
  /** Where each kept object came from (the last document with its key). */
  origins: Map<string, ObjectOrigin>;
  /**
   * Where each key was first accepted in the part, and how many skipped lines came before:
   * where the line "an earlier part's object is overridden" goes. In first-acceptance order.
   */
  firsts: Map<string, { where: string; skippedBefore: number }>;
}

/**
 * A cluster file could not be read or is not valid YAML. `line` and `column` (1-based) locate a
 * syntax error when the parser reported one; `cause` carries the underlying error.
 */
export class ClusterFileError extends Error {
  /** Always `"ClusterFileError"`. */
  override name = "ClusterFileError";
  /** The file that failed. */
  readonly file: string;
  /** 1-based line of a syntax error, when known. */
  readonly line?: number;
  /** 1-based column of a syntax error, when known. */
  readonly column?: number;

  /** Creates the error; `options.file` names the file, `cause` the underlying error. */
  constructor(
    message: string,
    options: { file: string; line?: number; column?: number; cause?: unknown },
  ) {
    super(message, { cause: options.cause });
    this.file = options.file;
    this.line = options.line;
    this.column = options.column;
  }
}

/**
 * Parses the text of a cluster file: a multi-document YAML stream whose documents are
 * `v1 Node`, `networking.k8s.io/v1` (or `v1beta1`) `ServiceCIDR`, `v1 Service`,
 * `discovery.k8s.io/v1 EndpointSlice`, or a `v1 List` of those (flattened). Empty documents are
 * ignored. Anything else — other kinds or apiVersions, non-objects, objects without
 * `metadata.name` — is left out with one line in `skipped`. A namespaced object without
 * `metadata.namespace` is put in `default`, as `kubectl apply` does. When two documents have the
 * same key the last one wins and the earlier one is reported in `skipped`.
 *
 * Throws {@link ClusterFileError} naming the file, line and column when the text is not valid
 * YAML (including duplicate mapping keys), nests deeper than 100, or has aliases that repeat
 * more values than the file has characters (see `../bounded_yaml.ts`: API objects never use
 * aliases; an alias bomb must not cost more than its size). The YAML 1.2 core schema is used,
 * so timestamps stay strings and the result is plain JSON data.
 *
 * @example
 * ```ts
 * const { objects, skipped } = parseClusterFile(
 *   "apiVersion: v1\nkind: Node\nmetadata: {name: node-a}\n",
 *   { source: "cluster.yaml" },
 * );
 * objects.get("Node/node-a")?.kind; // "Node"
 * skipped.length; // 0
 * ```
 */
export function parseClusterFile<T = RawObject>(
  text: string,
  options: ParseClusterFileOptions<T> = {},
): ParsedClusterFile<T> {
  const { objects, skipped } = parseClusterPart(text, options);
  return { objects, skipped };
}

/**
 * {@link parseClusterFile} of one part of a file (by default the whole of it), numbering its
 * documents and lines on from `part`, with what it takes to join the parts again: a file cut at
 * `---` lines into parts gives, part by part, the same documents, skipped lines and errors as
 * parsing it whole (see `cluster_file_parse.ts`, which joins them).
 */
export function parseClusterPart<T = RawObject>(
  text: string,
  options: ParseClusterFileOptions<T> & { part?: ClusterFilePart } = {},
): ParsedClusterPart<T> {
  const source = options.source ?? "<cluster file>";
  const keep = options.keep ?? ((_kind: ObjectKind, object: RawObject) => object as T);
  const part = options.part ??
    { documentsBefore: 0, linesBefore: 0, aliases: AliasBudget.forLength(text.length) };
  const objects = new Map<string, ClusterObject<T>>();
  const origins = new Map<string, ObjectOrigin>();
  const firsts = new Map<string, { where: string; skippedBefore: number }>();
  const skipped: string[] = [];
  const accept = (where: string, kind: ObjectKind, object: RawObject): void => {
    const key = objectKey(kind, object);
    if (key === undefined) {
      skipped.push(`skipping ${where} (${describe(object)}): ${identityProblem(object)}`);
      return;
    }
    const earlier = origins.get(key);
    if (earlier !== undefined) {
      skipped.push(overriddenLine(earlier, where, key));
      objects.delete(key);
    } else {
      firsts.set(key, { where, skippedBefore: skipped.length });
    }
    objects.set(key, { kind, object: keep(kind, object) });
    origins.set(key, { where, what: describe(object) });
  };
  const visit = (where: string, value: unknown): void => {
    if (!isRecord(value)) {
      skipped.push(`skipping ${where}: not a Kubernetes object but ${typeName(value)}`);
      return;
    }
    const { apiVersion, kind } = value;
    if (apiVersion === "v1" && kind === "List") {
      const items = value.items ?? [];
      if (!Array.isArray(items)) {
        skipped.push(`skipping ${where} (v1 List): items is ${typeName(items)}, not a list`);
        return;
      }
      items.forEach((item, i) => visit(`${where} item ${i + 1}`, item));
      return;
    }
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      skipped.push(`skipping ${where} (${describe(value)}): apiVersion and kind must be strings`);
      return;
    }
    if (!isObjectKind(kind)) {
      skipped.push(`skipping ${where} (${describe(value)}): kind not used by the proxy`);
      return;
    }
    const versions = API_VERSIONS[kind];
    if (!versions.includes(apiVersion)) {
      skipped.push(
        `skipping ${where} (${describe(value)}): apiVersion ${apiVersion} is not supported for ` +
          `${kind}, use ${versions.join(" or ")}`,
      );
      return;
    }
    accept(where, kind, defaultNamespace(kind, value));
  };
  let n = part.documentsBefore;
  for (const document of documents(text, source, part)) {
    n++;
    if (document !== null && document !== undefined) visit(`document ${n}`, document);
  }
  return { objects, skipped, documents: n - part.documentsBefore, origins, firsts };
}

/**
 * The skipped line for an object that a later document with the same key overrides: `earlier`
 * is where the overridden one came from, `where` the document that wins.
 */
export function overriddenLine(earlier: ObjectOrigin, where: string, key: string): string {
  return `skipping ${earlier.where} (${earlier.what}): ${where} has the same ` +
    `key ${key}, the last one wins`;
}

/** A line that starts a YAML document: `---` alone (or before a comment). */
const DOCUMENT_START = /^---[ \t]*(?:#.*)?$/m;

/** Lines that the cut at `---` lines could misread: directives, `...` ends, content after `---`. */
const NOT_CUTTABLE = /^(?:%|\.\.\.|---[ \t]*[^ \t#\n])/m;

/** Content before the first `---`: what makes that text a document. */
const CONTENT = /^[ \t]*[^ \t#\n]/m;

/**
 * The documents of a YAML stream, parsed one at a time, so that a large file is never held as
 * objects all at once: the text is cut at its `---` lines, as Kubernetes' own YAML reader cuts
 * manifests, and each piece is parsed alone (error lines counted in the whole file). Text the
 * cut could misread (directives, `...` ends, content after `---`) is parsed whole instead.
 */
function* documents(text: string, source: string, part: ClusterFilePart): Generator<unknown> {
  // One budget for the whole file: its aliases may repeat at most as many values as it has
  // characters, however it is cut.
  const { aliases } = part;
  if (NOT_CUTTABLE.test(text)) {
    try {
      yield* loadYamlDocuments(text, { filename: source, aliases });
    } catch (error) {
      throw syntaxError(source, error, part.linesBefore);
    }
    return;
  }
  let line = part.linesBefore;
  let first = true;
  for (const piece of text.split(new RegExp(DOCUMENT_START.source, "gm"))) {
    // Before the first `---`, only content makes a document (comments and blanks do not).
    const counts = !first || CONTENT.test(piece);
    first = false;
    if (counts) {
      try {
        const parsed = loadYamlDocuments(piece, { filename: source, aliases });
        if (parsed.length === 0) yield null;
        else yield* parsed;
      } catch (error) {
        throw syntaxError(source, error, line);
      }
    }
    line += countLines(piece);
  }
}

/** What {@link scanClusterText} found: whether the text may be one part of a cut file. */
export interface ClusterTextScan {
  /**
   * The text is cut at its `---` lines when parsed (no directives, `...` ends or content after
   * `---`): a file whose parts all are may be parsed part by part.
   */
  cuttable: boolean;
  /** The documents the cut makes of it (when cuttable). */
  documents: number;
  /** Its newlines. */
  lines: number;
}

/**
 * Scans a part of a cluster file without parsing it: whether it is cut at `---` lines, how many
 * documents that makes and how many lines it has, for numbering the part after it
 * ({@link ClusterFilePart}).
 */
export function scanClusterText(text: string): ClusterTextScan {
  const lines = countLines(text);
  if (NOT_CUTTABLE.test(text)) return { cuttable: false, documents: 0, lines };
  const starts = new RegExp(DOCUMENT_START.source, "gm");
  let documents = 0;
  let firstPieceEnd = -1;
  for (let match = starts.exec(text); match !== null; match = starts.exec(text)) {
    if (firstPieceEnd < 0) firstPieceEnd = match.index;
    documents++;
  }
  const firstPiece = firstPieceEnd < 0 ? text : text.slice(0, firstPieceEnd);
  if (CONTENT.test(firstPiece)) documents++;
  return { cuttable: true, documents, lines };
}

/** The newlines in `text`: how many lines further the next piece starts. */
function countLines(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) n++;
  return n;
}

function syntaxError(source: string, error: unknown, lineOffset = 0): ClusterFileError {
  if (error instanceof YAMLException) {
    const mark = error.mark;
    if (mark !== undefined) {
      const line = lineOffset + mark.line + 1;
      const column = mark.column + 1;
      return new ClusterFileError(
        `cannot parse cluster file ${source}: line ${line}, column ${column}: ${error.reason}`,
        { file: source, line, column, cause: error },
      );
    }
    return new ClusterFileError(`cannot parse cluster file ${source}: ${error.reason}`, {
      file: source,
      cause: error,
    });
  }
  return new ClusterFileError(`cannot parse cluster file ${source}: ${errorMessage(error)}`, {
    file: source,
    cause: error,
  });
}

/** Namespaced objects without a namespace land in `default`, as with `kubectl apply`. */
function defaultNamespace(kind: ObjectKind, object: RawObject): RawObject {
  if (isClusterScoped(kind) || !isRecord(object.metadata)) return object;
  const namespace = object.metadata.namespace;
  if (namespace !== undefined && namespace !== null && namespace !== "") return object;
  return { ...object, metadata: { ...object.metadata, namespace: "default" } };
}

function identityProblem(object: RawObject): string {
  const metadata = object.metadata;
  if (!isRecord(metadata)) return "metadata is missing";
  if (typeof metadata.name !== "string" || metadata.name === "") {
    return "metadata.name is missing or empty";
  }
  return "metadata.namespace must be a string";
}

/** `apps/v1 Deployment default/web`, with `?` for what is missing. */
function describe(object: RawObject): string {
  const apiVersion = typeof object.apiVersion === "string" ? object.apiVersion : "?";
  const kind = typeof object.kind === "string" ? object.kind : "?";
  const metadata: Record<string, unknown> = isRecord(object.metadata) ? object.metadata : {};
  const name = typeof metadata.name === "string" && metadata.name !== ""
    ? metadata.name
    : "<no name>";
  const namespace = typeof metadata.namespace === "string" && metadata.namespace !== "" &&
      !(isObjectKind(kind) && isClusterScoped(kind))
    ? `${metadata.namespace}/`
    : "";
  return `${apiVersion} ${kind} ${namespace}${name}`;
}

function isObjectKind(kind: string): kind is ObjectKind {
  return Object.hasOwn(API_VERSIONS, kind);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function typeName(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "a list";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * JSON with every object's keys sorted, so equal content gives equal text: what the file
 * source keeps of an object between readings (a `keep` for {@link parseClusterFile}). The same
 * text as `JSON.stringify` with a replacer that sorts each object's keys, in about half the time
 * for a large file's objects: a sorted copy goes through JSON.stringify's own fast path (and
 * comes out one flat string, not a rope of concatenated pieces).
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(sortedCopy(value));
}

/** `value` with every object's keys in sorted order. */
function sortedCopy(value: unknown): unknown {
  if (typeof value !== "object" || value === null) return value;
  if (Array.isArray(value)) return value.map(sortedCopy);
  const record = value as Record<string, unknown>;
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(record).sort()) {
    const v = sortedCopy(record[key]);
    // Assigning "__proto__" would set the prototype: define it, so that it stays data.
    if (key === "__proto__") {
      Object.defineProperty(copy, key, { value: v, enumerable: true, writable: true });
    } else {
      copy[key] = v;
    }
  }
  return copy;
}
