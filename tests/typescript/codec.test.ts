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

test("numbers are written as the Python binding writes them (spec decision numbers-written-one-way)", () => {
  // A double read from the text is written as a double, wherever it stands: an unknown event,
  // tool arguments, an any-typed result; an integer as an integer, however long.
  const envelope = `"type":"agent.mood","seq":1,"ts":"${TS}","session_id":"${SESSION}"`;
  const read = `[1e2,1E+2,100.0,-0.0,-0,0e0,1e15,1e16,0.00001,0.000001,2.5e-8,100.50,12345678901234567890.0,9007199254740993,1e-400]`;
  const written = `[100.0,100.0,100.0,-0.0,0,0.0,1000000000000000.0,1e16,0.00001,1e-6,2.5e-8,100.5,1.2345678901234567e19,9007199254740993,0.0]`;
  const event = ovp.decode(`{${envelope},"n":${read},"o":{"x":5e0}}`, "server");
  assert.ok(event instanceof ovp.UnknownMessage);
  assert.equal(ovp.encode(event), `{${envelope},"n":${written},"o":{"x":5.0}}`);
  const args = `{"a":1e2,"b":[1.0,2],"c":{"d":-0.0}}`;
  const call = `"seq":31,"t_ms":13050,"type":"tool.call","id":1,"call_id":"call_7QmX2b9L","name":"book_table","arguments":${args},"kind":"side_effect","epoch":4,"idempotency_key":"9f2c4e1a7b3d5f60","timeout_ms":4000`;
  const decoded = brisvox.decode(`{${call}}`, "server");
  assert.ok(!(decoded instanceof brisvox.UnknownMessage) && decoded.type === "tool.call");
  assert.deepEqual(decoded.arguments, { a: 100, b: [1, 2], c: { d: -0 } }); // plain numbers to read
  assert.match(brisvox.encode(decoded), /"arguments":\{"a":100\.0,"b":\[1\.0,2\],"c":\{"d":-0\.0\}\}/);
  const result = brisvox.decode('{"type":"tool.result","id":1,"result":1e2}', "agent");
  assert.equal(brisvox.encode(result), '{"type":"tool.result","id":1,"result":100.0}');
  // A number field is a double by its type: 1 is written 1.0, as Python reads it.
  const partial = `"type":"transcript.partial","seq":3,"ts":"2026-05-14T12:34:58Z","session_id":"${SESSION}","utterance_id":"u","speaker":"caller","text":"x"`;
  assert.equal(ovp.encode(ovp.decode(`{${partial},"confidence":1}`, "server")), `{${partial},"confidence":1.0}`);
});

test("a plain number is an integer when it is a safe one, else a double; another value is not a kept double", () => {
  const numbers = [100, -0, 2 ** 53 - 1, 2 ** 53, 2 ** 60, 0.5, 0.000001, 1e-7, 1.5e300, 123456789.125];
  assert.equal(
    brisvox.encode({ type: "tool.result", id: 1, result: numbers }),
    '{"type":"tool.result","id":1,"result":[100,0,9007199254740991,9007199254740992.0,1.152921504606847e18,0.5,1e-6,1e-7,1.5e300,123456789.125]}',
  );
  assert.equal(brisvox.encode({ type: "tool.result", id: 1, result: 12345678901234567n }), '{"type":"tool.result","id":1,"result":12345678901234567}');
  // The double decode read is written as one while its value stays where decode put it.
  const event = ovp.decode(`{"type":"agent.mood","seq":1,"ts":"${TS}","session_id":"${SESSION}","n":[1e2,1e2]}`, "server");
  assert.ok(event instanceof ovp.UnknownMessage);
  const n = event.data["n"] as number[];
  n[1] = 7;
  assert.match(ovp.encode(event), /"n":\[100\.0,7\]/);
  const copy = new ovp.UnknownMessage("agent.mood", { ...event.data, n: [...n] }); // new arrays hold plain numbers
  assert.match(ovp.encode(copy), /"n":\[100,7\]/);
});
