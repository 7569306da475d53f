/**
 * An exact, stateful sample-rate converter: `Resampler(fromRate, toRate)`.
 *
 * The filter is the one `scipy.signal.resample_poly(x, up, down)` designs by default: with the
 * ratio reduced to `up / down`, a linear-phase low-pass FIR of `2 * half + 1` taps, `half = 10 *
 * max(up, down)`, cut off at `1 / max(up, down)` of the Nyquist frequency, a Kaiser window of beta
 * 5, scaled to unity gain at DC, times `up`. Output sample `n` is centred on input time
 * `n * down / up` (no delay: the converter holds back the `half / up` input samples it must see
 * ahead), and a stream of `N` samples gives `ceil(N * up / down)` once flushed, as
 * `resample_poly` gives for the whole signal at once (with zeros before and after).
 *
 * It is deterministic to the bit: every output is the sum of its taps times its input samples,
 * taken in the order of the input and added left to right in IEEE double precision (JavaScript
 * has no fused multiply-add), then rounded to float32. So the output does not depend on how the
 * input is cut into blocks, and the Python binding (`voxwire.audio.Resampler`), which builds the
 * same taps with the same operations (its own sine, not the platform's) and sums the same way,
 * gives the same float32 samples.
 */

const KAISER_BETA = 5;
/** Taps on each side of the centre, per unit of `max(up, down)` (scipy's `10 * max_rate`). */
const HALF_TAPS_PER_RATE = 10;
/** Terms of the series of sine and cosine on [0, pi/4]: far below a double's precision. */
const SERIES_TERMS = 13;

/** Why a rate was refused (a `RangeError`, naming the rate and the argument). */
export class RateError extends RangeError {
  constructor(argument: string, rate: unknown) {
    super(`${argument} must be a positive integer number of samples per second, not ${String(rate)}`);
    this.name = "RateError";
  }
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

function checkRate(argument: string, rate: number): number {
  if (!Number.isSafeInteger(rate) || rate <= 0) throw new RateError(argument, rate);
  return rate;
}

/** sin(x) for x in [0, pi/4], by its series, added in a fixed order. */
function sinSeries(x: number): number {
  const x2 = x * x;
  let term = x;
  let sum = x;
  for (let k = 1; k <= SERIES_TERMS; k++) {
    term = (-term * x2) / (2 * k * (2 * k + 1));
    sum += term;
  }
  return sum;
}

/** cos(x) for x in [0, pi/4], by its series, added in a fixed order. */
function cosSeries(x: number): number {
  const x2 = x * x;
  let term = 1;
  let sum = 1;
  for (let k = 1; k <= SERIES_TERMS; k++) {
    term = (-term * x2) / ((2 * k - 1) * (2 * k));
    sum += term;
  }
  return sum;
}

/** sin(pi * j / m) for integers j and m > 0, reduced exactly in integers to [0, pi/4]. */
function sinPiRatio(j: number, m: number): number {
  let r = ((j % (2 * m)) + 2 * m) % (2 * m);
  let sign = 1;
  if (r >= m) {
    r -= m;
    sign = -1;
  }
  if (2 * r > m) r = m - r;
  if (4 * r > m) return sign * cosSeries(Math.PI * ((m - 2 * r) / (2 * m)));
  return sign * sinSeries(Math.PI * (r / m));
}

/** The modified Bessel function of the first kind, order 0, by its series. */
function besselI0(x: number): number {
  const y = (x / 2) * (x / 2);
  let term = 1;
  let sum = 1;
  for (let k = 1; term > sum * 1e-17; k++) {
    term = (term * y) / (k * k);
    sum += term;
  }
  return sum;
}

/** The filter's taps for a reduced ratio, `2 * half + 1` of them (see the module comment). */
function designTaps(up: number, down: number): Float64Array {
  const rate = Math.max(up, down);
  const half = HALF_TAPS_PER_RATE * rate;
  const count = 2 * half + 1;
  const taps = new Float64Array(count);
  const norm = besselI0(KAISER_BETA);
  let total = 0;
  for (let n = 0; n < count; n++) {
    const j = n - half;
    const sinc = j === 0 ? 1 : sinPiRatio(j, rate) / (Math.PI * (j / rate));
    const r = j / half;
    const window = besselI0(KAISER_BETA * Math.sqrt(1 - r * r)) / norm;
    taps[n] = (sinc * window) / rate;
    total += taps[n] as number;
  }
  for (let n = 0; n < count; n++) taps[n] = ((taps[n] as number) / total) * up;
  return taps;
}

/** The taps of each phase `r` (`0 <= r < up`) in the order of the input samples they weigh. */
interface Kernel {
  readonly half: number;
  readonly phases: readonly Float64Array[];
}

const kernels = /* @__PURE__ */ new Map<string, Kernel>();

function kernel(up: number, down: number): Kernel {
  const key = `${up}/${down}`;
  const known = kernels.get(key);
  if (known !== undefined) return known;
  const taps = designTaps(up, down);
  const half = (taps.length - 1) / 2;
  const phases: Float64Array[] = [];
  for (let r = 0; r < up; r++) {
    const length = Math.floor((taps.length - 1 - r) / up) + 1;
    const phase = new Float64Array(length);
    // Input sample i_hi - t is weighed by taps[r + t * up]: reversed, the oldest sample first.
    for (let t = 0; t < length; t++) phase[length - 1 - t] = taps[r + t * up] as number;
    phases.push(phase);
  }
  const made = { half, phases };
  kernels.set(key, made);
  return made;
}

/**
 * Converts a stream of samples from `fromRate` to `toRate`, block by block: `push` returns every
 * output sample the input so far determines, `flush` the rest (as if zeros followed) and starts
 * a new stream. The output is the same to the bit however the input is cut.
 *
 * ```ts
 * const resampler = new Resampler(44100, 16000);
 * const out = resampler.push(block); // Float32Array at 16 kHz
 * const tail = resampler.flush();
 * ```
 */
export class Resampler {
  readonly fromRate: number;
  readonly toRate: number;
  /** The ratio reduced: `toRate / fromRate === up / down`. */
  readonly up: number;
  readonly down: number;
  private readonly kernel: Kernel | null;
  /** Input samples from absolute index `base` on (those the next outputs still need). */
  private history = new Float64Array(0);
  private held = 0;
  private base = 0;
  /** Input samples received since the stream began, and outputs made. */
  private received = 0;
  private made = 0;

