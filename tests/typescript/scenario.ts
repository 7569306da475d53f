// One OVP call through the TypeScript client, the same in a browser and in Node: stream a tone as
// 20 ms frames, take the echoed frames and the agent's events, survive the drop the test causes
// (the gateway replays what was lost), then end the session.
import { OvpClient, type SessionOutcome, type WebSocketConstructor } from "voxwire/ovp/client";
import { PCM_BYTES_PER_FRAME, SAMPLE_RATE_HZ, SAMPLES_PER_FRAME } from "voxwire/ovp";

export const FRAMES = 25;
export const TONE_HZ = 440;

export interface ScenarioOptions {
  readonly url: string;
  readonly sessionId: string;
  readonly token: string;
  readonly WebSocket?: WebSocketConstructor;
}

export interface ScenarioResult {
  readonly startSeq: number;
  readonly protocolVersion: string;
  readonly deltas: readonly string[];
  readonly seqs: readonly number[];
  readonly framesIn: number;
  readonly firstEchoIsTheTone: boolean;
  readonly outcome: { readonly reason: string | null; readonly code: string | null; readonly endSeq: number | null };
  readonly problems: readonly string[];
}

/** Frame `index` of a 440 Hz tone, 16 kHz PCM16LE, as the client sends it. */
export function toneFrame(index: number): Uint8Array {
  const pcm = new Uint8Array(PCM_BYTES_PER_FRAME);
  const view = new DataView(pcm.buffer);
  for (let i = 0; i < SAMPLES_PER_FRAME; i++) {
    const t = (index * SAMPLES_PER_FRAME + i) / SAMPLE_RATE_HZ;
    view.setInt16(2 * i, Math.round(8000 * Math.sin(2 * Math.PI * TONE_HZ * t)), true);
  }
  return pcm;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

export async function runScenario(options: ScenarioOptions): Promise<ScenarioResult> {
  const client = new OvpClient({
    url: options.url,
    sessionId: options.sessionId,
    token: options.token,
    ...(options.WebSocket !== undefined ? { WebSocket: options.WebSocket } : {}),
  });
  const deltas: string[] = [];
  const seqs: number[] = [];
  let framesIn = 0;
  let firstEchoIsTheTone = false;
  client.on("agent.thinking", (event) => {
    deltas.push(event.delta);
    seqs.push(event.seq);
  });
  client.onAudio((frame) => {
    if (framesIn === 0) firstEchoIsTheTone = frame.pcm.every((byte, i) => byte === toneFrame(0)[i]);
    framesIn++;
  });
  const start = await client.connect();
  for (let i = 0; i < FRAMES; i++) {
    client.sendAudio(toneFrame(i));
    await sleep(20);
  }
  await until(() => deltas.length >= 3 && client.live, 20_000, "the three events and a live link");
  client.send("agent.input", { source: "developer_inject", text: "done" });
  const outcome: SessionOutcome = await client.ended;
  return {
    startSeq: start.seq,
    protocolVersion: start.protocol_version,
    deltas,
    seqs,
    framesIn,
    firstEchoIsTheTone,
    outcome: { reason: outcome.end?.reason ?? null, code: outcome.code, endSeq: outcome.end?.seq ?? null },
    problems: client.problems.map((problem) => problem.message),
  };
}
