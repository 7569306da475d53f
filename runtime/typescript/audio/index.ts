/**
 * Audio for OVP (`voxwire/audio`): the browser's microphone to the gateway and the gateway's
 * frames to the speakers, and the pure parts they are made of, which run in Node too (bots, SIP
 * bridges): no DOM, no dependency.
 *
 * - `Resampler`: an exact, stateful sample-rate converter, the same to the bit however the input
 *   is cut into blocks (and the same as the Python binding's `voxwire.audio.Resampler`);
 * - `floatToPcm16`, `pcm16ToFloat`, `Framer`: PCM16LE and 640-byte OVP frames;
 * - `JitterBuffer`: the player's jitter buffer, sans-I/O (spec decision playback-jitter-buffer);
 * - `Pacer`: the capture's paced sender, sans-I/O (spec decision paced-capture);
 * - `startCapture(client)`: microphone -> AudioWorklet -> 16 kHz frames -> `client.sendAudio`;
 * - `startPlayback(client)`: gateway frames -> jitter buffer -> speakers, flushed on the spec's
 *   flush events (spec decision playback-flush-events).
 */
export { type Capture, type CaptureClient, type CaptureOptions, type CaptureStats, startCapture } from "./capture.js";
export { type BufferedFrame, JitterBuffer, type JitterBufferOptions, type JitterStats, type Slot } from "./jitter.js";
export { Pacer, type PacerOptions, type PacerStats } from "./pacer.js";
export { Framer, floatToPcm16, pcm16ToFloat, toPcm16Value } from "./pcm.js";
export {
  type FlushType,
  type Playback,
  type PlaybackClient,
  type PlaybackOptions,
  type PlaybackStats,
  startPlayback,
} from "./playback.js";
export { RateError, Resampler } from "./resample.js";
