/**
 * The player's jitter buffer, sans-I/O: frames go in as they arrive, one 20 ms slot comes out
 * each time the player asks, and every input carries the time (`now`, in milliseconds of any
 * monotonic clock), so a test drives it with plain numbers.
 *
 * Its rules are the spec's (decision playback-jitter-buffer): an utterance starts once
 * `PLAYBACK_TARGET_FRAMES` are held or the oldest has waited as long; frames play in `frame_seq`
 * order; a gap of at most `PLAYBACK_MAX_FRAMES` is concealed (silence), a longer one skipped;
 * running dry it conceals up to `PLAYBACK_TARGET_FRAMES` slots, then waits for the next
 * utterance (at once after a frame flagged last-of-utterance); a frame whose slot passed is
 * late and dropped; past `PLAYBACK_MAX_FRAMES` held, the oldest is dropped. `flush()` drops
 * everything held (decision playback-flush-events).
 */
import { FRAME_MS, FRAME_SEQ_MODULUS, PLAYBACK_MAX_FRAMES, PLAYBACK_TARGET_FRAMES } from "../ovp/constants.js";
import { FLAG_LAST_OF_UTTERANCE } from "../ovp/frames.js";

/** What the buffer needs of a frame (an `AudioFrame` of `voxwire/ovp` has it). */
export interface BufferedFrame {
  readonly frame_seq: number;
  readonly flags: number;
  readonly pcm: Uint8Array;
}

/** One 20 ms slot of the player: a frame, a concealed slot (play silence), or nothing to play. */
export type Slot =
  | { readonly kind: "frame"; readonly frame: BufferedFrame }
  | { readonly kind: "concealed"; readonly frameSeq: number }
  | { readonly kind: "idle" };

/** What happened to the frames (every count only grows, `held` excepted). */
export interface JitterStats {
  /** Frames pushed. */
  readonly received: number;
  /** Frames played. */
  readonly played: number;
  /** Frames that arrived after their slot was concealed (dropped). */
  readonly late: number;
  /** Frames never received: the `frame_seq` gaps. */
  readonly lost: number;
  /** Slots played as silence: a frame missing in the middle of an utterance. */
  readonly concealed: number;
  /** Frames dropped because the buffer held `maxFrames` already (the oldest goes). */
  readonly overflowed: number;
  /** Frames dropped by `flush()`. */
  readonly flushed: number;
  /** Times `flush()` was called. */
  readonly flushes: number;
  /** Frames held now. */
  readonly held: number;
}

export interface JitterBufferOptions {
  /** Frames held before an utterance starts (default `PLAYBACK_TARGET_FRAMES`). */
  readonly targetFrames?: number;
  /** Most frames held (default `PLAYBACK_MAX_FRAMES`). */
  readonly maxFrames?: number;
}

interface Held {
  readonly frame: BufferedFrame;
  readonly at: number;
}

const HALF_SEQ = FRAME_SEQ_MODULUS / 2;

/** How far `seq` is ahead of `from`, modulo 2^32: negative when it is behind. */
function ahead(seq: number, from: number): number {
  const d = (seq - from + FRAME_SEQ_MODULUS) % FRAME_SEQ_MODULUS;
  return d < HALF_SEQ ? d : d - FRAME_SEQ_MODULUS;
}

/** The jitter buffer (see the module comment). */
export class JitterBuffer {
  readonly targetFrames: number;
  readonly maxFrames: number;
  private readonly queue: Held[] = [];
  private playing = false;
  /** The frame_seq of the next slot, once an utterance started (kept between utterances). */
  private expected: number | null = null;
  private highest: number | null = null;
  private dry = 0;
  private ended = false;
  private counts = { received: 0, played: 0, late: 0, lost: 0, concealed: 0, overflowed: 0, flushed: 0, flushes: 0 };

  constructor(options: JitterBufferOptions = {}) {
    this.targetFrames = options.targetFrames ?? PLAYBACK_TARGET_FRAMES;
    this.maxFrames = options.maxFrames ?? PLAYBACK_MAX_FRAMES;
    if (!Number.isInteger(this.targetFrames) || this.targetFrames < 1) throw new RangeError(`targetFrames must be an integer of at least 1, not ${this.targetFrames}`);
    if (!Number.isInteger(this.maxFrames) || this.maxFrames < this.targetFrames) {
      throw new RangeError(`maxFrames must be an integer of at least targetFrames (${this.targetFrames}), not ${this.maxFrames}`);
    }
  }

  /** Whether an utterance is playing (else the buffer waits for one). */
  get active(): boolean {
    return this.playing;
  }

  get stats(): JitterStats {
    return { ...this.counts, held: this.queue.length };
  }

  /** A frame arrived at `now`. */
  push(frame: BufferedFrame, now: number): void {
    this.counts.received++;
    const seq = frame.frame_seq;
    if (this.highest !== null) {
      const gap = ahead(seq, this.highest);
      if (gap > 1) this.counts.lost += gap - 1;
    }
    if (this.highest === null || ahead(seq, this.highest) > 0) this.highest = seq;
    if (this.expected !== null && ahead(seq, this.expected) < 0) {
      this.counts.late++;
      return;
    }
    this.queue.push({ frame, at: now });
    if (this.queue.length > this.maxFrames) {
      this.queue.shift();
      this.counts.overflowed++;
      const head = this.queue[0] as Held;
      if (this.playing) this.expected = head.frame.frame_seq;
    }
  }

  /** The player's next 20 ms slot, at `now`. */
  next(now: number): Slot {
    if (!this.playing) {
      const head = this.queue[0];
      if (head === undefined) return IDLE;
      if (this.queue.length < this.targetFrames && now - head.at < this.targetFrames * FRAME_MS) return IDLE;
      this.playing = true;
      this.ended = false;
      this.dry = 0;
      this.expected = head.frame.frame_seq;
    }
    const expected = this.expected as number;
    const head = this.queue[0];
    if (head === undefined) {
      if (this.ended || this.dry >= this.targetFrames) {
        this.playing = false;
        return IDLE;
      }
      this.dry++;
      return this.conceal(expected);
    }
    const gap = ahead(head.frame.frame_seq, expected);
    if (gap > this.maxFrames) {
      this.expected = head.frame.frame_seq; // the link was down: skip, do not play the gap
    } else if (gap > 0) {
      return this.conceal(expected);
    }
    this.queue.shift();
    this.counts.played++;
    this.dry = 0;
    this.expected = (head.frame.frame_seq + 1) % FRAME_SEQ_MODULUS;
    this.ended = (head.frame.flags & FLAG_LAST_OF_UTTERANCE) !== 0;
    return { kind: "frame", frame: head.frame };
  }

  /** Drop every frame held and wait for the next utterance; the number dropped. */
  flush(): number {
    const dropped = this.queue.length;
    this.queue.length = 0;
    this.counts.flushed += dropped;
    this.counts.flushes++;
    this.playing = false;
    this.expected = null;
    return dropped;
  }

  private conceal(expected: number): Slot {
    this.counts.concealed++;
    this.expected = (expected + 1) % FRAME_SEQ_MODULUS;
    return { kind: "concealed", frameSeq: expected };
  }
}

const IDLE: Slot = { kind: "idle" };
