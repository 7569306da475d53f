/**
 * The one decode and encode path both generated protocol modules are built on. A generated
 * module describes its protocol as data (every field's type and limits, every rule across
 * fields, the error code of each class of failure, all from the spec) and hands it to
 * `JsonCodec`, which reads the text with the strict reader and holds each value to its rules in
 * two passes, as the Python binding does: types, enums, ranges, lengths and patterns while
 * reading (every occurrence of a repeated key), then UTF-8 byte limits, blank text, uniqueness
 * and the rules across fields on the message kept.
 */
import { VoxwireProtocolError } from "./errors.js";
import {
  type Duplicates,
  FloatLiteral,
  JsonSyntaxError,
  NumberOverflow,
  type RawObject,
  doublesOf,
  isDouble,
  markDouble,
  parseStrict,
  writeJson,
} from "./json.js";

/**
 * A JSON value, as decoding returns it inside free-form fields: an integer beyond 2^53 - 1 is a
 * `bigint`, kept exactly (spec decision `integers-exact`), and every other number a `number`.
 * `encode` writes numbers as the Python binding does (spec decision `numbers-written-one-way`):
 * a safe integer as an integer (`100`), any other `number` as a double (`0.5`, `1e-6`, `1e16`),
 * and a double that decode read with an integer value (`1e2`, `100.0`) as a double again
 * (`100.0`) while it stays where decode put it.
 */
export type JsonValue = null | boolean | number | bigint | string | readonly JsonValue[] | JsonObject;
export interface JsonObject {
  readonly [key: string]: JsonValue;
}

/** What `decode` reads: a text frame as a string, or its bytes (checked to be UTF-8). */
export type WireData = string | Uint8Array | ArrayBuffer | ArrayBufferView;

export type ValueKind =
  | "string"
  | "integer"
  | "number"
  | "boolean"
  | "datetime"
  | "object"
  | "any"
  | "enum"
  | "struct";

/** One field of a message or nested type, with the limits the spec gives it. */
export interface FieldSpec {
  readonly name: string;
  /** An array or a map of values of `kind`; absent: one value. */
  readonly shape?: "array" | "map";
  readonly kind: ValueKind;
  /** The closed enum's values (kind `enum`). */
  readonly values?: readonly (string | number)[];
  /** The nested type's name (kind `struct`). */
  readonly struct?: string;
  readonly required: boolean;
  readonly nullable?: boolean;
  readonly hasDefault?: boolean;
  readonly default?: unknown;
  readonly hasConst?: boolean;
  readonly const?: unknown;
  readonly minimum?: number;
  readonly maximum?: number;
  readonly minLength?: number;
  readonly maxLength?: number;
  readonly minBytes?: number;
  readonly maxBytes?: number;
  readonly pattern?: RegExp;
  readonly notBlank?: boolean;
  readonly uniqueBy?: string;
  /** The error code of this field's rules, when it is not the decode default. */
  readonly code?: string;
}

export interface RuleSpec {
  readonly kind: "at_most_one_of" | "exactly_one_of" | "at_least_one_of" | "requires" | "min_fields";
  /** The fields counted (the rule's, or every optional field). */
  readonly fields?: readonly string[];
  readonly field?: string;
  readonly other?: string;
  readonly equals?: unknown;
  readonly count?: number;
  readonly code?: string;
  readonly description: string;
}

export interface ObjectSpec {
  readonly fields: readonly FieldSpec[];
  readonly rules?: readonly RuleSpec[];
  readonly rejectUnknownFields?: boolean;
}

export interface MessageSpec extends ObjectSpec {
  readonly type: string;
  readonly senders: readonly string[];
}

export interface SenderSpec {
  readonly acceptsUnknown: boolean;
  /** The fields every message of the sender carries, checked on an unknown type too. */
  readonly envelope: readonly FieldSpec[];
}

export interface DecodeErrorCodes {
  readonly malformed: string;
  readonly missing_field: string;
  readonly wrong_type: string;
  readonly unknown_field: string;
  readonly invalid_value: string;
  readonly too_many: string;
  readonly too_large: string;
  readonly unknown_type: string;
  readonly wrong_sender: string;
}

export interface ProtocolSpec {
  readonly id: string;
  /** The largest message in UTF-8 bytes, counted on the text as received (and as encoded). */
  readonly maxMessageBytes: number;
  /** The deepest a message may nest arrays and objects, its own object counted as 1. */
  readonly maxNestingDepth: number;
  /** The deepest a text is read at all: deeper is malformed, whatever else it holds. */
  readonly maxReadDepth: number;
  readonly codes: DecodeErrorCodes;
  readonly senders: { readonly [id: string]: SenderSpec };
  readonly structs: { readonly [name: string]: ObjectSpec };
  readonly messages: readonly MessageSpec[];
  /** Python's `str.isspace` characters: what blank text is made of. */
  readonly blank: RegExp;
  readonly error: new (
    code: string,
    detail: string,
    path?: string | null,
    messageType?: string | null,
  ) => VoxwireProtocolError;
}

