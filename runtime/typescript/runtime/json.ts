/**
 * A strict JSON reader that sees what `JSON.parse` hides: whether a number was written as an
 * integer (`4` against `4.0` or `4e0`), integers no double holds exactly (read as `bigint`,
 * spec decision `integers-exact`), repeated keys, lone surrogate escapes, numbers beyond the
 * range of a double, and nesting depth. RFC 8259 exactly: no byte order mark, no comments, no
 * trailing commas, whitespace only from its four characters.
 *
 * And the writer: compact JSON with every number spelled as the Python binding spells it (spec
 * decision `numbers-written-one-way`), which `JSON.stringify` does not (`100.0`, `1e16`, `1e-6`).
 */

/** An integral number written with a fraction or an exponent (`4.0`, `4e0`): not a JSON integer. */
export class FloatLiteral {
  constructor(readonly value: number) {}
}

/** A number literal beyond the range of a double (`1e400`). */
export class NumberOverflow {
  constructor(readonly literal: string) {}
}

/** Why a text is not one JSON value, and where (a UTF-16 offset). */
export class JsonSyntaxError extends Error {
  constructor(
    readonly reason: string,
    readonly offset: number,
  ) {
    super(`${reason} at character ${offset}`);
    this.name = "JsonSyntaxError";
  }
}

/**
 * The pairs of each object in which a key repeats, every occurrence in the order of the text
 * (the parsed object keeps the last value of each key).
 */
export type Duplicates = Map<object, (readonly [string, unknown])[]>;

export interface Parsed {
  readonly value: unknown;
  /** `null` when no key repeats (the common case costs nothing). */
  readonly duplicates: Duplicates | null;
  /** The deepest nesting of arrays and objects in the text, the outermost counted as 1. */
  readonly deepest: number;
  /** Whether a number beyond the range of a double was read (a `NumberOverflow`). */
  readonly overflow: boolean;
}

/** A parsed object; a `__proto__` key is an own property like any other (as `JSON.parse` has it). */
export type RawObject = { [key: string]: unknown };

/** What makes a string need the careful path: an escape or a control character. */
const SLOW_STRING = /[\\\u0000-\u001f]/;

const WS = new Uint8Array(128);
WS[0x20] = WS[0x09] = WS[0x0a] = WS[0x0d] = 1;

/** Read exactly one JSON value from `text`; raise `JsonSyntaxError` if it is not one. */
export function parseStrict(text: string, maxDepth: number): Parsed {
  const reader = new Reader(text, maxDepth);
  reader.skipWhitespace();
  const value = reader.value(0);
  reader.skipWhitespace();
  if (reader.at < text.length) reader.fail("unexpected text after the value");
  return { value, duplicates: reader.duplicates, deepest: reader.deepest, overflow: reader.overflow };
}

class Reader {
  at = 0;
  duplicates: Duplicates | null = null;
  deepest = 0;
  overflow = false;

  constructor(
    readonly text: string,
    readonly maxDepth: number,
  ) {}

  fail(reason: string): never {
    throw new JsonSyntaxError(reason, this.at);
  }

  skipWhitespace(): void {
    const text = this.text;
    let at = this.at;
    for (;;) {
      const c = text.charCodeAt(at);
      if (c < 128 && WS[c] === 1) at++;
      else break;
    }
    this.at = at;
  }

  value(depth: number): unknown {
    const c = this.text.charCodeAt(this.at);
    switch (c) {
      case 0x7b: // {
        return this.object(depth + 1);
      case 0x5b: // [
        return this.array(depth + 1);
      case 0x22: // "
        return this.string();
      case 0x74: // t
        return this.word("true", true);
      case 0x66: // f
        return this.word("false", false);
      case 0x6e: // n
        return this.word("null", null);
      default:
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return this.number();
        if (Number.isNaN(c)) this.fail("unexpected end of text");
        return this.fail(`unexpected character ${JSON.stringify(this.text[this.at])}`);
    }
  }

