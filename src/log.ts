/**
 * Logging: one line per event on stderr, `I`/`W`/`E` levels like klog, verbosity from `-v`.
 *
 * @module
 */

/** A logger; `debug(level, …)` lines appear only when `-v` is at least `level`. */
export interface Logger {
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
  debug(level: number, message: string): void;
}

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** Upstream `-v`. Default 0. */
  verbosity?: number;
  /** Where lines go. Default: stderr. */
  write?: (line: string) => void;
  /** Timestamps. Default: `new Date().toISOString()`. */
  now?: () => string;
}

/** Creates a logger writing `LEVEL TIMESTAMP message` lines. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const verbosity = options.verbosity ?? 0;
  const write = options.write ?? ((line: string) => console.error(line));
  const now = options.now ?? (() => new Date().toISOString());
  const emit = (level: string, message: string) =>
    write(`${level} ${now()} ${message.replace(/\n/g, "\\n")}`);
  return {
    info: (message) => emit("I", message),
    warn: (message) => emit("W", message),
    error: (message) => emit("E", message),
    debug: (level, message) => {
      if (verbosity >= level) emit("I", message);
    },
  };
}
