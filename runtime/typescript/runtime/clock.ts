/** Time for everything that waits: a monotonic clock in milliseconds and its timers. */

/** The time of a client or a capture: `now()` in milliseconds and its timers (tests pass their own). */
export interface Clock {
  now(): number;
  setTimeout(callback: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** The system's clock: `performance.now()` and the global timers. */
export const SYSTEM_CLOCK: Clock = {
  now: () => performance.now(),
  setTimeout: (callback, ms) => globalThis.setTimeout(callback, ms),
  clearTimeout: (handle) => globalThis.clearTimeout(handle as ReturnType<typeof globalThis.setTimeout>),
};
