/**
 * Watching the `--config` file for a change of its content, as upstream kube-proxy does, so that
 * the process can end and its pod restart with the new ConfigMap.
 *
 * A ConfigMap volume is updated by an atomic symlink swap in the file's directory (`..data` is
 * renamed over), which changes no inode the file's own path names; so the directory is watched
 * and, after each event, the file read again and compared with what was loaded. Only a change of
 * content counts: touching the file, rewriting it unchanged or a ConfigMap update that leaves
 * this key alone does not. A file that cannot be read for a moment (mid-swap) is read again at
 * the next event.
 *
 * @module
 */
import { dirname } from "node:path";

/** Options of {@link watchConfigFile}. */
export interface WatchConfigFileOptions {
  /** The content the process loaded; a change is a difference from it. */
  loaded: string;
  /** Called once, with a line saying what changed, when the content differs. */
  onChange: (line: string) => void;
  /** Ends the watch. */
  signal: AbortSignal;
  /** Reads the file. Default `Deno.readTextFile`. */
  readFile?: (path: string) => Promise<string>;
  /** Where a watch that cannot be set up is reported. Default dropped. */
  warn?: (line: string) => void;
}

/**
 * Watches `path` until `options.signal` aborts or its content changes; resolves then (or at once
 * when the directory cannot be watched, after a warning).
 *
 * @example
 * ```ts
 * const controller = new AbortController();
 * watchConfigFile("/var/lib/kube-proxy/config.conf", {
 *   loaded: text,
 *   onChange: (line) => { log.error(line); controller.abort(); },
 *   signal: controller.signal,
 * });
 * ```
 */
export async function watchConfigFile(
  path: string,
  options: WatchConfigFileOptions,
): Promise<void> {
  if (options.signal.aborted) return;
  const readFile = options.readFile ?? ((file: string) => Deno.readTextFile(file));
  let watcher: Deno.FsWatcher;
  try {
    watcher = Deno.watchFs(dirname(path), { recursive: false });
  } catch (error) {
    options.warn?.(
      `cannot watch the configuration file ${path} for changes: ${(error as Error).message}`,
    );
    return;
  }
  const stop = () => watcher.close();
  options.signal.addEventListener("abort", stop, { once: true });
  try {
    for await (const _event of watcher) {
      let now: string;
      try {
        now = await readFile(path);
      } catch {
        continue;
      }
      if (now !== options.loaded) {
        options.onChange(`configuration file ${path} was updated: exiting to load it`);
        return;
      }
    }
  } finally {
    options.signal.removeEventListener("abort", stop);
    try {
      watcher.close();
    } catch {
      // Already closed by the abort.
    }
  }
}
