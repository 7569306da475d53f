// The OVP client's rules, against a scripted WebSocket: the seq and direction rules, replayed
// duplicates dropped, the resume's session.resume, and what the client refuses to send.
import assert from "node:assert/strict";
import { test } from "node:test";

import WebSocket from "ws";

import * as ovp from "voxwire/ovp";
import { OvpClient, type WebSocketConstructor } from "voxwire/ovp/client";

const SESSION = "ovps_scripted_1";
const TS = "2026-05-14T12:35:30.002Z";

type Listener = (event: never) => void;

class ScriptedSocket {
  static made: ScriptedSocket[] = [];
  binaryType = "blob";
  readyState = 0;
  readonly sent: (string | Uint8Array)[] = [];
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

  close(): void {
    this.emit("close", { code: 1000, reason: "" });
  }

  emit(type: string, event: unknown): void {
    for (const listener of this.listeners.get(type) ?? []) (listener as (event: unknown) => void)(event);
  }

  open(): void {
    this.readyState = 1;
    this.emit("open", {});
  }

  server(type: string, seq: number, fields: object = {}): void {
    this.emit("message", { data: JSON.stringify({ type, seq, ts: TS, session_id: SESSION, ...fields }) });
  }
}

const START = {
  protocol_version: "1.0",
  call: { call_id: "c1", from: "+14155551234", to: "+18005550100", direction: "inbound", secure: true },
  agent: { agent_id: "a1", name: "Desk", instructions: "Help.", model: "m", voice_id: "v1", language: "en-US", tools: [] },
  audio: { sample_rate_hz: 16000, sample_width_bits: 16, channels: 1, frame_ms: 20 },
};

function scripted(): { client: OvpClient; socket: () => ScriptedSocket } {
  ScriptedSocket.made = [];
  const client = new OvpClient({
    url: "ws://127.0.0.1:1",
    sessionId: SESSION,
    token: "t",
    WebSocket: ScriptedSocket as unknown as WebSocketConstructor,
  });
  return { client, socket: () => ScriptedSocket.made[ScriptedSocket.made.length - 1] as ScriptedSocket };
}

async function started(): Promise<{ client: OvpClient; socket: () => ScriptedSocket }> {
  const made = scripted();
  const start = made.client.connect();
  await new Promise((resolve) => setImmediate(resolve));
  made.socket().open();
  made.socket().server("session.start", 0, START);
  await start;
  return made;
}

test("the client offers the alias and stamps seq, ts and session_id", async () => {
  const { client, socket } = await started();
  assert.equal(socket().protocol, ovp.SUBPROTOCOL_ALIAS);
  assert.match(socket().url, /\/voice\/ws\/ovps_scripted_1\?token=t$/);
  client.send("agent.input", { source: "developer_inject", text: "one" });
  client.send("agent.input", { source: "developer_inject", text: "two" });
  const seqs = socket().sent.map((text) => (ovp.decode(text as string, "client") as { seq: number }).seq);
  assert.deepEqual(seqs, [0, 1]);
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

test("a dropped link is resumed with the last server seq", async () => {
  const { client, socket } = await started();
  socket().server("agent.thinking", 4, { turn_id: "t", delta: "a" });
  const first = socket();
  first.emit("close", { code: 1006, reason: "" });
  assert.equal(client.live, false);
  await new Promise((resolve) => setTimeout(resolve, ovp.RECONNECT_BACKOFF_INITIAL_MS + 50));
  assert.notEqual(socket(), first, "a new connection");
  socket().open();
  const resume = ovp.decode(socket().sent[0] as string, "client");
  assert.equal(resume.type, "session.resume");
  assert.equal(resume.type === "session.resume" && resume.last_server_seq, 4);
  client.close();
});

test("session.start with another seq than 0 ends the session", async () => {
  const { client, socket } = scripted();
  const start = client.connect();
  await new Promise((resolve) => setImmediate(resolve));
  socket().open();
  socket().server("session.start", 1, START);
  await assert.rejects(start, /session.start has seq 1, not 0/);
  assert.equal((await client.ended).code, ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID);
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