/** A message of a type this version does not know, kept whole (forward compatibility). */
export class UnknownMessage {
  /** The message's wire `type`. */
  readonly type: string;
  /** The whole JSON object as received, `type` included. */
  readonly data: JsonObject;

  constructor(type: string, data: JsonObject) {
    this.type = type;
    this.data = data;
  }
}

interface Layout {
  readonly fields: Map<string, FieldSpec>;
  /** How many fields are required: fewer read means one is missing. */
  readonly required: number;
  /** Whether the second pass has anything to check (`null` while it is being worked out). */
  checked: boolean | null;
}

const UNSET: unique symbol = Symbol("UNSET");
const LONE_SURROGATE = "text holds a lone surrogate (not valid UTF-8)";
const TOO_LARGE_NUMBER = "a number too large to represent";

interface Pass {
  readonly messageType: string | null;
  /** Values from a caller (encode), not from the strict reader. */
  readonly fromUser: boolean;
  readonly duplicates: Duplicates | null;
}

/** Decodes and encodes the JSON messages of one protocol (see the module comment). */
export class JsonCodec {
  private readonly byType = new Map<string, MessageSpec>();
  private readonly layouts = new Map<ObjectSpec, Layout>();
  private readonly utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

  constructor(readonly spec: ProtocolSpec) {
    for (const message of spec.messages) this.byType.set(message.type, message);
  }

  /** Decode one message that `sender` sent; raise the protocol's error if it is bad. */
  decode(data: WireData, sender: string): object {
    const senderSpec = this.spec.senders[sender];
    if (senderSpec === undefined || !Object.hasOwn(this.spec.senders, sender)) {
      const known = Object.keys(this.spec.senders).sort().join(", ");
      throw new TypeError(`${this.spec.id}: unknown sender ${JSON.stringify(sender)}; one of ${known}`);
    }
    const text = this.text(data);
    let parsed;
    try {
      parsed = parseStrict(text, this.spec.maxReadDepth);
    } catch (exc) {
      if (exc instanceof JsonSyntaxError) throw this.error("malformed", `not valid JSON: ${exc.message}`);
      throw exc;
    }
    const root = parsed.value;
    if (!isRawObject(root)) throw this.error("malformed", "not a JSON object");
    const type = this.tag(root, parsed.duplicates);
    const message = this.byType.get(type);
    const pass: Pass = { messageType: type, fromUser: false, duplicates: parsed.duplicates };
    if (message === undefined || !message.senders.includes(sender)) {
      // A message of no type of the sender's is read whole before its type is judged
      // (spec decision `rule-order`): what is not JSON the protocol carries comes first.
      if (parsed.overflow) throw this.error("malformed", TOO_LARGE_NUMBER);
      if (parsed.deepest > this.spec.maxNestingDepth) this.checkNesting(root, pass, null);
      if (message !== undefined) {
        const by = [...message.senders].sort().join(", ");
        throw this.error("wrong_sender", `the ${sender} may not send it (sent by: ${by})`, null, type);
      }
      if (!senderSpec.acceptsUnknown) {
        throw this.error("unknown_type", `unknown message type from the ${sender}`, null, type);
      }
      this.readObject({ fields: senderSpec.envelope }, root, "$", pass);
      return new UnknownMessage(type, this.freeForm(root, "$", pass) as JsonObject);
    }
    const out = this.readObject(message, root, "$", pass);
    this.checkObject(message, out, "$", pass);
    if (parsed.deepest > this.spec.maxNestingDepth) this.checkNesting(out, pass);
    return out;
  }

  private get tooDeep(): string {
    return `nested deeper than ${this.spec.maxNestingDepth} arrays and objects`;
  }

