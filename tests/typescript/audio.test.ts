// voxwire/audio's pure parts in Node: the resampler against scipy's resample_poly and against the
// Python binding (vectors written by tests/test_audio.py into $VOXWIRE_AUDIO_VECTORS), the same to
// the bit whatever the blocks; PCM16 and the framer; the jitter buffer and the pacer on plain
// numbers for time.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Framer, JitterBuffer, Pacer, RateError, Resampler, floatToPcm16, pcm16ToFloat, toPcm16Value } from "voxwire/audio";
import {
  CAPTURE_MIN_GAP_MS,
  CAPTURE_QUEUE_MAX_FRAMES,
  CAPTURE_RESTART_MS,
  FLAG_LAST_OF_UTTERANCE,
  FRAME_MS,
  PCM_BYTES_PER_FRAME,
  PLAYBACK_MAX_FRAMES,
  PLAYBACK_TARGET_FRAMES,
} from "voxwire/ovp";

interface Vector {
  readonly from: number;
  readonly to: number;
  /** Files in the vectors folder: the input (float32), scipy's output (float64), Python's (float32). */
  readonly input: string;
  readonly scipy: string;
  readonly python: string;
  /** Python's Rechunker frames (when `to` is 16000): PCM16LE, 640 bytes each. */
  readonly frames: string | null;
}

const FOLDER = process.env["VOXWIRE_AUDIO_VECTORS"] ?? "";
const VECTORS: readonly Vector[] = FOLDER === "" ? [] : (JSON.parse(readFileSync(join(FOLDER, "vectors.json"), "utf8")) as Vector[]);
/** Block sizes the input is cut into: single samples, odd sizes, a render quantum, big blocks. */
const BLOCKS = [[1], [7, 3, 1000], [128], [441], [4096], [13, 1, 256, 1, 2]];