  word<T>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.at)) this.fail("invalid literal");
    this.at += word.length;
    return value;
  }

  number(): number | bigint | FloatLiteral | NumberOverflow {
    const text = this.text;
    const start = this.at;
    let at = start;
    let integral = true;
    if (text.charCodeAt(at) === 0x2d) at++;
    const first = text.charCodeAt(at);
    if (first === 0x30) {
      at++;
    } else if (first >= 0x31 && first <= 0x39) {
      do at++;
      while (isDigit(text.charCodeAt(at)));
    } else {
      this.at = at;
      this.fail("a number needs a digit");
    }
    if (text.charCodeAt(at) === 0x2e) {
      integral = false;
      at++;
      if (!isDigit(text.charCodeAt(at))) {
        this.at = at;
        this.fail("a fraction needs a digit");
      }
      do at++;
      while (isDigit(text.charCodeAt(at)));
    }
    const e = text.charCodeAt(at);
    if (e === 0x65 || e === 0x45) {
      integral = false;
      at++;
      const sign = text.charCodeAt(at);
      if (sign === 0x2b || sign === 0x2d) at++;
      if (!isDigit(text.charCodeAt(at))) {
        this.at = at;
        this.fail("an exponent needs a digit");
      }
      do at++;
      while (isDigit(text.charCodeAt(at)));
    }
    this.at = at;
    const literal = text.slice(start, at);
    const value = Number(literal);
    if (integral) {
      if (Number.isSafeInteger(value)) return value === 0 ? 0 : value; // -0 is the integer 0
      return BigInt(literal); // exactly as written, however long
    }
    if (!Number.isFinite(value)) {
      this.overflow = true;
      return new NumberOverflow(literal);
    }
    return Number.isInteger(value) ? new FloatLiteral(value) : value;
  }

  string(): string {
    const text = this.text;
    // The common case: no escape and no control character before the closing quote.
    const end = text.indexOf('"', this.at + 1);
    if (end > 0) {
      const chunk = text.slice(this.at + 1, end);
      if (!SLOW_STRING.test(chunk)) {
        this.at = end + 1;
        return chunk;
      }
    }
    let at = this.at + 1;
    let start = at;
    let out = "";
    for (;;) {
      const c = text.charCodeAt(at);
      if (c === 0x22) {
        this.at = at + 1;
        return out + text.slice(start, at);
      }
      if (c === 0x5c) {
        out += text.slice(start, at);
        this.at = at;
        out += this.escape();
        at = this.at;
        start = at;
        continue;
      }
      if (c < 0x20 || Number.isNaN(c)) {
        this.at = at;
        this.fail(Number.isNaN(c) ? "unterminated string" : "a control character in a string");
      }
      at++;
    }
  }

  /** One escape at `this.at` (the backslash); a surrogate pair of escapes is one character. */
  escape(): string {
    const text = this.text;
    const kind = text[this.at + 1];
    this.at += 2;
    switch (kind) {
      case '"':
        return '"';
      case "\\":
        return "\\";
      case "/":
        return "/";
      case "b":
        return "\b";
      case "f":
        return "\f";
      case "n":
        return "\n";
      case "r":
        return "\r";
      case "t":
        return "\t";
      case "u": {
        const unit = this.hex4();
        if (unit >= 0xd800 && unit <= 0xdbff) {
          if (text[this.at] === "\\" && text[this.at + 1] === "u") {
            this.at += 2;
            const low = this.hex4();
            if (low >= 0xdc00 && low <= 0xdfff) return String.fromCharCode(unit, low);
          }
          this.fail("a lone surrogate escape (not valid UTF-8)");
        }
        if (unit >= 0xdc00 && unit <= 0xdfff) this.fail("a lone surrogate escape (not valid UTF-8)");
        return String.fromCharCode(unit);
      }
      default:
        this.at -= 1;
        return this.fail("an invalid escape");
    }
  }

  hex4(): number {
    const digits = this.text.slice(this.at, this.at + 4);
    if (!/^[0-9A-Fa-f]{4}$/.test(digits)) this.fail("\\u needs four hex digits");
    this.at += 4;
    return parseInt(digits, 16);
  }

  array(depth: number): unknown[] {
    if (depth > this.maxDepth) this.fail(`nested deeper than ${this.maxDepth} levels`);
    if (depth > this.deepest) this.deepest = depth;
    this.at++;
    const out: unknown[] = [];
    this.skipWhitespace();
    if (this.text.charCodeAt(this.at) === 0x5d) {
      this.at++;
      return out;
    }
    for (;;) {
      this.skipWhitespace();
      out.push(this.value(depth));
      this.skipWhitespace();
      const c = this.text.charCodeAt(this.at++);
      if (c === 0x5d) return out;
      if (c !== 0x2c) {
        this.at--;
        this.fail("expected , or ] in an array");
      }
    }
  }

  object(depth: number): RawObject {
    if (depth > this.maxDepth) this.fail(`nested deeper than ${this.maxDepth} levels`);
    if (depth > this.deepest) this.deepest = depth;
    this.at++;
    const out: RawObject = {};
    let pairs: (readonly [string, unknown])[] | null = null;
    this.skipWhitespace();
    if (this.text.charCodeAt(this.at) === 0x7d) {
      this.at++;
      return out;
    }
    for (;;) {
      this.skipWhitespace();
      if (this.text.charCodeAt(this.at) !== 0x22) this.fail("expected a string key");
      const key = this.string();
      this.skipWhitespace();
      if (this.text.charCodeAt(this.at) !== 0x3a) this.fail("expected : after a key");
      this.at++;
      this.skipWhitespace();
      const value = this.value(depth);
      if (pairs === null && out[key] !== undefined && Object.hasOwn(out, key)) {
        pairs = Object.keys(out).map((name) => [name, out[name]] as const); // the first repeat
        (this.duplicates ??= new Map()).set(out, pairs);
      }
      if (pairs !== null) pairs.push([key, value]);
      if (key === "__proto__") Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
      else out[key] = value;
      this.skipWhitespace();
      const c = this.text.charCodeAt(this.at++);
      if (c === 0x7d) return out;
      if (c !== 0x2c) {
        this.at--;
        this.fail("expected , or } in an object");
      }
    }
  }

}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

