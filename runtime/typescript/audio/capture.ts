/// <reference lib="dom" preserve="true" />
/**
 * The microphone to the gateway: `startCapture(client)`.
 *
 * A `MediaStream` (the microphone by default) goes through an AudioWorklet to the main thread,
 * where a `Resampler` converts it from the context's rate to 16 kHz, a `Framer` cuts it into
 * 640-byte PCM16LE frames and a `Pacer` sends one frame per 20 ms slot through the client's
 * `sendAudio` (spec decision paced-capture). The client stamps `frame_seq`, one per frame sent;
 * the capture gives each frame its `rtp_timestamp`, 320 more for every frame made, so a frame
 * dropped before sending shows as a jump of the media clock.
 */
import { RTP_TIMESTAMP_MODULUS, SAMPLE_RATE_HZ, SAMPLES_PER_FRAME } from "../ovp/constants.js";
import { Pacer } from "./pacer.js";
import { Framer } from "./pcm.js";
import { Resampler } from "./resample.js";
import { type Clock, SYSTEM_CLOCK } from "../runtime/clock.js";
import { CAPTURE_PROCESSOR, loadWorklet } from "./worklet.js";

/** What the capture needs of a client (`OvpClient` has it). */
export interface CaptureClient {
  /** The session's `session.start`, `null` before: frames made before it are not sent. */
  readonly start: unknown;
  /** How the session ended, `null` while it runs. */
  readonly outcome: unknown;
  /** Resolves when the session is over: the capture stops then. */
  readonly ended: Promise<unknown>;
  /** Send one frame; `false` when it was dropped (back-pressure, or the link is down). */
  sendAudio(pcm: Uint8Array, flags?: number, rtpTimestamp?: number): boolean;
}

export interface CaptureOptions {
  /** The audio to send; by default the microphone, from `getUserMedia` (stopped by `stop()`). */
  readonly stream?: MediaStream;
  /** The context to run in; by default a new `AudioContext` (closed by `stop()`). */
  readonly context?: AudioContext;
  /** The clock of the sender's schedule: `SYSTEM_CLOCK` by default. */
  readonly clock?: Clock;
}

/** What became of the frames (the counts only grow, `queued` excepted). */
export interface CaptureStats {
  /** Frames made from the stream (20 ms each). */
  readonly captured: number;
  /** Frames the client wrote. */
  readonly sent: number;
  /** Frames the client dropped: `sendAudio` returned false (its back-pressure bound, or the link down). */
  readonly dropped: number;
  /** Frames dropped before sending: `CAPTURE_QUEUE_MAX_FRAMES` waited already. */
  readonly overflowed: number;
  /** Frames made before the session started (never sent). */
  readonly skipped: number;
  /** Times the sender fell more than `CAPTURE_RESTART_MS` behind and restarted its schedule. */
  readonly restarts: number;
  /** Frames waiting for their slot now. */
  readonly queued: number;
}

/** A running capture. */
export interface Capture {
  readonly context: AudioContext;
  readonly stream: MediaStream;
  /** The stream's node in `context`: connect an `AnalyserNode` to it for a level meter. */
  readonly source: MediaStreamAudioSourceNode;
  readonly stats: CaptureStats;
  /** Stop: nothing more is sent; what `startCapture` opened (microphone, context) is closed. */
  stop(): Promise<void>;
}

interface Queued {
  readonly pcm: Uint8Array;
  readonly rtp: number;
}

/** The microphone's constraints: one channel, with the browser's echo cancellation. */
const MICROPHONE: MediaTrackConstraints = { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true };

/**
 * Capture `options.stream` (the microphone by default) and send it through `client` as 20 ms
 * frames until `stop()` or the session's end. Rejects when the microphone is refused or the
 * worklet cannot load; the context should be created (or resumed) in a user gesture.
 */