function floats32(name: string): Float32Array {
  const bytes = readFileSync(join(FOLDER, name));
  return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

function floats64(name: string): Float64Array {
  const bytes = readFileSync(join(FOLDER, name));
  return new Float64Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

/** Push `input` cut into blocks of the sizes `sizes` (round and round), then flush. */
function resampled(from: number, to: number, input: Float32Array, sizes: readonly number[]): Float32Array {
  const resampler = new Resampler(from, to);
  const parts: Float32Array[] = [];
  let offset = 0;
  for (let i = 0; offset < input.length; i++) {
    const size = sizes[i % sizes.length] as number;
    parts.push(resampler.push(input.subarray(offset, offset + size)));
    offset += size;
  }
  parts.push(resampler.flush());
  const out = new Float32Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function sameBits(a: Float32Array, b: Float32Array, what: string): void {
  assert.equal(a.length, b.length, `${what}: length`);
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) {
    if (x[i] !== y[i]) assert.fail(`${what}: sample ${i} is ${a[i]}, not ${b[i]}`);
  }
}

test("the vectors are there", () => {
  assert.ok(VECTORS.length >= 8, `set VOXWIRE_AUDIO_VECTORS (${FOLDER})`);
});

for (const vector of VECTORS) {
  const name = `${vector.from} Hz -> ${vector.to} Hz`;

  test(`${name}: scipy's resample_poly within float32 rounding`, () => {
    const input = floats32(vector.input);
    const reference = floats64(vector.scipy);
    const out = resampled(vector.from, vector.to, input, [input.length]);
    assert.equal(out.length, reference.length, "ceil(N * up / down) samples");
    let worst = 0;
    for (let i = 0; i < out.length; i++) worst = Math.max(worst, Math.abs((out[i] as number) - (reference[i] as number)));
    // Half a float32 step at the signal's largest magnitude (below 2): the rounding to float32.
    assert.ok(worst <= 2 ** -23, `${name}: ${worst} from scipy`);
    assert.ok(worst > 0 || vector.from === vector.to, "the comparison compares");
  });

  test(`${name}: the same to the bit whatever the blocks, and the same as the Python binding`, () => {
    const input = floats32(vector.input);
    const whole = resampled(vector.from, vector.to, input, [input.length]);
    for (const sizes of BLOCKS) sameBits(resampled(vector.from, vector.to, input, sizes), whole, `blocks ${sizes.join(",")}`);
    sameBits(whole, floats32(vector.python), "the Python binding");
  });

  if (vector.frames !== null) {
    test(`${name}: resampled and framed, the same PCM16 frames as the Python Rechunker`, () => {
      const input = floats32(vector.input);
      const framer = new Framer();
      const frames = framer.push(resampled(vector.from, vector.to, input, [441]));
      const last = framer.flush();
      if (last !== null) frames.push(last);
      const python = readFileSync(join(FOLDER, vector.frames as string));
      assert.equal(frames.length * PCM_BYTES_PER_FRAME, python.length);
      frames.forEach((frame, i) => assert.equal(frame.length, PCM_BYTES_PER_FRAME, `frame ${i}`));
      assert.ok(Buffer.concat(frames).equals(python), "the same bytes");
    });
  }
}

test("a stream is continuous: pushing a tone sample by sample equals pushing it whole", () => {
  const tone = Float32Array.from({ length: 48000 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 997 * i) / 48000));
  sameBits(resampled(48000, 16000, tone, [1]), resampled(48000, 16000, tone, [tone.length]), "48 kHz");
  sameBits(resampled(44100, 16000, tone, [127, 129]), resampled(44100, 16000, tone, [tone.length]), "44.1 kHz");
});

test("flush ends the stream: ceil(N * up / down) samples, then a new stream", () => {
  for (const [from, to, n] of [[44100, 16000, 441], [44100, 16000, 442], [16000, 44100, 1], [48000, 16000, 2], [8000, 16000, 5]] as const) {
    const resampler = new Resampler(from, to);
    const out = resampler.push(new Float32Array(n).fill(0.25)).length + resampler.flush().length;
    assert.equal(out, Math.ceil((n * to) / from), `${from} -> ${to}, ${n} samples`);
    assert.equal(resampler.flush().length, 0, "nothing is left after a flush");
  }
  const resampler = new Resampler(48000, 16000);
  assert.equal(resampler.up, 1);
  assert.equal(resampler.down, 3);
  assert.equal(resampler.lookahead, 30, "half = 30 taps of the 48 kHz input, up = 1");
  const same = new Resampler(16000, 16000);
  const block = Float32Array.of(0.1, -0.2);
  sameBits(same.push(block), block, "equal rates copy");
});

test("a rate that is no positive integer is refused, naming the argument", () => {
  for (const [from, to, argument] of [[0, 16000, "fromRate"], [44100.5, 16000, "fromRate"], [16000, -1, "toRate"], [16000, Number.NaN, "toRate"]] as const) {
    assert.throws(() => new Resampler(from, to), (error: unknown) => error instanceof RateError && error instanceof RangeError && error.message.startsWith(argument));
  }
});

test("PCM16: x * 32768 rounded half to even, clipped; back exactly v / 32768", () => {
  const cases: [number, number][] = [
    [0.5 / 32768, 0],
    [1.5 / 32768, 2],
    [2.5 / 32768, 2],
    [-0.5 / 32768, 0],
    [-1.5 / 32768, -2],
    [-2.5 / 32768, -2],
    [1, 32767],
    [32767 / 32768, 32767],
    [32766.5 / 32768, 32766],
    [-1, -32768],
    [-2, -32768],
    [5, 32767],
    [Number.NaN, 0],
  ];
  for (const [x, v] of cases) assert.equal(toPcm16Value(x), v, String(x));
  const every = new Uint8Array(2 * 65536);
  for (let v = 0; v < 65536; v++) {
    every[2 * v] = v & 0xff;
    every[2 * v + 1] = v >> 8;
  }
  const floats = pcm16ToFloat(every);
  assert.equal(floats[0x8000], -1);
  assert.equal(floats[0x7fff], 32767 / 32768);
  assert.deepEqual(floatToPcm16(floats), every, "PCM16 -> float -> PCM16 gives back every value");
  assert.throws(() => pcm16ToFloat(new Uint8Array(3)), /3 bytes/);
});

test("the framer cuts 640-byte frames across pushes and pads the last with silence", () => {
  const framer = new Framer();
  const ramp = Float32Array.from({ length: 1000 }, (_, i) => i / 32768);
  const frames = [...framer.push(ramp.subarray(0, 319)), ...framer.push(ramp.subarray(319, 321)), ...framer.push(ramp.subarray(321))];
  assert.equal(frames.length, 3);
  assert.equal(framer.pending, 1000 - 960);
  frames.forEach((frame) => assert.equal(frame.length, 640));
  assert.deepEqual(pcm16ToFloat(frames[1] as Uint8Array), ramp.subarray(320, 640));
  const last = framer.flush() as Uint8Array;
  assert.equal(last.length, 640);
  assert.deepEqual(pcm16ToFloat(last).subarray(0, 40), ramp.subarray(960));
  assert.ok(pcm16ToFloat(last).subarray(40).every((x) => x === 0), "padded with silence");
  assert.equal(framer.flush(), null);
});

// -- the jitter buffer ---------------------------------------------------------------------------

const frame = (seq: number, flags = 0) => ({ frame_seq: seq, flags, pcm: new Uint8Array(PCM_BYTES_PER_FRAME).fill(seq & 0xff) });

/** The slots `count` calls of next() give, as "f<seq>", "c<seq>" or "-". */
function slots(buffer: JitterBuffer, count: number, now: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    const slot = buffer.next(now);
    out.push(slot.kind === "frame" ? `f${slot.frame.frame_seq}` : slot.kind === "concealed" ? `c${slot.frameSeq}` : "-");
  }
  return out;
}

