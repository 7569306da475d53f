/**
 * The one step function every role's session runs, over the tables generated from the spec.
 *
 * Each role's session rules are data in its protocol's spec (`sessions:`): states, inputs,
 * actions and transitions. `python -m codegen generate` turns them into one `Machine` per role
 * (`CLIENT_MACHINE` in `ovp/machines.ts`, ...); a role's core keeps its state, asks `step` where
 * an input leads, and runs the transition's actions in order. The Python binding has the same
 * function over the same tables (`voxwire.machine.step`).
 */

/** One cell of a table: the state an input leads to, and the actions run on the way, in order. */
export interface Transition<S extends string, A extends string> {
  readonly target: S;
  readonly actions: readonly A[];
}

/** One role's session rules, as the spec states them (generated: never written by hand). */
export interface Machine<S extends string, I extends string, A extends string> {
  readonly protocol: string;
  readonly role: string;
  readonly initial: S;
  /** `transitions[state][input]`: an input a state does not list cannot happen in it. */
  readonly transitions: { readonly [state in S]: { readonly [input in I]?: Transition<S, A> } };
  /** The states in which the peer's messages are taken (elsewhere they are refused). */
  readonly receiving: readonly S[];
  /** The states in which the role may send its messages. */
  readonly sending: readonly S[];
  /** The states nothing leaves. */
  readonly final: readonly S[];
}

/** A call the session's state does not allow: an input the role's table has no transition for. */
export class SessionStateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SessionStateError";
  }
}

/** An input the role's table does not allow in the session's state. */
export class TransitionRefused extends SessionStateError {
  readonly state: string;
  readonly input: string;

  constructor(protocol: string, role: string, state: string, input: string) {
    super(`${protocol} ${role}: '${input}' cannot happen in state '${state}'`);
    this.name = "TransitionRefused";
    this.state = state;
    this.input = input;
  }
}

/** A transition `step` took (what `traced` records). */
export interface Taken {
  readonly protocol: string;
  readonly role: string;
  readonly state: string;
  readonly input: string;
  readonly target: string;
}

let taken: Taken[] | null = null;

/**
 * Record every transition taken until `stop()` is called, in order, into the list returned (the
 * conformance testee proves with it that a session case takes the transitions it claims to
 * cover, as `voxwire.machine.traced` does in Python). One trace at a time: a second replaces it.
 */
export function traced(): { readonly taken: readonly Taken[]; stop(): void } {
  const list: Taken[] = [];
  taken = list;
  return {
    taken: list,
    stop: () => {
      if (taken === list) taken = null;
    },
  };
}

/**
 * Where `input` leads from `state`, and what to do on the way. Throws `TransitionRefused` when the
 * table has no such transition: the caller broke the session's rules, or the core has a bug.
 */
export function step<S extends string, I extends string, A extends string>(
  machine: Machine<S, I, A>,
  state: S,
  input: I,
): Transition<S, A> {
  const found = machine.transitions[state][input];
  if (found === undefined) {
    throw new TransitionRefused(machine.protocol, machine.role, state, input);
  }
  taken?.push({ protocol: machine.protocol, role: machine.role, state, input, target: found.target });
  return found;
}
