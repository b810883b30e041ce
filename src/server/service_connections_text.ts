/**
 * The per-service-port connection counter (`kubenftproxy_service_connections_total`) in
 * Prometheus' text format, written here rather than through prom-client: at 10,000 service ports
 * a scrape that resets and re-increments a prom-client counter (label hashing, then label
 * escaping when it renders) cost ~55 ms of the daemon's CPU. Here each port's series name is
 * built once, when the port first appears, and a scrape only writes numbers.
 *
 * @example
 * ```ts
 * const text = new ServiceConnectionsText();
 * text.from(() => counters.read());
 * const block = await text.render(); // "# HELP kubenftproxy_service_connections_total …"
 * ```
 *
 * @module
 */

/** One service port's new connections. */
export interface ServiceConnectionsTotal {
  readonly namespace: string;
  readonly service: string;
  /** The port's name, as in the Service. */
  readonly port: string;
  /** Connections since the proxy started; never decreases. */
  readonly connections: number;
}

/** Reads every service port's connection total (called at each scrape). */
export type ServiceConnectionsSource = () => Promise<readonly ServiceConnectionsTotal[]>;

/** The metric's name. */
export const SERVICE_CONNECTIONS_METRIC = "kubenftproxy_service_connections_total";

const HEADER = `# HELP ${SERVICE_CONNECTIONS_METRIC} ` +
  "New connections dispatched to each service port, over all its entry points\n" +
  `# TYPE ${SERVICE_CONNECTIONS_METRIC} counter\n`;

/** Renders the counter from a {@link ServiceConnectionsSource}. */
export class ServiceConnectionsText {
  #source: ServiceConnectionsSource | undefined;
  /** Series name (metric and labels) per service port, built on first sight. */
  readonly #series = new Map<string, string>();
  /** The last block rendered, kept when the source fails. */
  #last = "";
  /** The ports of the last block, in order, and their series. */
  #lastPorts: readonly ServiceConnectionsTotal[] = [];
  #lastSeries: string[] = [];

  /** Reads totals from `source` at each {@link render}; totals must be monotonic. */
  from(source: ServiceConnectionsSource): void {
    this.#source = source;
  }

  /**
   * The metric's block (HELP, TYPE and one line per service port, in the source's order), or ""
   * without a source. A failing source leaves the last block.
   */
  async render(): Promise<string> {
    if (this.#source === undefined) return "";
    let totals: readonly ServiceConnectionsTotal[];
    try {
      totals = await this.#source();
    } catch {
      return this.#last;
    }
    const lines: string[] = [HEADER];
    const before = this.#lastPorts;
    const seriesNow: string[] = [];
    for (let i = 0; i < totals.length; i++) {
      const t = totals[i];
      // The same port at the same place as last time (the usual scrape): its series as then.
      const same = before[i];
      let series = same !== undefined && same.namespace === t.namespace &&
          same.service === t.service && same.port === t.port
        ? this.#lastSeries[i]
        : undefined;
      if (series === undefined) {
        const key = `${t.namespace}/${t.service}:${t.port}`;
        series = this.#series.get(key);
        if (series === undefined) {
          series = `${SERVICE_CONNECTIONS_METRIC}{namespace="${escape(t.namespace)}",` +
            `service="${escape(t.service)}",port="${escape(t.port)}"} `;
          this.#series.set(key, series);
        }
      }
      seriesNow.push(series);
      lines.push(series, `${t.connections}\n`);
    }
    this.#lastPorts = totals;
    this.#lastSeries = seriesNow;
    this.#last = lines.join("");
    return this.#last;
  }
}

/** A label value as the text format wants it: backslash, double quote and newline escaped. */
function escape(value: string): string {
  return /[\\"\n]/.test(value)
    ? value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n")
    : value;
}
