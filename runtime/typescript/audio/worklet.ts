/// <reference lib="dom" preserve="true" />
/**
 * The two AudioWorklet processors of capture and playback, shipped as source in the package and
 * loaded from a Blob URL (no network; a page with a Content-Security-Policy must allow `blob:`
 * scripts). They only move samples: every rule (resampling, framing, pacing, the jitter buffer)
 * runs on the main thread, in the modules Node runs too.
 *
 * - `voxwire-capture` posts its input (mono: the node mixes down) to the main thread in blocks of
 *   about 10 ms, each a transferred `Float32Array`.
 * - `voxwire-playback` plays what the main thread posts (`Float32Array` blocks) from a ring of
 *   `processorOptions.capacity` samples and silence when the ring is empty; `"flush"` empties the
 *   ring at once, `"end"` says the ring may run dry (an utterance ended). About every 10 ms, and
 *   at once after a flush, it posts `{ taken, cleared, underruns }`: samples played from the ring,
 *   samples a flush dropped, and the times it ran dry in the middle of an utterance.
 */

export const CAPTURE_PROCESSOR = "voxwire-capture";
export const PLAYBACK_PROCESSOR = "voxwire-playback";

const SOURCE = `
const QUANTUM = 128;
const BLOCK = QUANTUM * Math.ceil(sampleRate / 100 / QUANTUM);

class VoxwireCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.block = new Float32Array(BLOCK);
    this.filled = 0;
    this.stopped = false;
    this.port.onmessage = () => { this.stopped = true; };
  }
  process(inputs) {
    if (this.stopped) return false;
    const channel = inputs[0] && inputs[0][0];
    if (channel === undefined) return true;
    let offset = 0;
    while (offset < channel.length) {
      const take = Math.min(BLOCK - this.filled, channel.length - offset);
      this.block.set(channel.subarray(offset, offset + take), this.filled);
      this.filled += take;
      offset += take;
      if (this.filled === BLOCK) {
        this.port.postMessage(this.block, [this.block.buffer]);
        this.block = new Float32Array(BLOCK);
        this.filled = 0;
      }
    }
    return true;
  }
}

class VoxwirePlayback extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.ring = new Float32Array(options.processorOptions.capacity);
    this.read = 0;
    this.size = 0;
    this.taken = 0;
    this.cleared = 0;
    this.underruns = 0;
    this.live = false;
    this.ending = false;
    this.stopped = false;
    this.since = 0;
    this.port.onmessage = (event) => this.receive(event.data);
  }
  receive(data) {
    if (data === "flush") {
      this.cleared += this.size;
      this.size = 0;
      this.live = this.ending = false;
      this.report();
    } else if (data === "end") {
      this.ending = true;
    } else if (data === "stop") {
      this.stopped = true;
    } else {
      const ring = this.ring;
      const room = Math.min(data.length, ring.length - this.size);
      for (let i = 0; i < room; i++) ring[(this.read + this.size + i) % ring.length] = data[i];
      this.size += room;
      this.cleared += data.length - room;
      if (room > 0) {
        this.live = true;
        this.ending = false;
      }
    }
  }
  report() {
    this.since = 0;
    this.port.postMessage({ taken: this.taken, cleared: this.cleared, underruns: this.underruns });
  }
  process(inputs, outputs) {
    if (this.stopped) return false;
    const out = outputs[0][0];
    const ring = this.ring;
    const n = Math.min(out.length, this.size);
    for (let i = 0; i < n; i++) out[i] = ring[(this.read + i) % ring.length];
    out.fill(0, n);
    this.read = (this.read + n) % ring.length;
    this.size -= n;
    this.taken += n;
    if (n < out.length && this.live) {
      if (!this.ending) this.underruns++;
      this.live = this.ending = false;
    }
    this.since += out.length;
    if (this.since >= BLOCK) this.report();
    return true;
  }
}

registerProcessor("${CAPTURE_PROCESSOR}", VoxwireCapture);
registerProcessor("${PLAYBACK_PROCESSOR}", VoxwirePlayback);
`;

const loaded = /* @__PURE__ */ new WeakMap<BaseAudioContext, Promise<void>>();

/** Load both processors into `context`'s AudioWorklet, once per context. */
export function loadWorklet(context: BaseAudioContext): Promise<void> {
  let loading = loaded.get(context);
  if (loading === undefined) {
    const url = URL.createObjectURL(new Blob([SOURCE], { type: "text/javascript" }));
    loading = context.audioWorklet.addModule(url).finally(() => URL.revokeObjectURL(url));
    loaded.set(context, loading);
    loading.catch(() => loaded.delete(context));
  }
  return loading;
}
