// A consumer of every entry point of the installed package; tests/test_typescript_package.py
// compiles it with `tsc --strict` under moduleResolution node10, node16 and bundler.
import { VoxwireProtocolError, brisvox } from "voxwire";
import { decode, encode, type AgentMessage } from "voxwire/brisvox";
import { FrameDirection, PCM_BYTES_PER_FRAME, encodeFrame, type ServerMessage } from "voxwire/ovp";
import { OvpClient, type OvpClientOptions } from "voxwire/ovp/client";
import { Resampler, type Playback } from "voxwire/audio";

const said: AgentMessage = decode('{"type":"say","text":"hi"}', "agent");
const wire: string = encode({ type: "say", text: "hi" });
const frame: Uint8Array = encodeFrame({
  direction: FrameDirection.CLIENT_TO_SERVER,
  frame_seq: 0,
  rtp_timestamp: 0,
  pcm: new Uint8Array(PCM_BYTES_PER_FRAME),
});
const options: OvpClientOptions = { url: "wss://gateway.invalid", sessionId: "s", token: "t" };
const isBase: boolean = brisvox.ProtocolError.prototype instanceof VoxwireProtocolError;
declare const event: ServerMessage;
declare const playback: Playback;
const up: number = new Resampler(44100, 16000).up;
export const seen = [said.type, wire, frame.length, options.url, isBase, event.type, OvpClient.name, up, playback.stats.late];
