// CPU time of processes from /proc: the service's instances and the PostgreSQL server's backends.
import { readdirSync, readFileSync } from "node:fs";

const TICK_US = 1_000_000 / 100; // USER_HZ: /proc times are in 1/100 s

/** CPU time (µs) used so far by each process, from /proc/<pid>/stat (utime + stime). */
export function cpuOf(pids: number[]): Map<number, number> {
  const times = new Map<number, number>();
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      times.set(pid, (Number(fields[11]) + Number(fields[12])) * TICK_US);
    } catch {
      // the process ended
    }
  }
  return times;
}

export function postgresPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim() === "postgres") pids.push(Number(entry));
    } catch {
      // gone
    }
  }
  return pids;
}

/** CPU used between two snapshots; a process that appeared meanwhile counts whole. */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, time] of after) total += time - (before.get(pid) ?? 0);
  return total;
}
