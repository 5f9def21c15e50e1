/**
 * Work that must finish before the store closes even when its client has gone away: Bun's
 * server.stop() waits for open connections only, and a request whose client hung up holds credits
 * until its handler has committed or released them.
 */
export class InFlightWork {
  private readonly running = new Set<Promise<unknown>>();

  track<T>(work: Promise<T>): Promise<T> {
    this.running.add(work);
    const done = () => this.running.delete(work);
    work.then(done, done);
    return work;
  }

  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.allSettled([...this.running]);
  }
}