// -- the writer ----------------------------------------------------------------------------------

/**
 * The doubles whose value is an integer (`1e2`, `100.0`, `-0.0`) in the containers (objects and
 * arrays) that decode returns and encode copies: a `number` cannot say it was read as a double,
 * so each container keeps, by key or index, the value its double had. While the container holds
 * that value there, `writeJson` writes it as a double (`100.0`), as the Python binding does; any
 * other value put there is written by the rule of `numberText`.
 */
const DOUBLES = new WeakMap<object, Map<string | number, number>>();

/**
 * Mark `value`, at `key` of `container`, as a double: a no-op for anything but a safe integer
 * (every other number is written as a double anyway).
 */
export function markDouble(container: object, key: string | number, value: unknown): void {
  if (typeof value !== "number" || !Number.isSafeInteger(value)) return;
  let marks = DOUBLES.get(container);
  if (marks === undefined) DOUBLES.set(container, (marks = new Map()));
  marks.set(key, value);
}

/** The doubles `container` holds, by key or index (`undefined`: none). */
export function doublesOf(container: object): ReadonlyMap<string | number, number> | undefined {
  return DOUBLES.get(container);
}

/** Whether `value`, at `key` of a container with these `marks`, is the double marked there. */
export function isDouble(marks: ReadonlyMap<string | number, number> | undefined, key: string | number, value: unknown): boolean {
  return marks !== undefined && typeof value === "number" && Object.is(marks.get(key), value);
}

