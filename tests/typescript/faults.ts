// The TypeScript client against the faults of issue 24, the same in a browser and in Node: a
// gateway that lost the session (restart), a black-holed link, a peer that stops reading. Each
// scenario returns what it saw as JSON; the Python test (tests/test_typescript_client_faults.py)
// makes the fault and judges it.
import { OvpClient, SendQueueFull, type WebSocketConstructor } from "voxwire/ovp/client";
import { PCM_BYTES_PER_FRAME } from "voxwire/ovp";

export interface FaultOptions {
  readonly url: string;
  readonly sessionId: string;
  readonly token: string;
  readonly WebSocket?: WebSocketConstructor;
}

export interface Outcome {
  readonly code: string | null;
  readonly detail: string;
  readonly reason: string | null;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(check: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(5);
  }
}

function client(options: FaultOptions): OvpClient {
  return new OvpClient({
    url: options.url,
    sessionId: options.sessionId,
    token: options.token,
    ...(options.WebSocket !== undefined ? { WebSocket: options.WebSocket } : {}),
  });
}

async function outcome(of: OvpClient, ms: number): Promise<Outcome | null> {
  const over = await Promise.race([of.ended, sleep(ms).then(() => null)]);
  return over === null ? null : { code: over.code, detail: over.detail, reason: over.end?.reason ?? null };
}

/**
 * The gateway sends `old 1`..`old 10`; the client says so (agent.input "ten"), the test restarts
 * the gateway under it, and the client resumes to one that no longer holds the session.
 */
export async function restart(options: FaultOptions): Promise<object> {
  const voice = client(options);
  const deltas: string[] = [];
  let starts = 0;
  let droppedAt: number | null = null;
  voice.on("session.start", () => starts++);
  voice.on("agent.thinking", (event) => {
    deltas.push(event.delta);
    if (deltas.length === 10) void voice.send("agent.input", { source: "developer_inject", text: "ten" });
  });
  await voice.connect();
  const watch = setInterval(() => {
    if (droppedAt === null && voice.state === "dropped") droppedAt = performance.now();
  }, 1);
  const over = await outcome(voice, 20_000);
  clearInterval(watch);
  const overAt = performance.now();
  return {
    deltas,
    starts,
    outcome: over,
    msFromDropToOutcome: droppedAt === null || over === null ? null : Math.round(overAt - droppedAt),
    reconnects: voice.reconnects,
  };
}

/**
 * The gateway sends a tick every 100 ms; after "ready" the test black-holes the link. The client
 * must notice the silence, resume on a new connection, get the ticks it missed, and end.
 */
export async function blackHole(options: FaultOptions): Promise<object> {
  const voice = client(options);
  // The ticks' own numbers ("tick n"): the gateway's 5 s events take seqs between them.
  const seqs: number[] = [];
  voice.on("agent.thinking", (event) => seqs.push(Number(event.delta.replace("tick ", ""))));
  await voice.connect();
  await voice.send("agent.input", { source: "developer_inject", text: "ready" });
  const before = performance.now();
  let downAt: number | null = null;
  const watch = setInterval(() => {
    if (downAt === null && voice.state === "dropped") downAt = performance.now();
  }, 1);
  await until(() => voice.reconnects >= 1 && voice.live, 30_000, "a resumed link");
  clearInterval(watch);
  const resumedWith = seqs.length;
  await until(() => seqs.length >= resumedWith + 5, 10_000, "ticks on the resumed link");
  await voice.send("agent.input", { source: "developer_inject", text: "done" });
  return {
    seqs,
    reconnects: voice.reconnects,
    msToDown: downAt === null ? null : Math.round(downAt - before),
    outcome: await outcome(voice, 10_000),
  };
}

/**
 * After "ready" the test stops the proxy reading (a stalled reader): audio floods in until the
 * client drops frames, then events until its queue is full. What bufferedAmount reached is kept.
 */
export async function stalledReader(options: FaultOptions): Promise<object> {
  const voice = client(options);
  await voice.connect();
  await voice.send("agent.input", { source: "developer_inject", text: "ready" });
  await sleep(300); // the test stalls the proxy as the gateway reads "ready"
  const pcm = new Uint8Array(PCM_BYTES_PER_FRAME);
  let maxBuffered = 0;
  let frames = 0;
  let firstDropAt: number | null = null;
  const started = performance.now();
  while (firstDropAt === null && frames < 100_000 && performance.now() - started < 8_000) {
    for (let i = 0; i < 32 && firstDropAt === null; i++) {
      const written = voice.sendAudio(pcm) as boolean | undefined;
      frames++;
      maxBuffered = Math.max(maxBuffered, voice.bufferedAmount);
      if (written === false) firstDropAt = frames;
    }
    await sleep(0);
  }
  let queueFull = false;
  let sends = 0;
  const pending: Promise<unknown>[] = [];
  while (!queueFull && sends <= 2_000) {
    try {
      pending.push(voice.send("agent.input", { source: "developer_inject", text: `event ${sends}` }));
      sends++;
      maxBuffered = Math.max(maxBuffered, voice.bufferedAmount);
    } catch (exc) {
      if (!(exc instanceof SendQueueFull)) throw exc;
      queueFull = true;
    }
  }
  const state = voice.state;
  const queued = voice.queuedEvents;
  voice.close();
  const settled = await Promise.allSettled(pending);
  return {
    frames,
    firstDropAt,
    audioDropped: voice.audioDropped,
    maxBuffered,
    sends,
    queued,
    queueFull,
    stateWhenFull: state,
    failedWithTheSession: settled.filter((s) => s.status === "rejected").length,
  };
}

export const SCENARIOS: { readonly [name: string]: (options: FaultOptions) => Promise<object> } = {
  restart,
  blackHole,
  stalledReader,
};