export async function startCapture(client: CaptureClient, options: CaptureOptions = {}): Promise<Capture> {
  const context = options.context ?? new AudioContext();
  let stream = options.stream;
  try {
    stream ??= await navigator.mediaDevices.getUserMedia({ audio: MICROPHONE });
    await loadWorklet(context);
  } catch (error) {
    if (options.stream === undefined) stream?.getTracks().forEach((track) => track.stop());
    if (options.context === undefined) await context.close();
    throw error;
  }
  return new Running(client, context, stream, options);
}

class Running implements Capture {
  readonly context: AudioContext;
  readonly stream: MediaStream;
  private readonly client: CaptureClient;
  private readonly options: CaptureOptions;
  private readonly clock: Clock;
  private readonly resampler: Resampler;
  private readonly framer = new Framer();
  private readonly pacer = new Pacer<Queued>();
  readonly source: MediaStreamAudioSourceNode;
  private readonly node: AudioWorkletNode;
  private readonly rtpStart: number;
  private timer: unknown = null;
  private stopping: Promise<void> | null = null;
  private counts = { captured: 0, sent: 0, dropped: 0, skipped: 0 };

  constructor(client: CaptureClient, context: AudioContext, stream: MediaStream, options: CaptureOptions) {
    this.client = client;
    this.context = context;
    this.stream = stream;
    this.options = options;
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.resampler = new Resampler(context.sampleRate, SAMPLE_RATE_HZ);
    // The media clock starts from the capture's own clock, so a second capture goes on from here.
    this.rtpStart = Math.floor((this.clock.now() * SAMPLE_RATE_HZ) / 1000) % RTP_TIMESTAMP_MODULUS;
    this.source = context.createMediaStreamSource(stream);
    this.node = new AudioWorkletNode(context, CAPTURE_PROCESSOR, {
      numberOfInputs: 1,
      numberOfOutputs: 0,
      channelCount: 1,
      channelCountMode: "explicit",
      channelInterpretation: "speakers",
    });
    this.node.port.onmessage = (event: MessageEvent<Float32Array>) => this.take(event.data);
    this.source.connect(this.node);
    if (context.state === "suspended") context.resume().catch(() => undefined);
    client.ended.then(
      () => this.stop(),
      () => this.stop(),
    );
    this.arm();
  }

  get stats(): CaptureStats {
    const pacer = this.pacer.stats;
    return { ...this.counts, overflowed: pacer.overflowed, restarts: pacer.restarts, queued: pacer.queued };
  }

  stop(): Promise<void> {
    this.stopping ??= this.close();
    return this.stopping;
  }

  private async close(): Promise<void> {
    if (this.timer !== null) this.clock.clearTimeout(this.timer);
    this.timer = null;
    this.pacer.clear();
    this.node.port.onmessage = null;
    this.node.port.postMessage("stop");
    this.source.disconnect();
    this.node.disconnect();
    if (this.options.stream === undefined) this.stream.getTracks().forEach((track) => track.stop());
    if (this.options.context === undefined) await this.context.close();
  }

  /** A block from the worklet: resample, frame, queue. */
  private take(block: Float32Array): void {
    if (this.stopping !== null) return;
    for (const pcm of this.framer.push(this.resampler.push(block))) {
      const rtp = (this.rtpStart + this.counts.captured * SAMPLES_PER_FRAME) % RTP_TIMESTAMP_MODULUS;
      this.counts.captured++;
      if (this.client.start === null) this.counts.skipped++;
      else this.pacer.push({ pcm, rtp });
    }
  }

  /** The next slot of the schedule. */
  private arm(): void {
    const wait = Math.max(0, this.pacer.nextAt() - this.clock.now());
    this.timer = this.clock.setTimeout(() => this.tick(), wait);
  }

  private tick(): void {
    this.timer = null;
    if (this.stopping !== null) return;
    const item = this.pacer.tick(this.clock.now());
    if (item !== undefined && this.client.outcome === null) {
      if (this.client.sendAudio(item.pcm, 0, item.rtp)) this.counts.sent++;
      else this.counts.dropped++;
    }
    this.arm();
  }
}
