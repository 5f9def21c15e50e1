export type LogLevel = "debug" | "info" | "warn" | "error" | "silent";
const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  flush(): void;
}

/**
 * JSON lines, one object per event. Lines are buffered and written once per tick so logging never
 * blocks a request on a synchronous write. Callers pass key prefixes, never secrets.
 */
export function createLogger(options: { level: LogLevel; write?: (chunk: string) => void }): Logger {
  const write = options.write ?? ((chunk: string) => process.stdout.write(chunk));
  const threshold = RANK[options.level];
  let buffer = "";
  let scheduled = false;
  const flush = (): void => {
    scheduled = false;
    if (buffer === "") return;
    const chunk = buffer;
    buffer = "";
    write(chunk);
  };
  const log = (level: Exclude<LogLevel, "silent">, message: string, fields?: Record<string, unknown>): void => {
    if (RANK[level] < threshold) return;
    buffer += `${JSON.stringify({ time: new Date().toISOString(), level, message, ...fields })}\n`;
    if (!scheduled) {
      scheduled = true;
      setImmediate(flush);
    }
  };
  return {
    debug: (message, fields) => log("debug", message, fields),
    info: (message, fields) => log("info", message, fields),
    warn: (message, fields) => log("warn", message, fields),
    error: (message, fields) => log("error", message, fields),
    flush,
  };
}
