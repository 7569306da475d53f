// The OVP client's rules, against a scripted WebSocket and a test clock: the seq and direction
// rules, replayed duplicates dropped, the resume, a session.start on a resumed link (the gateway
// lost the session), the idle bound, the back-pressure rule and the send queue's bound.
import assert from "node:assert/strict";
import { test } from "node:test";

import WebSocket from "ws";

import * as ovp from "voxwire/ovp";
import { type Clock, OvpClient, SendQueueFull, SessionFailed, SessionStateError, type WebSocketConstructor } from "voxwire/ovp/client";

const SESSION = "ovps_scripted_1";
const TS = "2026-05-14T12:35:30.002Z";

type Listener = (event: never) => void;

class ScriptedSocket {
  static made: ScriptedSocket[] = [];
  binaryType = "blob";
  readyState = 0;
  bufferedAmount = 0;
  readonly sent: (string | Uint8Array)[] = [];
  readonly closes: number[] = [];
  readonly protocol: string;
  private readonly listeners = new Map<string, Listener[]>();

  constructor(
    readonly url: string,
    protocols: string[],
  ) {
    this.protocol = protocols[0] ?? "";
    ScriptedSocket.made.push(this);
  }

  addEventListener(type: string, listener: Listener): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  send(data: string | Uint8Array): void {
    this.sent.push(data);
  }

  close(code = 1000): void {
    this.closes.push(code);
  }

  emit(type: string, event: unknown): void {
    for (const listener of this.listeners.get(type) ?? []) (listener as (event: unknown) => void)(event);
  }

  open(): void {
    this.readyState = 1;
    this.emit("open", {});
  }

  drop(): void {
    this.readyState = 3;
    this.emit("close", { code: 1006, reason: "" });
  }

  server(type: string, seq: number, fields: object = {}): void {
    this.emit("message", { data: JSON.stringify({ type, seq, ts: TS, session_id: SESSION, ...fields }) });
  }

  texts(): { type: string; seq: number; [key: string]: unknown }[] {
    return this.sent.filter((data): data is string => typeof data === "string").map((text) => JSON.parse(text));
  }
}

/** Time that moves only when a test says: `advance(ms)` fires the timers due by then. */
class TestClock implements Clock {
  time = 1000;
  private nextId = 1;
  private readonly timers = new Map<number, { at: number; callback: () => void }>();

  now(): number {
    return this.time;
  }

