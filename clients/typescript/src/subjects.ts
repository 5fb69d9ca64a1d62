/**
 * The names on the wire (docs/CONTRACT.md §2): the subjects a tenant's client publishes and
 * reads, and the event stream its durable consumers live on. The prefixes are the daemon's
 * defaults; a deployment that changed them passes its own.
 */

/** The three subject prefixes a daemon can be configured with. */
export interface SubjectPrefixes {
  /** Commands: `timer.cmd`. */
  readonly commands: string;
  /** Events: `timer.evt`. */
  readonly events: string;
  /** The query and cancel API: `timer.api`. */
  readonly api: string;
}

export const DEFAULT_PREFIXES: SubjectPrefixes = {
  commands: "timer.cmd",
  events: "timer.evt",
  api: "timer.api",
};

/** The stream the daemon publishes its events on (`timer.evt.>`). */
export const DEFAULT_EVENT_STREAM = "TIMER_EVENTS";

/** The API's verbs, the third token of `timer.api.<verb>.<tenantId>` (§6). */
export type Verb = "get" | "list" | "stats" | "cancel" | "cancel-many";

/** The events a tenant can consume, by the token after the event prefix. */
export type EventKind = "due" | "expired" | "rejected";

/** One tenant's subjects. */
export class Subjects {
  constructor(
    readonly tenantId: string,
    readonly prefixes: SubjectPrefixes = DEFAULT_PREFIXES,
  ) {}

  get schedule(): string {
    return `${this.prefixes.commands}.schedule.${this.tenantId}`;
  }

  get scheduleMany(): string {
    return `${this.prefixes.commands}.schedule-many.${this.tenantId}`;
  }

  get cancel(): string {
    return `${this.prefixes.commands}.cancel.${this.tenantId}`;
  }

  get cancelMany(): string {
    return `${this.prefixes.commands}.cancel-many.${this.tenantId}`;
  }

  event(kind: EventKind): string {
    return `${this.prefixes.events}.${kind}.${this.tenantId}`;
  }

  api(verb: Verb): string {
    return `${this.prefixes.api}.${verb}.${this.tenantId}`;
  }
}
