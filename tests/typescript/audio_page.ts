// A page of tests/test_audio_browser.py: the fake microphone through startCapture to the gateway,
// the gateway's frames through startPlayback, the player's output recorded by a worklet of the
// test's own (each block stamped with its frame on the audio clock).
import { startCapture, startPlayback } from "voxwire/audio";
import { OvpClient } from "voxwire/ovp/client";

export interface AudioRun {
  readonly url: string;
  readonly sessionId: string;
  readonly token: string;
  readonly rate: number;
}

const RECORDER = `
class Recorder extends AudioWorkletProcessor {
  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (channel !== undefined) this.port.postMessage({ frame: currentFrame, data: channel.slice() });
    return true;
  }
}
registerProcessor("test-recorder", Recorder);
`;

interface Block {
  readonly frame: number;
  readonly data: Float32Array;
  /** When the main thread got it. */
  at: number;
}

/** A recorder of what `node` outputs, block by block, each stamped with its audio frame. */
function record(context: AudioContext, node: AudioNode): Block[] {
  const recorder = new AudioWorkletNode(context, "test-recorder", { numberOfInputs: 1, numberOfOutputs: 0, channelCount: 1, channelCountMode: "explicit" });
  const blocks: Block[] = [];
  recorder.port.onmessage = (event: MessageEvent<Block>) => {
    event.data.at = performance.now();
    blocks.push(event.data);
  };
  node.connect(recorder);
  return blocks;
}

/**
 * The blocks joined (base64 of float32), the frame of the first, whether none is missing, and
 * the longest the main thread went without one (ms): the audio thread's stalls, as it sees them.
 */
function joined(blocks: readonly Block[]): { from: number; contiguous: boolean; samples: string; wait: number } {
  const from = blocks[0]?.frame ?? 0;
  const samples = new Float32Array(blocks.reduce((total, block) => total + block.data.length, 0));
  let at = 0;
  let contiguous = true;
  for (const block of blocks) {
    contiguous &&= block.frame === from + at;
    samples.set(block.data, at);
    at += block.data.length;
  }
  const wait = Math.max(0, ...blocks.slice(1).map((block, i) => block.at - (blocks[i] as Block).at));
  return { from, contiguous, samples: base64(samples), wait };
}

/** The main thread's probe: a timer every 5 ms; one that ran more than 5 ms late is a stall. */
const PROBE_MS = 5;

function base64(samples: Float32Array): string {
  const bytes = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(text);
}

export async function runAudio(run: AudioRun): Promise<object> {
  const context = new AudioContext({ sampleRate: run.rate });
  const client = new OvpClient({ url: run.url, sessionId: run.sessionId, token: run.token });
  const sends: number[] = [];
  const send = client.sendAudio.bind(client);
  client.sendAudio = (pcm: Uint8Array, flags?: number, rtp?: number): boolean => {
    sends.push(performance.now());
    return send(pcm, flags, rtp);
  };
  const playback = startPlayback(client, { context });
  const echoes: number[] = [];
  client.onAudio(() => echoes.push(performance.now()));
  await playback.ready;

  await context.audioWorklet.addModule(URL.createObjectURL(new Blob([RECORDER], { type: "text/javascript" })));
  const output = record(context, playback.output);

  let flushFrame: number | null = null;
  client.on("agent.barge_in", () => {
    flushFrame ??= Math.round(context.currentTime * context.sampleRate);
  });
  // The tone as the file holds it: no echo cancellation, noise suppression or gain control
  // (what startCapture asks of the microphone by default would attenuate a steady tone).
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  const stalls: [number, number][] = [];
  let due = performance.now() + PROBE_MS;
  let probing = true;
  const probe = (): void => {
    const now = performance.now();
    if (now - due > PROBE_MS) stalls.push([due, now - due]);
    due = now + PROBE_MS;
    if (probing) setTimeout(probe, PROBE_MS);
  };
  setTimeout(probe, PROBE_MS);
  await client.connect();
  const capture = await startCapture(client, { context, stream });
  const input = record(context, capture.source); // what the capture's worklet gets, too
  const outcome = await client.ended;
  await new Promise((resolve) => setTimeout(resolve, 100)); // the recorder's last blocks
  probing = false;
  stream.getTracks().forEach((track) => track.stop());
  await context.close();
  return {
    sampleRate: context.sampleRate,
    sends,
    echoes,
    stalls,
    capture: capture.stats,
    playback: playback.stats,
    end: outcome.end?.reason ?? null,
    flushFrame,
    output: joined(output),
    input: joined(input),
  };
}