/**
 * A finite number as the Python binding writes it (spec decision `numbers-written-one-way`): a
 * safe integer that is not `double` as its digits (`-0` as `0`); every other number as a double
 * (`doubleText`).
 */
export function numberText(value: number, double: boolean): string {
  if (!double && Number.isSafeInteger(value)) return value === 0 ? "0" : String(value);
  return doubleText(value);
}

/**
 * A finite double as the Python binding (msgspec) writes it: the fewest digits that read back as
 * the same double, the nearest of them to its value (what ECMAScript's `Number::toString` finds
 * too), laid out as an integer with `.0` below 1e16 (`100.0`, `1000000000000000.0`), as a decimal
 * from 1e-5 (`0.5`, `0.00001`), else with an exponent, without `+` (`1e16`, `1.5e-7`, `1e-6`);
 * `-0.0` keeps its sign.
 */
export function doubleText(value: number): string {
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const sign = value < 0 ? "-" : "";
  const shortest = String(Math.abs(value));
  // The digits, without leading or trailing zeros, and where the point stands among them:
  // value = 0.<digits> x 10^point.
  let digits: string;
  let point: number;
  const e = shortest.indexOf("e");
  if (e >= 0) {
    digits = shortest.slice(0, e).replace(".", "");
    point = Number(shortest.slice(e + 1)) + 1;
  } else {
    const dot = shortest.indexOf(".");
    const whole = dot < 0 ? shortest : shortest.slice(0, dot);
    const fraction = dot < 0 ? "" : shortest.slice(dot + 1);
    if (whole === "0") {
      const significant = fraction.search(/[1-9]/);
      digits = fraction.slice(significant);
      point = -significant;
    } else {
      digits = (whole + fraction).replace(/0+$/, "");
      point = whole.length;
    }
  }
  const length = digits.length;
  if (length <= point && point <= 16) return `${sign}${digits}${"0".repeat(point - length)}.0`;
  if (0 < point && point <= 16) return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
  if (-5 < point && point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  const mantissa = length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`;
  return `${sign}${mantissa}e${point - 1}`;
}

/**
 * Compact JSON of a value the codec has checked (JSON types only, numbers finite): strings as
 * `JSON.stringify` writes them, a `bigint` as its digits, every number by `numberText`, a
 * container's marked doubles as doubles; as `JSON.stringify`, an object's `undefined` properties
 * are left out and an array's holes written `null`.
 */
export function writeJson(value: unknown): string {
  return write(value, undefined, "");
}

/** What a string holds that `JSON.stringify` escapes (a lone surrogate is found among them). */
const ESCAPED = /["\\\u0000-\u001f\ud800-\udfff]/;

/** A string as `JSON.stringify` writes it; the common case, nothing to escape, without the call. */
function quote(text: string): string {
  return ESCAPED.test(text) ? JSON.stringify(text) : `"${text}"`;
}

function write(value: unknown, marks: ReadonlyMap<string | number, number> | undefined, key: string | number): string {
  switch (typeof value) {
    case "string":
      return quote(value);
    case "number":
      return numberText(value, isDouble(marks, key, value));
    case "bigint":
      return value.toString();
    case "boolean":
      return value ? "true" : "false";
    case "object": {
      if (value === null) return "null";
      const inner = DOUBLES.get(value);
      if (Array.isArray(value)) {
        let out = "[";
        for (let i = 0; i < value.length; i++) {
          const item: unknown = value[i];
          out += (i === 0 ? "" : ",") + (item === undefined ? "null" : write(item, inner, i)); // a hole
        }
        return `${out}]`;
      }
      let out = "{";
      for (const name of Object.keys(value)) {
        const item = (value as RawObject)[name];
        if (item === undefined) continue;
        out += `${out.length === 1 ? "" : ","}${quote(name)}:${write(item, inner, name)}`;
      }
      return `${out}}`;
    }
    default:
      throw new TypeError(`a value of type ${typeof value} is not JSON`);
  }
}
