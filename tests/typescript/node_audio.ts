// A Node program of voxwire/audio's pure parts, compiled without the DOM library (the package's
// declarations bring what its browser half names) and run by tests/test_typescript_package.py:
// a bot's 44.1 kHz tone to 16 kHz frames, and the frames through a jitter buffer.
import { Framer, JitterBuffer, Resampler } from "voxwire/audio";

const tone = Float32Array.from({ length: 44100 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 440 * i) / 44100));
const resampler = new Resampler(44100, 16000);
const framer = new Framer();
const frames = [...framer.push(resampler.push(tone)), ...framer.push(resampler.flush())];
const buffer = new JitterBuffer();
frames.forEach((pcm, seq) => buffer.push({ frame_seq: seq, flags: 0, pcm }, 0));
let played = 0;
for (let slot = buffer.next(0); slot.kind !== "idle"; slot = buffer.next(0)) if (slot.kind === "frame") played++;
console.log(JSON.stringify({ frames: frames.length, bytes: frames[0]?.length, played, overflowed: buffer.stats.overflowed }));
