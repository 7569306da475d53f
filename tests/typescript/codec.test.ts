// The TypeScript binding as a user's strict project sees it: types, decode, encode, frames.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as brisvox from "voxwire/brisvox";
import * as ovp from "voxwire/ovp";
import { VoxwireProtocolError } from "voxwire";

const SESSION = "ovps_01HZK3M8Q2W7R4T6Y9B1C5D8E0";
const TS = "2026-05-14T12:35:30.002Z";

function refused(run: () => unknown): VoxwireProtocolError {
  try {
    run();
  } catch (exc) {
    if (exc instanceof VoxwireProtocolError) return exc;
    throw exc;
  }
  assert.fail("no ProtocolError");
}

test("an error names the code, the type, the JSON path and the rule, in Python's words", () => {
  const text = JSON.stringify({ type: "say", text: "a".repeat(brisvox.MAX_LINE_BYTES + 1) });
  const error = refused(() => brisvox.decode(text, "agent"));
  assert.ok(error instanceof brisvox.ProtocolError);
  assert.equal(error.code, brisvox.ErrorCode.INVALID_ARGUMENT);
  assert.equal(error.path, "$.text");
  assert.equal(error.message, "invalid_argument: say $.text: 4097 UTF-8 bytes, at most 4096");
});

test("decode narrows on type, and every sender has its own union", () => {
  const message = ovp.decode(
    JSON.stringify({ type: "dtmf.send", seq: 3, ts: TS, session_id: SESSION, digits: "12#" }),
    "client",
  );
  if (message.type === "dtmf.send") {
    const digits: string = message.digits;
    assert.equal(digits, "12#");
  } else {
    assert.fail(`decoded ${message.type}`);
  }
  const fromServer: ovp.ServerMessage | ovp.UnknownMessage = ovp.decode(
    JSON.stringify({ type: "agent.mood", seq: 1, ts: TS, session_id: SESSION, mood: "calm" }),
    "server",
  );
  assert.ok(fromServer instanceof ovp.UnknownMessage);
  assert.equal(fromServer.data["mood"], "calm");
});

test("what JSON.parse hides is refused: 4.0 for an integer, repeated type, lone surrogates", () => {
  const base = `"type":"agent.cancel","ts":"${TS}","session_id":"${SESSION}"`;
  for (const text of [
    `{${base},"seq":4.0}`,
    `{${base},"seq":4e0}`,
    `{${base},"seq":7,"type":"dtmf.send"}`,
    `{${base},"seq":7,"x":"\\ud800"}`,
    `\ufeff{${base},"seq":7}`,
  ]) {
    const error = refused(() => ovp.decode(text, "client"));
    assert.equal(error.code, ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID, text);
  }
  const invalidUtf8 = new Uint8Array([0x7b, 0x22, 0xff, 0x22, 0x7d]);
  assert.match(refused(() => ovp.decode(invalidUtf8, "client")).message, /not valid UTF-8 at byte 2/);
});

test("encode refuses what decode refuses, and leaves defaults out", () => {
  const error = refused(() => brisvox.encode({ type: "say", text: " " }));
  assert.equal(error.message, "invalid_argument: say $.text: is blank");
  assert.equal(brisvox.encode({ type: "say", text: "hi", interrupt: false }), '{"type":"say","text":"hi"}');
  const seq = refused(() => ovp.encode({ type: "agent.cancel", seq: 1.5, ts: TS, session_id: SESSION }));
  assert.equal(seq.path, "$.seq");
});

test("a frame decodes to a zero-copy view and encodes back to the same bytes", () => {
  const pcm = new Uint8Array(640).map((_, i) => i % 251);
  const bytes = ovp.encodeFrame({
    direction: ovp.FrameDirection.CLIENT_TO_SERVER,
    frame_seq: 7,
    rtp_timestamp: 320,
    pcm,
  });
  assert.equal(bytes.byteLength, ovp.AUDIO_FRAME_SIZE);
  const frame = ovp.decodeFrame(bytes, ovp.FrameDirection.CLIENT_TO_SERVER);
  assert.equal(frame.pcm.buffer, bytes.buffer, "the payload is a view, not a copy");
  assert.equal(frame.pcm.byteOffset, 12);
  assert.deepEqual(ovp.encodeFrame(frame), bytes);
  const wrongWay = refused(() => ovp.decodeFrame(bytes, ovp.FrameDirection.SERVER_TO_CLIENT));
  assert.equal(wrongWay.message, "OVP_AUDIO_FRAME_INVALID: direction: direction 0, expected 1");
  assert.equal(refused(() => ovp.decodeFrame(bytes.subarray(1))).detail, "651 bytes, a frame is 652");
});

test("the browser subprotocol alias is a generated constant", () => {
  assert.equal(ovp.SUBPROTOCOL, "orbit-voice/1.0");
  assert.equal(ovp.SUBPROTOCOL_ALIAS, "voxwire.orbit-voice.1.0");
});

test("encode crosses each bound as decode does: the limit passes, one more is refused", () => {
  const atLimit = brisvox.encode({ type: "say", text: "é".repeat(brisvox.MAX_LINE_BYTES / 2) });
  assert.equal(brisvox.decode(atLimit, "agent").type, "say");
  const over = refused(() => brisvox.encode({ type: "say", text: "é".repeat(brisvox.MAX_LINE_BYTES / 2) + "a" }));
  assert.equal(over.detail, `${brisvox.MAX_LINE_BYTES + 1} UTF-8 bytes, at most ${brisvox.MAX_LINE_BYTES}`);
  // The message bound, on the encoded bytes: an unknown event padded to exactly the limit.
  const envelope = { type: "agent.mood", seq: 1, ts: TS, session_id: SESSION, pad: "" };
  const room = ovp.MAX_MESSAGE_BYTES - JSON.stringify(envelope).length;
  const fits = new ovp.UnknownMessage("agent.mood", { ...envelope, pad: "a".repeat(room) });
  assert.equal(new TextEncoder().encode(ovp.encode(fits)).byteLength, ovp.MAX_MESSAGE_BYTES);
  const tooLarge = new ovp.UnknownMessage("agent.mood", { ...envelope, pad: "a".repeat(room + 1) });
  assert.equal(refused(() => ovp.encode(tooLarge)).code, ovp.ErrorCode.OVP_EVENT_SCHEMA_INVALID);
  assert.match(refused(() => ovp.encode(tooLarge)).detail, /bytes encoded, at most/);
});