test("an utterance starts at the target (N - 1 frames wait, N play) or once the oldest waited as long", () => {
  assert.equal(PLAYBACK_TARGET_FRAMES, 3);
  const buffer = new JitterBuffer();
  for (let i = 0; i < PLAYBACK_TARGET_FRAMES - 1; i++) buffer.push(frame(i), i * FRAME_MS);
  assert.deepEqual(slots(buffer, 1, 2 * FRAME_MS), ["-"]);
  buffer.push(frame(2), 2 * FRAME_MS);
  assert.deepEqual(slots(buffer, 3, 2 * FRAME_MS), ["f0", "f1", "f2"]);
  assert.ok(buffer.active);

  const alone = new JitterBuffer();
  alone.push(frame(7), 1000);
  const wait = PLAYBACK_TARGET_FRAMES * FRAME_MS;
  assert.deepEqual(slots(alone, 1, 1000 + wait - 0.001), ["-"], "one frame waits just under 60 ms");
  assert.deepEqual(slots(alone, 1, 1000 + wait), ["f7"], "and plays at 60 ms");
});

test("a gap is lost frames, concealed slot by slot; a gap longer than the bound is skipped", () => {
  const buffer = new JitterBuffer();
  for (const seq of [0, 1, 2, 5, 6]) buffer.push(frame(seq), 0);
  assert.deepEqual(slots(buffer, 7, 0), ["f0", "f1", "f2", "c3", "c4", "f5", "f6"]);
  assert.equal(buffer.stats.lost, 2);
  assert.equal(buffer.stats.concealed, 2);

  const far = new JitterBuffer();
  for (const seq of [0, 1, 2]) far.push(frame(seq), 0);
  assert.deepEqual(slots(far, 3, 0), ["f0", "f1", "f2"]);
  far.push(frame(3 + PLAYBACK_MAX_FRAMES), 0); // a gap of exactly the bound is concealed
  far.push(frame(4 + 2 * PLAYBACK_MAX_FRAMES + 1), 0); // one over the bound is skipped
  const played = slots(far, PLAYBACK_MAX_FRAMES + 2, 0);
  assert.deepEqual(played, [...Array.from({ length: PLAYBACK_MAX_FRAMES }, (_, i) => `c${3 + i}`), `f${3 + PLAYBACK_MAX_FRAMES}`, `f${4 + 2 * PLAYBACK_MAX_FRAMES + 1}`]);
  assert.equal(far.stats.lost, 2 * PLAYBACK_MAX_FRAMES + 1);
  assert.equal(far.stats.concealed, PLAYBACK_MAX_FRAMES);
});

test("running dry conceals up to the target, then waits; a frame whose slot passed is late", () => {
  const buffer = new JitterBuffer();
  for (const seq of [0, 1, 2]) buffer.push(frame(seq), 0);
  assert.deepEqual(slots(buffer, 3 + PLAYBACK_TARGET_FRAMES + 1, 0), ["f0", "f1", "f2", "c3", "c4", "c5", "-"]);
  buffer.push(frame(3), 100);
  buffer.push(frame(5), 100);
  assert.equal(buffer.stats.late, 2, "slots 3 and 5 were concealed");
  for (const seq of [6, 7, 8]) buffer.push(frame(seq), 100);
  assert.deepEqual(slots(buffer, 4, 100), ["f6", "f7", "f8", "c9"], "the next utterance");
  assert.deepEqual(buffer.stats, { received: 8, played: 6, late: 2, lost: 1, concealed: 4, overflowed: 0, flushed: 0, flushes: 0, held: 0 });
});

test("after a frame flagged last-of-utterance, running dry is no gap", () => {
  const buffer = new JitterBuffer();
  buffer.push(frame(0), 0);
  buffer.push(frame(1, FLAG_LAST_OF_UTTERANCE), 0);
  assert.deepEqual(slots(buffer, 3, 100), ["f0", "f1", "-"]);
  assert.equal(buffer.stats.concealed, 0);
  assert.ok(!buffer.active);
});

test("the buffer holds the bound (N frames) and drops the oldest of N + 1", () => {
  const buffer = new JitterBuffer();
  for (let seq = 0; seq < PLAYBACK_MAX_FRAMES; seq++) buffer.push(frame(seq), 0);
  assert.equal(buffer.stats.held, PLAYBACK_MAX_FRAMES);
  assert.equal(buffer.stats.overflowed, 0);
  buffer.push(frame(PLAYBACK_MAX_FRAMES), 0);
  assert.equal(buffer.stats.held, PLAYBACK_MAX_FRAMES);
  assert.equal(buffer.stats.overflowed, 1);
  assert.deepEqual(slots(buffer, 2, 0), ["f1", "f2"], "the oldest went");
  for (let seq = PLAYBACK_MAX_FRAMES + 1; seq <= PLAYBACK_MAX_FRAMES + 3; seq++) buffer.push(frame(seq), 0);
  assert.deepEqual(slots(buffer, 1, 0), ["f4"], "playing, an overflow skips ahead with no concealment");
  assert.equal(buffer.stats.concealed, 0);
});