  /**
   * Refuse a message with a value nested deeper than the bound, in what it keeps (a repeated
   * key's earlier values are not kept); `messageType` null: an error of the text, not a type's.
   */
  private checkNesting(message: unknown, pass: Pass, messageType: string | null = pass.messageType): void {
    const stack: [unknown, string, number][] = [[message, "$", 1]];
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      const [value, path, depth] = item;
      if (!Array.isArray(value) && !isRawObject(value)) continue;
      if (depth > this.spec.maxNestingDepth) throw this.error("malformed", this.tooDeep, path, messageType);
      if (Array.isArray(value)) value.forEach((child, i) => stack.push([child, `${path}[${i}]`, depth + 1]));
      else for (const key of Object.keys(value)) stack.push([(value as RawObject)[key], join(path, key), depth + 1]);
    }
  }

  /** Check `message` against every rule of the spec and return its compact JSON text. */
  encode(message: object): string {
    if (message instanceof UnknownMessage) return this.encodeUnknown(message);
    const type = (message as { type?: unknown }).type;
    const spec = typeof type === "string" ? this.byType.get(type) : undefined;
    if (spec === undefined || typeof type !== "string") {
      throw new TypeError(`${this.spec.id}.encode: not a ${this.spec.id} message: type ${String(type)}`);
    }
    const pass: Pass = { messageType: type, fromUser: true, duplicates: null };
    const out = this.readObject(spec, message, "$", pass);
    this.checkObject(spec, out, "$", pass);
    this.checkNesting(out, pass);
    return this.write(out, type);
  }

  private encodeUnknown(message: UnknownMessage): string {
    const data: unknown = message.data;
    const tag = isObject(data) ? (data as RawObject)["type"] : undefined;
    if (tag !== message.type || typeof tag !== "string") {
      throw this.error("malformed", `data.type is ${show(tag)}, not the message's type ${show(message.type)}`, null, message.type);
    }
    if (this.byType.has(tag)) {
      throw this.error("malformed", "a known type: encode its message, not an UnknownMessage", null, tag);
    }
    const pass: Pass = { messageType: tag, fromUser: true, duplicates: null };
    const text = this.write(this.freeForm(data, "$", pass), tag);
    // It must read back as an unknown message of some sender: its envelope included.
    let problem: unknown = null;
    for (const [sender, spec] of Object.entries(this.spec.senders)) {
      if (!spec.acceptsUnknown) continue;
      try {
        this.decode(text, sender);
        return text;
      } catch (exc) {
        problem = exc;
      }
    }
    throw problem ?? this.error("unknown_type", "no sender may send a type it does not know", null, tag);
  }

  // -- the text ---------------------------------------------------------------------------------

  private text(data: WireData): string {
    const max = this.spec.maxMessageBytes;
    if (typeof data === "string") {
      // A UTF-16 unit is at most 3 UTF-8 bytes: short text needs no counting.
      if (data.length * 3 > max) {
        const size = utf8Length(data);
        if (size > max) throw this.error("too_large", `message of ${size} bytes or more, at most ${max}`);
      }
      if (!isWellFormed(data)) throw this.error("malformed", LONE_SURROGATE);
      return data;
    }
    const bytes =
      data instanceof Uint8Array
        ? data
        : data instanceof ArrayBuffer
          ? new Uint8Array(data)
          : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (bytes.byteLength > max) {
      throw this.error("too_large", `message of ${bytes.byteLength} bytes or more, at most ${max}`);
    }
    try {
      return this.utf8.decode(bytes);
    } catch {
      throw this.error("malformed", `not valid UTF-8 at byte ${firstInvalidUtf8(bytes)}`);
    }
  }

  private tag(root: RawObject, duplicates: Duplicates | null): string {
    const type = root["type"];
    if (type === undefined) throw this.error("malformed", "the object has no `type` field");
    const pairs = duplicates?.get(root);
    const every = pairs === undefined ? [type] : pairs.filter(([key]) => key === "type").map(([, value]) => value);
    for (const value of every) {
      if (typeof value !== "string") throw this.error("malformed", "`type` is not a string");
    }
    if (every.some((value) => value !== type)) {
      throw this.error("malformed", `\`type\` is repeated with different values: ${every.map(show).join(", ")}`);
    }
    return type as string;
  }

  private write(value: unknown, type: string): string {
    const text = writeJson(value);
    const max = this.spec.maxMessageBytes;
    if (text.length * 3 > max) {
      const size = utf8Length(text);
      if (size > max) throw this.error("too_large", `${size} bytes encoded, at most ${max}`, null, type);
    }
    return text;
  }

  // -- the first pass: types, enums, ranges, lengths, patterns ------------------------------------

  private fields(spec: ObjectSpec): Map<string, FieldSpec> {
    return this.layout(spec).fields;
  }

  /** What the codec works out once per object type: its fields by name, what pass 2 needs. */
  private layout(spec: ObjectSpec): Layout {
    let layout = this.layouts.get(spec);
    if (layout === undefined) {
      layout = {
        fields: new Map(spec.fields.map((field) => [field.name, field])),
        required: spec.fields.filter((field) => field.required).length,
        checked: null,
      };
      this.layouts.set(spec, layout);
      layout.checked =
        (spec.rules ?? []).length > 0 ||
        spec.fields.some(
          (f) =>
            f.notBlank === true ||
            f.minBytes !== undefined ||
            f.maxBytes !== undefined ||
            f.uniqueBy !== undefined ||
            (f.kind === "struct" && this.layout(this.struct(f)).checked === true),
        );
    }
    return layout;
  }

  private readObject(spec: ObjectSpec, value: object, path: string, pass: Pass): Record<string, unknown> {
    const source = value as RawObject;
    const layout = this.layout(spec);
    const fields = layout.fields;
    let required = 0;
    const out: Record<string, unknown> = {};
    if (pass.messageType !== null && path === "$" && "type" in source) out["type"] = source["type"];
    const marks = pass.fromUser ? doublesOf(value) : undefined;
    // Every occurrence of a repeated key is read, in the order of the text, as msgspec reads.
    const pairs = pass.duplicates?.get(value);
    if (pairs === undefined) {
      for (const key of Object.keys(source)) if (this.readPair(spec, fields, key, source[key], path, pass, out, marks)) required++;
    } else {
      for (const [key, item] of pairs) this.readPair(spec, fields, key, item, path, pass, out, marks);
      required = spec.fields.filter((field) => field.required && Object.hasOwn(out, field.name)).length;
    }
    if (required < layout.required) {
      for (const field of spec.fields) {
        if (field.required && !Object.hasOwn(out, field.name)) {
          throw this.error("missing_field", "required field is missing", join(path, field.name), pass.messageType);
        }
      }
    }
    return out;
  }

  /** Read one pair into `out` (`marks`: the doubles of its container); whether it was a required field's. */
  private readPair(
    spec: ObjectSpec,
    fields: Map<string, FieldSpec>,
    key: string,
    item: unknown,
    path: string,
    pass: Pass,
    out: Record<string, unknown>,
    marks: ReadonlyMap<string | number, number> | undefined,
  ): boolean {
    if (path === "$" && key === "type") return false;
    if (item === undefined && pass.fromUser) return false; // an optional property left undefined
    const field = fields.get(key);
    if (field === undefined) {
      if (spec.rejectUnknownFields) {
        throw this.error("unknown_field", `Object contains unknown field \`${key}\``, join(path, key), pass.messageType);
      }
      if (pass.fromUser) {
        throw this.error("wrong_type", `\`${key}\` is not a field of this message: the encoder writes only the spec's fields`, join(path, key), pass.messageType);
      }
      return false;
    }
    const read = this.readField(field, item, join(path, key), pass);
    if (pass.fromUser && field.hasDefault && jsonEqual(read, field.default)) return field.required;
    if (key === "__proto__") defineValue(out, key, read);
    else out[key] = read;
    if (field.shape === undefined && this.double(field.kind, marks, key, item, pass)) markDouble(out, key, read);
    return field.required;
  }

  /**
   * Whether the value read from `item`, at `key` of a container with these `marks`, is a double
   * the writer must write as one though its value may be an integer: a number field's (when
   * encoding: decode returns a `number`, and its field says what it is), or a free-form double
   * (a `FloatLiteral` from the reader, or one that decode returned, marked in its container).
   */
  private double(kind: ValueKind, marks: ReadonlyMap<string | number, number> | undefined, key: string | number, item: unknown, pass: Pass): boolean {
    if (kind === "number") return pass.fromUser;
    return kind === "any" && (item instanceof FloatLiteral || isDouble(marks, key, item));
  }

  private readField(field: FieldSpec, value: unknown, path: string, pass: Pass): unknown {
    if (value === null) {
      if (field.nullable || (field.kind === "any" && field.shape === undefined)) return null;
      throw this.fail(field, "wrong_type", `Expected \`${expected(field)}\`, got \`null\``, path, pass, true);
    }
    if (field.shape === undefined) return this.readValue(field, value, path, pass, true);
    if (field.shape === "array") {
      if (!Array.isArray(value)) throw this.wrongType(field, "array", value, path, pass);
      const marks = pass.fromUser ? doublesOf(value) : undefined;
      const out = new Array<unknown>(value.length);
      for (let i = 0; i < value.length; i++) {
        out[i] = this.readValue(field, value[i], `${path}[${i}]`, pass, false);
        if (this.double(field.kind, marks, i, value[i], pass)) markDouble(out, i, out[i]);
      }
      this.count(field, value.length, "array", path, pass); // after the items, as msgspec
      return out;
    }
    if (!isObject(value)) throw this.wrongType(field, "object", value, path, pass);
    const keys = Object.keys(value);
    const marks = pass.fromUser ? doublesOf(value) : undefined;
    const out: Record<string, unknown> = {};
    for (const key of keys) {
      const item = (value as RawObject)[key];
      const read = this.readValue(field, item, join(path, key), pass, false);
      defineValue(out, key, read);
      if (this.double(field.kind, marks, key, item, pass)) markDouble(out, key, read);
    }
    this.count(field, keys.length, "object", path, pass);
    return out;
  }

  private count(field: FieldSpec, length: number, what: string, path: string, pass: Pass): void {
    if (field.maxLength !== undefined && length > field.maxLength) {
      throw this.fail(field, "too_many", `Expected \`${what}\` of length <= ${field.maxLength}`, path, pass, true);
    }
    if (field.minLength !== undefined && length < field.minLength) {
      throw this.fail(field, "invalid_value", `Expected \`${what}\` of length >= ${field.minLength}`, path, pass, true);
    }
  }

  /** One value: the field itself (`own`), or one item of its array or map. */
  private readValue(field: FieldSpec, value: unknown, path: string, pass: Pass, own: boolean): unknown {
    if (value instanceof NumberOverflow) {
      throw this.error("malformed", TOO_LARGE_NUMBER, path, pass.messageType);
    }
    if (value === null && !own && field.kind !== "any") {
      throw this.fail(field, "wrong_type", `Expected \`${expected(field)}\`, got \`null\``, path, pass, false);
    }
    switch (field.kind) {
      case "string":
        if (typeof value !== "string") throw this.wrongType(field, "str", value, path, pass);
        if (pass.fromUser && !isWellFormed(value)) throw this.fail(field, "invalid_value", LONE_SURROGATE, path, pass, own);
        if (own) this.constant(field, value, path, pass);
        if (own && field.shape === undefined) {
          if (field.maxLength !== undefined && value.length > field.maxLength && codePoints(value, field.maxLength) > field.maxLength) {
            throw this.fail(field, "invalid_value", `Expected \`str\` of length <= ${field.maxLength}`, path, pass, own);
          }
          if (field.minLength !== undefined && value.length < 2 * field.minLength && codePoints(value, field.minLength) < field.minLength) {
            throw this.fail(field, "invalid_value", `Expected \`str\` of length >= ${field.minLength}`, path, pass, own);
          }
        }
        if (field.pattern !== undefined && !field.pattern.test(value)) {
          throw this.fail(field, "invalid_value", `Expected \`str\` matching regex ${pyRepr(field.pattern.source)}`, path, pass, own);
        }
        return value;
      case "integer":
        if (typeof value === "bigint") {
          this.range(field, value, "int", path, pass, own); // exact: no double holds it
          return value;
        }
        if (typeof value !== "number" || !Number.isInteger(value)) {
          throw this.wrongType(field, "int", value, path, pass);
        }
        this.range(field, value, "int", path, pass, own);
        if (own) this.constant(field, value, path, pass);
        return value;
      case "number": {
        const number = value instanceof FloatLiteral ? value.value : typeof value === "bigint" ? Number(value) : value;
        if (number === Infinity || number === -Infinity) {
          throw this.fail(field, "malformed", TOO_LARGE_NUMBER, path, pass, false);
        }
        if (typeof number !== "number") throw this.wrongType(field, "float", value, path, pass);
        if (!Number.isFinite(number)) throw this.fail(field, "wrong_type", `${number} is not a JSON number`, path, pass, false);
        this.range(field, number, "float", path, pass, own);
        if (own) this.constant(field, number, path, pass);
        return number;
      }
      case "boolean":
        if (typeof value !== "boolean") throw this.wrongType(field, "bool", value, path, pass);
        if (own) this.constant(field, value, path, pass);
        return value;
      case "datetime": {
        if (typeof value !== "string") throw this.wrongType(field, "datetime", value, path, pass);
        const canonical = canonicalDateTime(value);
        if (canonical === null) throw this.fail(field, "invalid_value", "Invalid RFC3339 encoded datetime", path, pass, own);
        return canonical;
      }
      case "enum": {
        const values = field.values ?? [];
        const type = typeof values[0] === "number" ? "int" : "str";
        const integer = typeof value === "bigint" || (typeof value === "number" && Number.isInteger(value));
        if (type === "str" ? typeof value !== "string" : !integer) {
          throw this.wrongType(field, type, value, path, pass);
        }
        if (typeof value === "bigint" || !values.includes(value as string | number)) {
          throw this.fail(field, "invalid_value", `Invalid enum value ${pyRepr(value)}`, path, pass, own);
        }
        return value;
      }
      case "struct": {
        if (!isObject(value)) throw this.wrongType(field, "object", value, path, pass);
        return this.readObject(this.struct(field), value, path, pass);
      }
      case "object":
        if (!isObject(value)) throw this.wrongType(field, "object", value, path, pass);
        return this.freeForm(value, path, pass);
      case "any":
        return this.freeForm(value, path, pass);
    }
  }

  private struct(field: FieldSpec): ObjectSpec {
    const spec = this.spec.structs[field.struct ?? ""];
    if (spec === undefined) throw new Error(`${this.spec.id}: no nested type ${String(field.struct)}`);
    return spec;
  }

  private constant(field: FieldSpec, value: unknown, path: string, pass: Pass): void {
    if (field.hasConst && value !== field.const) {
      throw this.fail(field, "invalid_value", `Invalid enum value ${pyRepr(value)}`, path, pass, true);
    }
  }

  private range(field: FieldSpec, value: number | bigint, type: string, path: string, pass: Pass, own: boolean): void {
    if (field.minimum !== undefined && value < field.minimum) {
      throw this.fail(field, "invalid_value", `Expected \`${type}\` >= ${field.minimum}`, path, pass, own);
    }
    if (field.maximum !== undefined && value > field.maximum) {
      throw this.fail(field, "invalid_value", `Expected \`${type}\` <= ${field.maximum}`, path, pass, own);
    }
  }

  /**
   * A free-form JSON value, copied into plain objects and arrays, each of which marks the doubles
   * it holds (`markDouble`); anything JSON cannot carry is refused.
   */
  private freeForm(value: unknown, path: string, pass: Pass, depth = 0): unknown {
    if (value === null || typeof value === "boolean") return value;
    if (typeof value === "string") {
      if (pass.fromUser && !isWellFormed(value)) throw this.error("invalid_value", LONE_SURROGATE, path, pass.messageType);
      return value;
    }
    if (typeof value === "number") {
      if (!Number.isFinite(value)) throw this.error("wrong_type", `${value} is not a JSON number`, path, pass.messageType);
      return value;
    }
    if (typeof value === "bigint") return value;
    if (value instanceof FloatLiteral) return value.value;
    if (value instanceof NumberOverflow) throw this.error("malformed", TOO_LARGE_NUMBER, path, pass.messageType);
    if (depth >= this.spec.maxReadDepth) throw this.error("wrong_type", "nested too deeply to write", path, pass.messageType);
    if (Array.isArray(value)) {
      const marks = pass.fromUser ? doublesOf(value) : undefined;
      let doubles: number[] | null = null;
      const out = value.map((item, i) => {
        if (item instanceof FloatLiteral || isDouble(marks, i, item)) (doubles ??= []).push(i);
        return this.freeForm(item, `${path}[${i}]`, pass, depth + 1);
      });
      if (doubles !== null) for (const i of doubles as number[]) markDouble(out, i, out[i]);
      return out;
    }
    if (isObject(value)) {
      const marks = pass.fromUser ? doublesOf(value) : undefined;
      const out: Record<string, unknown> = {};
      // A repeated key's earlier values are read too (a number beyond a double is malformed
      // wherever it stands, as msgspec reads every occurrence), and the last one is kept.
      const pairs = pass.duplicates?.get(value);
      if (pairs !== undefined) for (const [key, item] of pairs) this.freeForm(item, join(path, key), pass, depth + 1);
      for (const key of Object.keys(value)) {
        const item = (value as RawObject)[key];
        if (item === undefined && pass.fromUser) continue;
        const copy = this.freeForm(item, join(path, key), pass, depth + 1);
        defineValue(out, key, copy);
        if (item instanceof FloatLiteral || isDouble(marks, key, item)) markDouble(out, key, copy);
      }
      return out;
    }
    throw this.error("wrong_type", `a value of type ${typeof value} is not JSON`, path, pass.messageType);
  }

  // -- the second pass: byte limits, blank text, uniqueness, rules across fields ------------------

  private checkObject(spec: ObjectSpec, value: Record<string, unknown>, path: string, pass: Pass): void {
    if (this.layout(spec).checked === false) return;
    for (const field of spec.fields) {
      const item = value[field.name];
      if (item === undefined || item === null || !Object.hasOwn(value, field.name)) continue;
      const where = join(path, field.name);
      if (field.shape === "array") {
        const items = item as unknown[];
        if (field.uniqueBy !== undefined) {
          const by = field.uniqueBy;
          const keys = by === "value" ? items : items.map((x) => (x as Record<string, unknown>)[by]);
          const problem = unique(keys);
          if (problem !== null) throw this.fail(field, "invalid_value", problem, where, pass, true, true);
        }
        items.forEach((x, i) => this.checkValue(field, x, `${where}[${i}]`, pass));
      } else if (field.shape === "map") {
        const items = item as Record<string, unknown>;
        for (const key of Object.keys(items)) this.checkValue(field, items[key], join(where, key), pass);
      } else {
        this.checkValue(field, item, where, pass);
      }
    }
    for (const rule of spec.rules ?? []) {
      const problem = this.rule(rule, spec, value);
      if (problem !== null) {
        const code = rule.code ?? this.spec.codes.invalid_value;
        throw new this.spec.error(code, `${problem}: ${rule.description}`, path, pass.messageType);
      }
    }
  }

  private checkValue(field: FieldSpec, value: unknown, path: string, pass: Pass): void {
    if (field.kind === "struct") {
      this.checkObject(this.struct(field), value as Record<string, unknown>, path, pass);
      return;
    }
    if (field.kind !== "string" || field.hasConst || typeof value !== "string") return;
    let problem: string | null = null;
    if (field.notBlank && this.spec.blank.test(value)) problem = "is blank";
    else if (field.minBytes !== undefined) {
      const size = utf8Length(value);
      if (size < field.minBytes) problem = `${size} UTF-8 bytes, at least ${field.minBytes}`;
    }
    if (problem === null && field.maxBytes !== undefined && value.length * 3 > field.maxBytes) {
      const size = utf8Length(value);
      if (size > field.maxBytes) problem = `${size} UTF-8 bytes, at most ${field.maxBytes}`;
    }
    if (problem !== null) throw this.fail(field, "invalid_value", problem, path, pass, true, true);
  }

  private rule(rule: RuleSpec, spec: ObjectSpec, value: Record<string, unknown>): string | null {
    const fields = this.fields(spec);
    const present = (name: string): boolean => {
      const field = fields.get(name);
      return field !== undefined && (field.required || field.hasDefault === true || Object.hasOwn(value, name));
    };
    const candidates = rule.fields ?? [];
    const there = candidates.filter(present);
    switch (rule.kind) {
      case "at_most_one_of":
        return there.length <= 1 ? null : `${there.join(" and ")} are both present`;
      case "exactly_one_of":
        if (there.length === 1) return null;
        return there.length === 0 ? `one of ${candidates.join(", ")} is required` : `${there.join(" and ")} are both present`;
      case "at_least_one_of":
        return there.length > 0 ? null : `one of ${candidates.join(", ")} is required`;
      case "min_fields":
        return there.length >= (rule.count ?? 0) ? null : `at least ${rule.count} field(s) required, got none`;
      case "requires": {
        const first = fields.get(rule.field ?? "");
        const second = fields.get(rule.other ?? "");
        const get = (field: FieldSpec | undefined): unknown => {
          if (field === undefined) return UNSET;
          if (Object.hasOwn(value, field.name)) return value[field.name];
          return field.hasDefault ? field.default : UNSET;
        };
        const set = get(first);
        const other = get(second);
        if (set === UNSET || set === null || set === false || jsonEqual(other, rule.equals)) return null;
        return `${rule.field} requires ${rule.other} == ${pyRepr(rule.equals)}, got ${pyRepr(other)}`;
      }
    }
  }

  // -- errors ----------------------------------------------------------------------------------

  private error(kind: keyof DecodeErrorCodes, detail: string, path: string | null = null, type: string | null = null): VoxwireProtocolError {
    return new this.spec.error(this.spec.codes[kind], detail, path, type);
  }

  /**
   * An error of one field. `own`: about the field's own value, whose code the spec may replace
   * (as it does for every second-pass check, `second`); a missing field and a wrong type keep
   * the decode default.
   */
  private fail(field: FieldSpec, kind: keyof DecodeErrorCodes, detail: string, path: string, pass: Pass, own: boolean, second = false): VoxwireProtocolError {
    const override = field.code !== undefined && (own || second) && kind !== "wrong_type";
    const code = override ? (field.code as string) : this.spec.codes[kind];
    return new this.spec.error(code, detail, path, pass.messageType);
  }

  private wrongType(field: FieldSpec, want: string, value: unknown, path: string, pass: Pass): VoxwireProtocolError {
    return this.fail(field, "wrong_type", `Expected \`${want}\`, got \`${jsonType(value)}\``, path, pass, false);
  }
}

