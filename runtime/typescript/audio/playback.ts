/// <reference lib="dom" preserve="true" />
/**
 * The gateway's frames to the speakers: `startPlayback(client)`.
 *
 * Frames go into a `JitterBuffer` as they arrive; each 20 ms slot it gives (a frame, or silence
 * where one is concealed) is converted from 16 kHz to the context's rate by one `Resampler` and
 * handed to an AudioWorklet that plays it. The player keeps `PLAYBACK_LEAD_MS` handed to the
 * worklet ahead of what it plays (an utterance starts with that much silence), and asks the
 * jitter buffer for the next slot each time the worklet has played 20 ms more, so the audio
 * device's clock paces the slots. On the spec's flush events (`PLAYBACK_FLUSH_TYPES`: spec
 * decision playback-flush-events) the jitter buffer and the worklet drop everything at once.
 */
import {
  FRAME_MS,
  PCM_BYTES_PER_FRAME,
  PLAYBACK_FLUSH_TYPES,
  PLAYBACK_LEAD_MS,
  SAMPLE_RATE_HZ,
} from "../ovp/constants.js";
import type { AudioFrame } from "../ovp/frames.js";
import { JitterBuffer, type JitterStats } from "./jitter.js";
import { pcm16ToFloat } from "./pcm.js";
import { Resampler } from "./resample.js";
import { PLAYBACK_PROCESSOR, loadWorklet } from "./worklet.js";

/** A server event that flushes the player. */
export type FlushType = (typeof PLAYBACK_FLUSH_TYPES)[number];

/** What the player needs of a client (`OvpClient` has it). */
export interface PlaybackClient {
  /** Call `handler` with every audio frame of the gateway. */
  onAudio(handler: (frame: AudioFrame) => void): unknown;
  /** Call `handler` on every event of `type`. */
  on(type: FlushType, handler: () => void): unknown;
  /** Resolves when the session is over: the player stops then. */
  readonly ended: Promise<unknown>;
}

export interface PlaybackOptions {
  /** The context to play in; by default a new `AudioContext` (closed by `stop()`). */
  readonly context?: AudioContext;
}

/** The jitter buffer's counts, and the worklet's. */
export interface PlaybackStats extends JitterStats {
  /** Times the audio device found nothing to play in the middle of an utterance (a gap). */
  readonly underruns: number;
}

/** A running player. */
export interface Playback {
  readonly context: AudioContext;
  /** The player's output (connected to `context.destination`): connect it elsewhere to tap it. */
  readonly output: AudioNode;
  /** Resolves once the worklet is loaded (frames received before wait in the jitter buffer). */
  readonly ready: Promise<void>;
  readonly stats: PlaybackStats;
  /** Drop everything not yet heard, as the flush events do. */
  flush(): void;
  /** Stop: nothing more is played; a context `startPlayback` made is closed. */
  stop(): Promise<void>;
}

interface Report {
  readonly taken: number;
  readonly cleared: number;
  readonly underruns: number;
}

/**
 * Play the gateway's audio frames from `client` until `stop()` or the session's end. Returns at
 * once; `ready` rejects if the worklet cannot load.
 */
export function startPlayback(client: PlaybackClient, options: PlaybackOptions = {}): Playback {
  return new Player(client, options);
}

class Player implements Playback {
  readonly context: AudioContext;
  readonly output: GainNode;
  readonly ready: Promise<void>;
  private readonly options: PlaybackOptions;
  private readonly buffer = new JitterBuffer();
  private readonly resampler: Resampler;
  private readonly leadSamples: number;
  private node: AudioWorkletNode | null = null;
  /** Samples handed to the worklet, and what it last reported. */
  private posted = 0;
  private report: Report = { taken: 0, cleared: 0, underruns: 0 };
  private talking = false;
  private stopping: Promise<void> | null = null;

  constructor(client: PlaybackClient, options: PlaybackOptions) {
    this.options = options;
    this.context = options.context ?? new AudioContext();
    this.resampler = new Resampler(SAMPLE_RATE_HZ, this.context.sampleRate);
    this.leadSamples = Math.round((PLAYBACK_LEAD_MS * this.context.sampleRate) / 1000);
    this.output = this.context.createGain();
    this.output.connect(this.context.destination);
    client.onAudio((frame) => this.receive(frame));
    for (const type of PLAYBACK_FLUSH_TYPES) client.on(type, () => this.flush());
    client.ended.then(
      () => this.stop(),
      () => this.stop(),
    );
    this.ready = loadWorklet(this.context).then(() => this.open());
    this.ready.catch(() => undefined); // the caller learns it from `ready`
  }

  get stats(): PlaybackStats {
    return { ...this.buffer.stats, underruns: this.report.underruns };
  }

  flush(): void {
    if (this.stopping !== null) return;
    this.buffer.flush();
    this.resampler.reset();
    this.talking = false;
    this.node?.port.postMessage("flush");
  }

  stop(): Promise<void> {
    this.stopping ??= this.close();
    return this.stopping;
  }

  private async close(): Promise<void> {
    const node = this.node;
    if (node !== null) {
      node.port.onmessage = null;
      node.port.postMessage("stop");
      node.disconnect();
    }
    this.output.disconnect();
    if (this.options.context === undefined) await this.context.close();
  }

  private open(): void {
    if (this.stopping !== null) return;
    const capacity = 4 * (this.leadSamples + Math.ceil((FRAME_MS * this.context.sampleRate) / 1000));
    const node = new AudioWorkletNode(this.context, PLAYBACK_PROCESSOR, {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: { capacity },
    });
    node.port.onmessage = (event: MessageEvent<Report>) => {
      this.report = event.data;
      this.feed();
    };
    node.connect(this.output);
    this.node = node;
    if (this.context.state === "suspended") this.context.resume().catch(() => undefined);
  }

  private receive(frame: AudioFrame): void {
    if (this.stopping !== null) return;
    this.buffer.push(frame, performance.now());
    this.feed();
  }

  /** Hand the worklet slots until it holds the lead plus one slot. */
  private feed(): void {
    const node = this.node;
    if (node === null || this.stopping !== null) return;
    let held = this.posted - this.report.taken - this.report.cleared;
    while (held <= this.leadSamples) {
      const slot = this.buffer.next(performance.now());
      if (slot.kind === "idle") {
        if (this.talking) {
          this.post(node, this.resampler.flush());
          node.port.postMessage("end");
          this.talking = false;
        }
        return;
      }
      if (!this.talking) {
        this.talking = true;
        this.post(node, new Float32Array(Math.max(0, this.leadSamples - held)));
      }
      const pcm = slot.kind === "frame" ? slot.frame.pcm : SILENCE;
      this.post(node, this.resampler.push(pcm16ToFloat(pcm)));
      held = this.posted - this.report.taken - this.report.cleared;
    }
  }

  private post(node: AudioWorkletNode, samples: Float32Array): void {
    if (samples.length === 0) return;
    this.posted += samples.length;
    node.port.postMessage(samples, [samples.buffer]);
  }
}

const SILENCE = /* @__PURE__ */ new Uint8Array(PCM_BYTES_PER_FRAME);