test("flush drops everything held; what comes after is the next utterance", () => {
  const buffer = new JitterBuffer();
  for (let seq = 0; seq < 6; seq++) buffer.push(frame(seq), 0);
  assert.deepEqual(slots(buffer, 2, 0), ["f0", "f1"]);
  assert.equal(buffer.flush(), 4);
  assert.deepEqual(slots(buffer, 1, 0), ["-"]);
  for (let seq = 6; seq < 9; seq++) buffer.push(frame(seq), 10);
  assert.deepEqual(slots(buffer, 3, 10), ["f6", "f7", "f8"]);
  assert.deepEqual(buffer.stats, { received: 9, played: 5, late: 0, lost: 0, concealed: 0, overflowed: 0, flushed: 4, flushes: 1, held: 0 });
});

test("frame_seq wraps at 2^32 without a gap", () => {
  const buffer = new JitterBuffer();
  for (const seq of [4294967294, 4294967295, 0, 1]) buffer.push(frame(seq), 0);
  assert.deepEqual(slots(buffer, 4, 0), ["f4294967294", "f4294967295", "f0", "f1"]);
  assert.equal(buffer.stats.lost, 0);
});

// -- the pacer -----------------------------------------------------------------------------------

/** Run a pacer whose timer fires `late(k)` ms after it is due; the times items were sent. */
function paced(items: number, late: (k: number) => number, options = {}): { times: number[]; pacer: Pacer<number> } {
  const pacer = new Pacer<number>(options);
  const times: number[] = [];
  let now = 1000;
  let made = 0;
  for (let k = 0; times.length < items && k < 100 * items; k++) {
    now = Math.max(now, pacer.nextAt()) + late(k);
    // The producer makes one item every 20 ms, on time.
    while (made * FRAME_MS <= now - 1000 && made < items) pacer.push(made++);
    if (pacer.tick(now) !== undefined) times.push(now);
  }
  return { times, pacer };
}

test("the pacer sends one item a slot on an absolute schedule: late timers do not drift it", () => {
  const jitter = (k: number) => [0, 3, 17, 1, 9, 0, 14][k % 7] as number;
  const { times, pacer } = paced(500, jitter);
  assert.equal(times.length, 500);
  times.forEach((t, k) => {
    assert.ok(t - (1000 + k * FRAME_MS) < FRAME_MS, `send ${k} at ${t}: no drift`);
    if (k > 0) assert.ok(t - (times[k - 1] as number) >= CAPTURE_MIN_GAP_MS, `send ${k}: no burst`);
  });
  assert.equal(pacer.stats.restarts, 0);
});

test("a slot late by the restart bound is caught up without a burst; one past it restarts", () => {
  const caught = paced(10, (k) => (k === 3 ? CAPTURE_RESTART_MS : 0));
  assert.equal(caught.pacer.stats.restarts, 0);
  const gaps = caught.times.slice(1).map((t, k) => t - (caught.times[k] as number));
  assert.ok(Math.min(...gaps) >= CAPTURE_MIN_GAP_MS, `gaps ${gaps.join(",")}`);
  assert.equal(caught.times[9], 1000 + 9 * FRAME_MS, "back on the schedule");

  const restarted = paced(10, (k) => (k === 3 ? CAPTURE_RESTART_MS + 1 : 0));
  assert.equal(restarted.pacer.stats.restarts, 1);
  assert.equal(restarted.times[4], (restarted.times[3] as number) + FRAME_MS, "the schedule goes on from the late slot");
});

test("the pacer's queue holds its bound (N) and drops the oldest of N + 1", () => {
  const pacer = new Pacer<number>();
  for (let i = 0; i < CAPTURE_QUEUE_MAX_FRAMES; i++) assert.equal(pacer.push(i), undefined);
  assert.equal(pacer.push(CAPTURE_QUEUE_MAX_FRAMES), 0, "the oldest is dropped");
  assert.deepEqual(pacer.stats, { sent: 0, overflowed: 1, restarts: 0, queued: CAPTURE_QUEUE_MAX_FRAMES });
  assert.equal(pacer.tick(0), 1);
  assert.equal(pacer.tick(FRAME_MS - 1), undefined, "not before the next slot");
  assert.equal(pacer.tick(FRAME_MS), 2);
  assert.equal(pacer.clear(), CAPTURE_QUEUE_MAX_FRAMES - 2);
});
