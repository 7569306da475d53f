/**
 * The capture's paced sender, sans-I/O: frames are queued as they are made, and `tick(now)`,
 * called when `nextAt()` says, gives the one frame to send in that slot (spec decision
 * paced-capture). The schedule is absolute, one slot every `FRAME_MS`, so it never drifts; two
 * sends are never less than `CAPTURE_MIN_GAP_MS` apart, so a late slot is caught up without a
 * burst; a schedule more than `CAPTURE_RESTART_MS` behind restarts from now (the missed slots are
 * never sent); at most `CAPTURE_QUEUE_MAX_FRAMES` wait, the oldest dropped past that.
 */
import { CAPTURE_MIN_GAP_MS, CAPTURE_QUEUE_MAX_FRAMES, CAPTURE_RESTART_MS, FRAME_MS } from "../ovp/constants.js";

export interface PacerStats {
  /** Items handed out by `tick`. */
  readonly sent: number;
  /** Items dropped because `maxQueue` waited already (the oldest goes). */
  readonly overflowed: number;
  /** Times the schedule fell more than `restartMs` behind and restarted. */
  readonly restarts: number;
  /** Items waiting now. */
  readonly queued: number;
}

export interface PacerOptions {
  readonly intervalMs?: number;
  readonly minGapMs?: number;
  readonly restartMs?: number;
  readonly maxQueue?: number;
}

/** One item per slot of an absolute schedule (see the module comment). */
export class Pacer<T> {
  readonly intervalMs: number;
  readonly minGapMs: number;
  readonly restartMs: number;
  readonly maxQueue: number;
  private readonly queue: T[] = [];
  /** The time of the next slot (null before the first tick) and of the last send. */
  private slot: number | null = null;
  private lastSent = -Infinity;
  private counts = { sent: 0, overflowed: 0, restarts: 0 };

  constructor(options: PacerOptions = {}) {
    this.intervalMs = options.intervalMs ?? FRAME_MS;
    this.minGapMs = options.minGapMs ?? CAPTURE_MIN_GAP_MS;
    this.restartMs = options.restartMs ?? CAPTURE_RESTART_MS;
    this.maxQueue = options.maxQueue ?? CAPTURE_QUEUE_MAX_FRAMES;
    if (!(this.intervalMs > 0 && this.minGapMs >= 0 && this.minGapMs <= this.intervalMs && this.restartMs >= 0)) {
      throw new RangeError(`a pacer needs 0 <= minGapMs <= intervalMs, intervalMs > 0 and restartMs >= 0 (${this.minGapMs}, ${this.intervalMs}, ${this.restartMs})`);
    }
    if (!Number.isInteger(this.maxQueue) || this.maxQueue < 1) throw new RangeError(`maxQueue must be an integer of at least 1, not ${this.maxQueue}`);
  }

  get stats(): PacerStats {
    return { ...this.counts, queued: this.queue.length };
  }

  /** Queue an item; returns the item dropped to make room (the oldest), if one was. */
  push(item: T): T | undefined {
    this.queue.push(item);
    if (this.queue.length <= this.maxQueue) return undefined;
    this.counts.overflowed++;
    return this.queue.shift();
  }

  /** When `tick` is due next; before the first tick, at once (`-Infinity`). */
  nextAt(): number {
    if (this.slot === null) return -Infinity;
    return Math.max(this.slot, this.lastSent + this.minGapMs);
  }

  /** The slot at `now`: the item to send now, if one waits and the slot is due; else none. */
  tick(now: number): T | undefined {
    if (this.slot === null) this.slot = now;
    if (now < this.nextAt()) return undefined;
    if (now - this.slot > this.restartMs) {
      this.counts.restarts++;
      this.slot = now;
    }
    this.slot += this.intervalMs;
    const item = this.queue.shift();
    if (item !== undefined) {
      this.counts.sent++;
      this.lastSent = now;
    }
    return item;
  }

  /** Drop everything queued; the number dropped. */
  clear(): number {
    return this.queue.splice(0).length;
  }
}
