/**
 * PCM16LE and float samples, and the `Framer` that cuts 16 kHz samples into OVP frames.
 *
 * A float sample `x` is the PCM16 value `x * 32768` rounded to the nearest integer, ties to
 * even, and clipped to -32768..32767 (so 1.0 is 32767); NaN is 0. The other way, a PCM16 value
 * `v` is `v / 32768`, exactly, so PCM16 -> float -> PCM16 gives back every value. The Python
 * binding (`voxwire.audio`) rounds and clips the same way.
 */
import { PCM_BYTES_PER_FRAME, SAMPLES_PER_FRAME } from "../ovp/constants.js";

const SCALE = 32768;
const MIN = -32768;
const MAX = 32767;

/** One float sample as a PCM16 value (see the module comment). */
export function toPcm16Value(x: number): number {
  if (Number.isNaN(x)) return 0;
  const v = x * SCALE;
  if (v <= MIN) return MIN;
  if (v >= MAX) return MAX;
  let r = Math.round(v); // ties toward +infinity: a tie rounded to an odd value goes back down
  if (r - v === 0.5 && (r & 1) !== 0) r -= 1;
  return r === 0 ? 0 : r; // not -0 (Math.round(-0.25) is -0)
}

/** Float samples to PCM16LE bytes (into `out` when given: `2 * samples.length` bytes). */
export function floatToPcm16(samples: ArrayLike<number>, out?: Uint8Array): Uint8Array {
  const bytes = out ?? new Uint8Array(2 * samples.length);
  if (bytes.length < 2 * samples.length) throw new RangeError(`out holds ${bytes.length} bytes, ${2 * samples.length} are due`);
  for (let i = 0; i < samples.length; i++) {
    const v = toPcm16Value(samples[i] as number);
    bytes[2 * i] = v & 0xff;
    bytes[2 * i + 1] = (v >> 8) & 0xff;
  }
  return bytes;
}

/** PCM16LE bytes to float samples, `v / 32768` (into `out` when given). */
export function pcm16ToFloat(pcm: Uint8Array, out?: Float32Array): Float32Array {
  if (pcm.length % 2 !== 0) throw new RangeError(`PCM16 holds 2 bytes a sample: ${pcm.length} bytes is not a whole number of samples`);
  const count = pcm.length / 2;
  const samples = out ?? new Float32Array(count);
  if (samples.length < count) throw new RangeError(`out holds ${samples.length} samples, ${count} are due`);
  for (let i = 0; i < count; i++) {
    const v = (pcm[2 * i] as number) | ((pcm[2 * i + 1] as number) << 8);
    samples[i] = (v >= 0x8000 ? v - 0x10000 : v) / SCALE;
  }
  return samples;
}

/**
 * Cuts a stream of 16 kHz float samples into OVP frames: 320 samples, 640 bytes of PCM16LE each.
 *
 * ```ts
 * const framer = new Framer();
 * for (const pcm of framer.push(samples)) client.sendAudio(pcm);
 * const last = framer.flush(); // the rest padded with silence, or null
 * ```
 */
export class Framer {
  private readonly frame = new Float32Array(SAMPLES_PER_FRAME);
  private filled = 0;

  /** Samples held for the next frame (fewer than 320). */
  get pending(): number {
    return this.filled;
  }

  /** Take samples; return the frames they complete, in order. */
  push(samples: Float32Array): Uint8Array[] {
    const frames: Uint8Array[] = [];
    let offset = 0;
    while (offset < samples.length) {
      const take = Math.min(SAMPLES_PER_FRAME - this.filled, samples.length - offset);
      this.frame.set(samples.subarray(offset, offset + take), this.filled);
      this.filled += take;
      offset += take;
      if (this.filled === SAMPLES_PER_FRAME) {
        frames.push(floatToPcm16(this.frame, new Uint8Array(PCM_BYTES_PER_FRAME)));
        this.filled = 0;
      }
    }
    return frames;
  }

  /** The samples held as one last frame padded with silence, or `null` when none are held. */
  flush(): Uint8Array | null {
    if (this.filled === 0) return null;
    this.frame.fill(0, this.filled);
    this.filled = 0;
    return floatToPcm16(this.frame, new Uint8Array(PCM_BYTES_PER_FRAME));
  }
}