// -- helpers -------------------------------------------------------------------------------------

const nativeWellFormed = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed;

/** Whether `text` holds no lone surrogate (so it has a UTF-8 form). */
export function isWellFormed(text: string): boolean {
  if (nativeWellFormed !== undefined) return nativeWellFormed.call(text);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xd800 || c > 0xdfff) continue;
    const next = text.charCodeAt(i + 1);
    if (c > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) return false;
    i++;
  }
  return true;
}

function isRawObject(value: unknown): value is RawObject {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof FloatLiteral) && !(value instanceof NumberOverflow);
}

function isObject(value: unknown): value is object {
  if (!isRawObject(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === null || proto === Object.prototype;
}

function defineValue(out: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  else out[key] = value;
}

function join(path: string, key: string): string {
  return `${path}.${key}`;
}

function expected(field: FieldSpec): string {
  if (field.shape === "array") return "array";
  if (field.shape === "map") return "object";
  return { string: "str", integer: "int", number: "float", boolean: "bool", datetime: "datetime", object: "object", any: "any", enum: "str", struct: "object" }[field.kind];
}

function jsonType(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "string") return "str";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "number") return Number.isInteger(value) ? "int" : "float";
  if (typeof value === "bigint") return "int";
  if (value instanceof FloatLiteral) return "float";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return "object";
  return typeof value;
}