  setTimeout(callback: () => void, ms: number): unknown {
    const id = this.nextId++;
    this.timers.set(id, { at: this.time + ms, callback });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  async advance(ms: number): Promise<void> {
    const until = this.time + ms;
    for (;;) {
      let first: [number, { at: number; callback: () => void }] | undefined;
      for (const entry of this.timers) if (entry[1].at <= until && (first === undefined || entry[1].at < first[1].at)) first = entry;
      if (first === undefined) break;
      this.timers.delete(first[0]);
      this.time = first[1].at;
      first[1].callback();
      await settled();
    }
    this.time = until;
  }

  get pending(): number {
    return this.timers.size;
  }
}

const settled = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const START = {
  protocol_version: "1.0",
  call: { call_id: "c1", from: "+14155551234", to: "+18005550100", direction: "inbound", secure: true },
  agent: { agent_id: "a1", name: "Desk", instructions: "Help.", model: "m", voice_id: "v1", language: "en-US", tools: [] },
  audio: { sample_rate_hz: 16000, sample_width_bits: 16, channels: 1, frame_ms: 20 },
};
const INPUT = { source: "developer_inject", text: "one" } as const;
const PCM = new Uint8Array(ovp.PCM_BYTES_PER_FRAME);

interface Made {
  client: OvpClient;
  clock: TestClock;
  socket: () => ScriptedSocket;
}

function scripted(): Made {
  ScriptedSocket.made = [];
  const clock = new TestClock();
  const client = new OvpClient({
    url: "ws://127.0.0.1:1",
    sessionId: SESSION,
    token: "t",
    WebSocket: ScriptedSocket as unknown as WebSocketConstructor,
    clock,
  });
  return { client, clock, socket: () => ScriptedSocket.made[ScriptedSocket.made.length - 1] as ScriptedSocket };
}

async function started(): Promise<Made> {
  const made = scripted();
  const start = made.client.connect();
  await settled();
  made.socket().open();
  made.socket().server("session.start", 0, START);
  await start;
  return made;
}

/** The link dropped and the client reconnected (after its first backoff) and resumed. */
async function resumed(made: Made): Promise<ScriptedSocket> {
  const first = made.socket();
  first.drop();
  assert.equal(made.client.state, "dropped");
  await made.clock.advance(ovp.RECONNECT_BACKOFF_INITIAL_MS);
  assert.notEqual(made.socket(), first, "a new connection");
  made.socket().open();
  assert.equal(made.client.state, "live");
  return made.socket();
}

test("the client offers the alias and stamps seq, ts and session_id", async () => {
  const { client, socket } = await started();
  assert.equal(socket().protocol, ovp.SUBPROTOCOL_ALIAS);
  assert.match(socket().url, /\/voice\/ws\/ovps_scripted_1\?token=t$/);
  const one = await client.send("agent.input", INPUT);
  await client.send("agent.input", { source: "developer_inject", text: "two" });
  assert.equal(one.seq, 0);
  assert.deepEqual(socket().texts().map((m) => m.seq), [0, 1]);
  assert.equal(socket().texts()[0]?.type, "agent.input", "the envelope comes first");
});

test("the state is the spec's client machine", async () => {
  const made = scripted();
  assert.equal(made.client.state, "idle");
  assert.throws(() => made.client.send("agent.input", INPUT), SessionStateError);
  const start = made.client.connect();
  await settled();
  made.socket().open();
  assert.equal(made.client.state, "starting");
  made.socket().server("session.start", 0, START);
  await start;
  assert.equal(made.client.state, "live");
  await resumed(made);
  made.client.close();
  assert.equal(made.client.state, "over");
  assert.equal(made.clock.pending, 0, "no timer outlives the session");
});

test("a replayed duplicate and another session's event are not delivered", async () => {
  const { client, socket } = await started();
  const deltas: string[] = [];
  client.on("agent.thinking", (event) => deltas.push(event.delta));
  socket().server("agent.thinking", 1, { turn_id: "t", delta: "a" });
  socket().server("agent.thinking", 1, { turn_id: "t", delta: "again" });
  socket().server("agent.thinking", 2, { turn_id: "t", delta: "b", session_id: "ovps_other" });
  socket().server("agent.thinking", 3, { turn_id: "t", delta: "c" });
  assert.deepEqual(deltas, ["a", "c"]);
  assert.equal(client.problems.length, 1);
  assert.match(client.problems[0]?.message ?? "", /another session/);
});

test("a dropped link is resumed with the last server seq, and the replay delivered once", async () => {
  const made = await started();
  const deltas: string[] = [];
  made.client.on("agent.thinking", (event) => deltas.push(event.delta));
  made.socket().server("agent.thinking", 4, { turn_id: "t", delta: "a" });
  const socket = await resumed(made);
  const resume = socket.texts()[0];
  assert.deepEqual([resume?.type, resume?.["last_server_seq"]], ["session.resume", 4]);
  socket.server("agent.thinking", 4, { turn_id: "t", delta: "a" });
  socket.server("agent.thinking", 5, { turn_id: "t", delta: "b" });
  assert.deepEqual(deltas, ["a", "b"]);
  assert.equal(made.client.reconnects, 1);
  made.client.close();
});

test("a session.start on a resumed link is the loss of the session, never a continuation", async () => {
  const made = await started();
  const deltas: string[] = [];
  made.client.on("agent.thinking", (event) => deltas.push(event.delta));
  for (let seq = 1; seq <= 10; seq++) made.socket().server("agent.thinking", seq, { turn_id: "t", delta: `old ${seq}` });
  const socket = await resumed(made);
  socket.server("session.start", 0, START); // a restarted gateway starts the session anew
  for (let seq = 1; seq <= 15; seq++) socket.server("agent.thinking", seq, { turn_id: "t", delta: `new ${seq}` });
  const outcome = await made.client.ended;
  assert.equal(outcome.code, ovp.ErrorCode.OVP_RESUME_EXPIRED);
  assert.match(outcome.detail, /started the session anew .* after seq 10 are lost/);
  assert.deepEqual(deltas, Array.from({ length: 10 }, (_, i) => `old ${i + 1}`), "nothing of the new session");
  assert.deepEqual(socket.closes, [1000]);
  await assert.rejects(Promise.resolve().then(() => made.client.send("agent.input", INPUT)), SessionFailed);
});

test("a refusal on a resumed link ends the session whatever its seq", async () => {
  const made = await started();
  made.socket().server("agent.thinking", 3, { turn_id: "t", delta: "a" });
  const socket = await resumed(made);
  socket.server("error", 0, { code: "OVP_AUTH_FAILED", message: "token expired", recoverable: false });
  assert.equal((await made.client.ended).code, ovp.ErrorCode.OVP_AUTH_FAILED);
  socket.drop();
  assert.equal(ScriptedSocket.made.length, 2, "no reconnect into the same refusal");
});

test("a link silent for longer than the idle bound is declared down and resumed", async () => {
  const made = await started();
  const first = made.socket();
  await made.clock.advance(ovp.CLIENT_IDLE_TIMEOUT_MS - 1);
  first.server("agent.thinking", 1, { turn_id: "t", delta: "in time" }); // life: the bound restarts
  await made.clock.advance(ovp.CLIENT_IDLE_TIMEOUT_MS);
  assert.equal(made.client.state, "live", "at the bound: still up");
  await made.clock.advance(1);
  assert.equal(made.client.state, "dropped", "past the bound: down");
  assert.deepEqual(first.closes, [1000]);
  first.server("agent.thinking", 2, { turn_id: "t", delta: "late" }); // the dead link is not read
  assert.equal(made.client.lastServerSeq, 1);
  await made.clock.advance(ovp.RECONNECT_BACKOFF_INITIAL_MS);
  assert.equal(ScriptedSocket.made.length, 2);
  made.socket().open();
  assert.equal(made.socket().texts()[0]?.["last_server_seq"], 1);
  made.client.close();
});

test("no resume within the window ends the session with OVP_RESUME_EXPIRED", async () => {
  const made = await started();
  made.socket().drop();
  for (let waited = 0; waited <= ovp.RESUME_WINDOW_MS; waited += 500) {
    await made.clock.advance(500);
    const pending = made.socket();
    if (pending.readyState === 0) pending.drop(); // every reconnect fails
  }
  const outcome = await made.client.ended;
  assert.equal(outcome.code, ovp.ErrorCode.OVP_RESUME_EXPIRED);
  assert.ok(ScriptedSocket.made.length >= 10, `${ScriptedSocket.made.length} attempts, backing off`);
});

test("audio is dropped, and counted, while bufferedAmount is over its bound", async () => {
  const { client, socket } = await started();
  socket().bufferedAmount = ovp.CLIENT_SEND_BUFFER_MAX_BYTES;
  assert.equal(client.sendAudio(PCM), true, "at the bound: written");
  socket().bufferedAmount = ovp.CLIENT_SEND_BUFFER_MAX_BYTES + 1;
  assert.equal(client.sendAudio(PCM), false, "past it: dropped");
  assert.equal(client.audioDropped, 1);
  socket().bufferedAmount = 0;
  assert.equal(client.sendAudio(PCM), true);
  const frames = socket().sent.filter((data): data is Uint8Array => typeof data !== "string");
  assert.deepEqual(frames.map((frame) => ovp.decodeFrame(frame, ovp.FrameDirection.CLIENT_TO_SERVER).frame_seq), [0, 2], "the gap shows");
});

test("a frame's rtp_timestamp is the sender's when given, checked at its bound before anything advances", async () => {
  const { client, socket } = await started();
  const top = ovp.RTP_TIMESTAMP_MODULUS - 1;
  assert.equal(client.sendAudio(PCM, 0, top), true, "the largest rtp_timestamp is written");
  assert.throws(() => client.sendAudio(PCM, 0, ovp.RTP_TIMESTAMP_MODULUS), ovp.ProtocolError, "one past it is refused");
  assert.throws(() => client.sendAudio(PCM, 0, -1), ovp.ProtocolError);
  assert.equal(client.sendAudio(PCM), true, "the default goes on from the last frame written, wrapping");
  const frames = socket()
    .sent.filter((data): data is Uint8Array => typeof data !== "string")
    .map((frame) => ovp.decodeFrame(frame, ovp.FrameDirection.CLIENT_TO_SERVER));
  assert.deepEqual(
    frames.map((frame) => [frame.frame_seq, frame.rtp_timestamp]),
    [
      [0, top],
      [1, (top + ovp.SAMPLES_PER_FRAME) % ovp.RTP_TIMESTAMP_MODULUS],
    ],
    "a refused frame takes no frame_seq",
  );
});

test("events wait while bufferedAmount is over its bound, and go in order as it falls", async () => {
  const { client, clock, socket } = await started();
  socket().bufferedAmount = ovp.CLIENT_SEND_BUFFER_MAX_BYTES + 1;
  const first = client.send("agent.input", INPUT);
  const second = client.send("agent.input", { source: "developer_inject", text: "two" });
  assert.equal(client.queuedEvents, 2);
  assert.equal(socket().texts().length, 0);
  socket().bufferedAmount = 0;
  await clock.advance(ovp.FRAME_MS);
  assert.deepEqual([(await first).seq, (await second).seq], [0, 1]);
  assert.deepEqual(socket().texts().map((m) => m.seq), [0, 1]);
});

test("send during a resume queues, and goes after session.resume with a later seq", async () => {
  const made = await started();
  await made.client.send("agent.input", INPUT); // seq 0
  made.socket().drop();
  const waiting = made.client.send("agent.input", { source: "developer_inject", text: "meanwhile" });
  assert.equal(made.client.queuedEvents, 1);
  await made.clock.advance(ovp.RECONNECT_BACKOFF_INITIAL_MS);
  made.socket().open();
  assert.deepEqual(made.socket().texts().map((m) => [m.type, m.seq]), [["session.resume", 1], ["agent.input", 2]]);
  assert.equal((await waiting).seq, 2);
  made.client.close();
});

test("the send queue holds its bound and refuses one past it; queued sends fail with the session", async () => {
  const made = await started();
  made.socket().drop();
  const queued: Promise<unknown>[] = [];
  for (let i = 0; i < ovp.CLIENT_SEND_QUEUE_MAX_EVENTS; i++) queued.push(made.client.send("agent.input", INPUT));
  assert.equal(made.client.queuedEvents, ovp.CLIENT_SEND_QUEUE_MAX_EVENTS);
  assert.throws(() => made.client.send("agent.input", INPUT), SendQueueFull);
  made.client.close();
  const settledAll = await Promise.allSettled(queued);
  assert.ok(settledAll.every((s) => s.status === "rejected" && s.reason instanceof SessionFailed));
  assert.equal(made.client.queuedEvents, 0);
});

test("session.start with another seq than 0 ends the session", async () => {
  const { client, socket } = scripted();
  const start = client.connect();
  await settled();
  socket().open();
  socket().server("session.start", 1, START);
  await assert.rejects(start, /session.start has seq 1, not 0/);
  assert.equal((await client.ended).code, ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID);
});

test("no session.start within the open timeout ends the session", async () => {
  const { client, clock, socket } = scripted();
  const start = client.connect();
  await settled();
  socket().open();
  const refused = assert.rejects(start, SessionFailed);
  await clock.advance(ovp.OPEN_TIMEOUT_MS);
  assert.equal(client.state, "starting", "at the bound: still waiting");
  await clock.advance(1);
  await refused;
  assert.match((await client.ended).detail, /before session.start/);
});

test("the wrong direction is refused at run time too", async () => {
  const { client } = await started();
  assert.throws(() => client.on("session.update" as never, () => undefined), /a client handles only server events/);
  assert.throws(() => client.send("agent.thinking" as never, {} as never), /a client does not send "agent.thinking"/);
  assert.throws(() => client.send("session.resume" as never, {} as never), /sent by the client itself/);
});

test("the premise of the alias: ws refuses the document's subprotocol, takes the alias", () => {
  assert.throws(() => new WebSocket("ws://127.0.0.1:9", [ovp.SUBPROTOCOL]), SyntaxError);
  const socket = new WebSocket("ws://127.0.0.1:9", [ovp.SUBPROTOCOL_ALIAS]);
  socket.on("error", () => undefined); // nothing listens on port 9
  socket.terminate();
});