  constructor(fromRate: number, toRate: number) {
    this.fromRate = checkRate("fromRate", fromRate);
    this.toRate = checkRate("toRate", toRate);
    const divisor = gcd(fromRate, toRate);
    this.up = toRate / divisor;
    this.down = fromRate / divisor;
    this.kernel = this.up === 1 && this.down === 1 ? null : kernel(this.up, this.down);
  }

  /** Input samples the converter holds back: what it must see ahead of an output it makes. */
  get lookahead(): number {
    return this.kernel === null ? 0 : Math.ceil(this.kernel.half / this.up);
  }

  /** Take `input` and return every output sample it completes (possibly none). */
  push(input: Float32Array): Float32Array {
    if (this.kernel === null) return input.slice();
    this.append(input);
    // Output n needs input up to floor((n * down + half) / up).
    const ready = Math.floor((this.received * this.up - this.kernel.half - 1) / this.down) + 1;
    return this.produce(Math.max(ready, this.made));
  }

  /** The outputs still due, as if zeros followed the input; then a new stream begins. */
  flush(): Float32Array {
    if (this.kernel === null) return new Float32Array(0);
    const total = Math.ceil((this.received * this.up) / this.down);
    const out = this.produce(total);
    this.reset();
    return out;
  }

  /** Forget the stream (what is held is dropped): the next sample begins a new one. */
  reset(): void {
    this.history = new Float64Array(0);
    this.held = this.base = this.received = this.made = 0;
  }

  private append(input: Float32Array): void {
    const need = this.held + input.length;
    if (need > this.history.length) {
      const grown = new Float64Array(Math.max(need, 2 * this.history.length));
      grown.set(this.history.subarray(0, this.held));
      this.history = grown;
    }
    this.history.set(input, this.held);
    this.held = need;
    this.received += input.length;
  }

  /** Outputs `made` to `until` (exclusive); samples past what was received count as zeros. */
  private produce(until: number): Float32Array {
    const { half, phases } = this.kernel as Kernel;
    const { up, down } = this;
    const out = new Float32Array(until - this.made);
    const history = this.history;
    const last = this.received - 1;
    for (let k = 0; k < out.length; k++) {
      const centre = (this.made + k) * down + half;
      const r = centre % up;
      const hi = (centre - r) / up;
      const phase = phases[r] as Float64Array;
      const lo = hi - phase.length + 1;
      let acc = 0;
      const start = Math.max(lo, 0);
      const stop = Math.min(hi, last);
      for (let i = start; i <= stop; i++) acc += (phase[i - lo] as number) * (history[i - this.base] as number);
      out[k] = acc;
    }
    this.made = until;
    this.drop();
    return out;
  }

  /** Let go of the samples no future output needs. */
  private drop(): void {
    const { half, phases } = this.kernel as Kernel;
    const centre = this.made * this.down + half;
    const r = centre % this.up;
    const lo = (centre - r) / this.up - (phases[r] as Float64Array).length + 1;
    const keep = Math.max(0, Math.min(lo, this.received) - this.base);
    if (keep === 0) return;
    this.history.copyWithin(0, keep, this.held);
    this.held -= keep;
    this.base += keep;
  }
}