/** Python's `repr` of a string or number, as the Python binding words its errors. */
function pyRepr(value: unknown): string {
  if (value === UNSET) return "UNSET";
  if (typeof value === "string") return `'${value.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  if (value === true) return "True";
  if (value === false) return "False";
  if (value === null) return "None";
  return String(value);
}

function show(value: unknown): string {
  if (typeof value === "bigint") return value.toString();
  return typeof value === "string" ? pyRepr(value) : JSON.stringify(value) ?? String(value);
}

function unique(keys: readonly unknown[]): string | null {
  const seen = new Set<unknown>();
  for (let i = 0; i < keys.length; i++) {
    if (seen.has(keys[i])) return `item ${i} repeats ${pyRepr(keys[i])}`;
    seen.add(keys[i]);
  }
  return null;
}

/** Characters of `text` as code points (a pair of surrogates is one), counted up to `limit` + 1. */
export function codePoints(text: string, limit: number): number {
  if (text.length <= limit) {
    let pairs = 0;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff) pairs++;
    }
    return text.length - pairs;
  }
  let count = 0;
  for (let i = 0; i < text.length && count <= limit; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) i++;
    count++;
  }
  return count;
}

const ASCII = /^[\u0000-\u007f]*$/;
const ENCODER = new TextEncoder();

/** The length of `text` in UTF-8 bytes (a lone surrogate counts 3, as U+FFFD). */
export function utf8Length(text: string): number {
  if (ASCII.test(text)) return text.length;
  if (scratch.length < text.length * 3) scratch = new Uint8Array(text.length * 3);
  return ENCODER.encodeInto(text, scratch).written;
}

let scratch = new Uint8Array(4096);

function firstInvalidUtf8(bytes: Uint8Array): number {
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  let low = 0;
  let high = bytes.length;
  // The longest valid prefix, by bisection (the error path only).
  while (low < high) {
    const mid = (low + high + 1) >> 1;
    try {
      decoder.decode(bytes.subarray(0, mid), { stream: true });
      decoder.decode();
      low = mid;
    } catch {
      high = mid - 1;
    }
  }
  return low;
}

/** JSON equality: numbers by value, objects by their keys, arrays in order. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => jsonEqual(x, b[i]));
  if (typeof a === "object" && a !== null && typeof b === "object" && b !== null && !Array.isArray(b)) {
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && jsonEqual((a as RawObject)[k], (b as RawObject)[k]));
  }
  return false;
}

const DATE_TIME = /^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d):(\d\d)(?:\.(\d+))?(?:([Zz])|([+-])(\d\d):?(\d\d))$/;
const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/**
 * An RFC 3339 date-time with a zone in the one form both bindings write (spec decision
 * `ts-written-one-way`): `T`; the fraction rounded to the microsecond and written with six
 * digits, or left out when it is zero; `Z` for a zero offset, else the offset with its colon.
 * `null` when it names no instant: the calendar is checked (30 February, hour 24 and second 60
 * are invalid).
 */
export function canonicalDateTime(text: string): string | null {
  const m = DATE_TIME.exec(text);
  if (m === null) return null;
  const [, y, mo, d, h, mi, s, fraction, z, sign, oh, om] = m as unknown as string[];
  const year = Number(y);
  const month = Number(mo);
  const day = Number(d);
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = month === 2 && leap ? 29 : (DAYS[month - 1] ?? 0);
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > days) return null;
  if (Number(h) > 23 || Number(mi) > 59 || Number(s) > 59) return null;
  if (z === undefined && (Number(oh) > 23 || Number(om) > 59)) return null;
  const zone = z !== undefined || (oh === "00" && om === "00") ? "Z" : `${sign}${oh}:${om}`;
  let clock = `${h}:${mi}:${s}`;
  let date = `${y}-${mo}-${d}`;
  let micros = "";
  if (fraction !== undefined) {
    if (fraction.length <= 6) micros = `.${fraction.padEnd(6, "0")}`;
    else {
      const head = Number(fraction.slice(0, 6));
      const rest = fraction.slice(6);
      const up = rest[0]! > "5" || (rest[0] === "5" && (/[1-9]/.test(rest.slice(1)) || head % 2 === 1));
      const rounded = head + (up ? 1 : 0);
      if (rounded === 1_000_000) {
        const next = new Date(Date.UTC(year, month - 1, day, Number(h), Number(mi), Number(s) + 1));
        if (next.getUTCFullYear() > 9999) return null;
        const iso = next.toISOString();
        date = iso.slice(0, 10);
        clock = iso.slice(11, 19);
        micros = "";
      } else micros = `.${String(rounded).padStart(6, "0")}`;
    }
  }
  if (micros === ".000000") micros = "";
  return `${date}T${clock}${micros}${zone}`;
}
