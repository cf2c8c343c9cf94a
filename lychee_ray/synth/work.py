"""Work conversations: a user and an assistant on the user's project, BEAM-like. Every plot is
user/assistant pairs; the facts are what the user states, decides and prefers, and what the
assistant concretely proposes (names, numbers, commands). Replies are long (`work_reply`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from lychee_ray.synth.build import Builder
from lychee_ray.synth.calendar import day_text, describe_past, recent_day
from lychee_ray.synth.layout import NoRoom
from lychee_ray.synth.model import Fact, TurnRef
from lychee_ray.synth.work_reply import ReplyWriter, slug
from lychee_ray.synth.work_words import (
    ACKS,
    ASK_OPENERS,
    COLUMNS,
    CONTRADICTED_TOOLS,
    DECISIONS,
    ENDPOINTS,
    FEATURES,
    FOLLOWUPS,
    INSTRUCTIONS,
    MILESTONES,
    NEVER_SAID,
    PAST_WORK,
    PREFERENCES,
    TABLE_WORDS,
    TABLES,
    TASKS,
    TOOLS,
)


@dataclass
class Project:
    user: str  # the user's name (LoCoMo's speaker_a)
    name: str
    kind: str
    components: list[str]
    writer: ReplyWriter

    def component(self, b: Builder) -> str:
        return b.rng.choice(self.components)


def version(low: int, high: int):
    return lambda r: f"{r.randint(low, high)}.{r.randrange(1, 20)}.{r.randrange(1, 12)}"


def _pair(b: Builder, project: Project, ref: TurnRef, user_text: str, lead: str | None = None, component: str | None = None) -> TurnRef:
    """The user's turn at `ref` and the assistant's reply after it (about `component`, or one of
    the project's); the reply's ref."""
    b.say(ref, user_text)
    reply = TurnRef(ref.session, ref.position + 1)
    b.say(reply, project.writer.reply(lead or b.rng.choice(ACKS), component or project.component(b), b.rng.choice(TASKS)))
    return reply


def _user_fact(b: Builder, project: Project, text: str, subject: str, attribute: str, value: str, kind: str = "attribute") -> Fact:
    (ref,) = b.place((2, 0))
    _pair(b, project, ref, text)
    return b.fact(ref, subject, attribute, value, kind)


# --------------------------------------------------------------------------------------------
# what the user states (single-hop), what the assistant proposes (assistant_recall)
# --------------------------------------------------------------------------------------------
def stated_fact(b: Builder, p: Project) -> None:
    choice = b.rng.randrange(4)
    if choice == 0:
        tool, low, high = b.rng.choice(TOOLS)
        b.claim(p.name, f"{tool} version")
        value = b.pool.draw_made(version(low, high))
        text, question, attribute = f"For context, {p.name} runs on {tool} {value}.", f"Which {tool} version does {p.name} run on?", f"{tool} version"
    elif choice == 1:
        b.claim(p.name, "team size")
        value = b.pool.draw_made(lambda r: f"{r.randrange(3, 15)} engineers")
        text, question, attribute = f"There are {value} on the {p.name} team.", f"How many engineers work on {p.name}?", "team size"
    elif choice == 2:
        component = p.component(b)
        b.claim(component, "port")
        value = b.pool.draw_made(lambda r: f"port {r.randrange(3000, 9900)}")
        text, question, attribute = f"The {component} listens on {value}.", f"Which port does the {component} listen on?", "port"
    else:
        b.claim(p.name, "active users")
        value = b.pool.draw_made(lambda r: f"{r.randrange(2, 90) * 100} active users")
        text, question, attribute = f"We have about {value} at the moment.", f"How many active users does {p.name} have?", "active users"
    fact = _user_fact(b, p, text, p.name, attribute, value)
    b.ask(question, value, "single_hop", [fact])


def proposal(b: Builder, p: Project) -> None:
    component = p.component(b)
    choice = b.rng.randrange(5)
    if choice == 0:
        value = b.pool.draw_made(lambda r: f"{r.randrange(8, 65)} connections")
        ask, lead, question, attribute = (f"How big should the database connection pool be for the {component}?",
                                          f"I would set the pool size to {value} for the {component}.", f"What pool size did you suggest for the {component}?", "pool size")
    elif choice == 1:
        value = b.pool.draw_made(lambda r: f"{r.randrange(2, 60) * 60} seconds")
        ask, lead, question, attribute = (f"How long should cached entries live in the {component}?",
                                          f"Set the cache TTL to {value}; that keeps the {component} fresh without hammering the database.",
                                          f"What cache TTL did you recommend for the {component}?", "cache TTL")
    elif choice == 2:
        first, second = b.rng.choice(TABLE_WORDS)
        value = b.pool.draw_made(lambda r: f"{first}_{second}_{r.choice(('log', 'ledger', 'store', 'history', 'journal'))}")
        ask, lead, question, attribute = (f"What should I call the table that stores {first} {second}?", f"I would call the table `{value}`, which says exactly what it holds.",
                                          f"What table name did you suggest for storing {first} {second}?", "table name")
    elif choice == 3:
        value = b.pool.draw_made(lambda r: f"{slug(p.name)}-admin reindex --batch-size {r.randrange(50, 999)}")
        ask, lead, question, attribute = (f"How do I rebuild the search index for the {component}?", f"Run `{value}` from the project root to rebuild it.",
                                          f"What command did you suggest for rebuilding the search index of the {component}?", "reindex command")
    else:
        value = b.pool.draw_made(lambda r: f"{r.randrange(3, 10)} times")
        ask, lead, question, attribute = (f"How many times should the {component} retry a failed call?", f"Retry up to {value} with exponential backoff, then give up and log it.",
                                          f"How many retries did you recommend for the {component}?", "retries")
    b.claim(component, attribute)
    (ref,) = b.place((2, 0))
    reply = _pair(b, p, ref, ask, lead, component)
    fact = b.fact(reply, component, attribute, value, kind="proposal")
    b.ask(question, value, "assistant_recall", [fact])
    b.mention(None, component)


def preference(b: Builder, p: Project) -> None:
    value, question = b.rng.choice(PREFERENCES)
    b.claim(p.user, f"prefers {value}")
    fact = _user_fact(b, p, f"Before we go on: I prefer {value} in this codebase.", p.user, "preference", value, kind="preference")
    b.ask(question, f"An answer that follows the stated preference for {value}.", "preference", [fact], difficulty="medium")


def instruction(b: Builder, p: Project) -> None:
    value, question, compliance = b.rng.choice(INSTRUCTIONS)
    b.claim(p.user, f"instruction {value}")
    fact = _user_fact(b, p, f"From now on, {value}.", p.user, "instruction", value, kind="instruction")
    b.ask(question, f"An answer that {compliance}, as asked: {value}.", "instruction", [fact], difficulty="medium")


# --------------------------------------------------------------------------------------------
# knowledge update and contradiction
# --------------------------------------------------------------------------------------------
def _two_sessions(b: Builder, p: Project, first: str, second: str) -> tuple[TurnRef, TurnRef]:
    refs = b.place((2, 0), (2, 0), spread=True)
    _pair(b, p, refs[0], first)
    _pair(b, p, refs[1], second)
    return refs[0], refs[1]


def _update(b: Builder, p: Project, subject: str, attribute: str, texts: tuple[str, str], values: tuple[str, str], question: str) -> None:
    b.claim(subject, attribute)
    refs = _two_sessions(b, p, *texts)
    facts = [b.fact(r, subject, attribute, v) for r, v in zip(refs, values)]
    b.change("supersedes", *facts)
    b.ask(question, values[1], "knowledge_update", facts, ["original_info", "updated_info"], difficulty="medium")


def revised_value(b: Builder, p: Project) -> None:
    choice = b.rng.randrange(4)
    if choice == 0:
        component = p.component(b)
        old = b.pool.draw_made(lambda r: f"{r.randrange(300, 900)} ms")
        new = b.pool.draw_made(lambda r: f"{r.randrange(60, 290)} ms")
        texts = (f"The {component} takes {old} per request at the moment.", f"With the new index in place, the {component} takes {new} per request.")
        _update(b, p, component, "latency", texts, (old, new), f"How long does the {component} take per request now?")
        b.mention(None, component)
    elif choice == 1:
        tool, low, high = b.rng.choice(TOOLS)
        old, new = b.pool.draw_made(version(low, high)), b.pool.draw_made(version(low, high))
        texts = (f"We are on {tool} {old} for now.", f"We just upgraded {tool} to {new}.")
        _update(b, p, p.name, f"{tool} version", texts, (old, new), f"Which {tool} version does {p.name} use now?")
    elif choice == 2:
        milestone = b.pool.draw(MILESTONES)
        refs = b.place((2, 0), (2, 0), spread=True)
        days = [b.session_day(r) + timedelta(days=b.rng.randrange(10, 60)) for r in refs]
        if days[0] == days[1]:
            raise NoRoom("the deadline did not move")
        values = (b.pool.claim(day_text(days[0])), b.pool.claim(day_text(days[1])))
        b.claim(milestone, "due date")
        _pair(b, p, refs[0], f"The {milestone} is due on {values[0]}.")
        _pair(b, p, refs[1], f"Heads up: the {milestone} has moved to {values[1]}.")
        facts = [b.fact(r, milestone, "due date", v) for r, v in zip(refs, values)]
        b.change("supersedes", *facts)
        b.ask(f"When is the {milestone} due?", values[1], "knowledge_update", facts, ["original_info", "updated_info"], difficulty="medium")
    else:
        old = b.pool.draw_made(lambda r: f"{r.randrange(3, 9)} engineers")
        new = b.pool.draw_made(lambda r: f"{r.randrange(9, 16)} engineers")
        texts = (f"There are {old} on the {p.name} team.", f"We hired again, so the {p.name} team is {new} now.")
        _update(b, p, p.name, "team size", texts, (old, new), f"How many engineers work on {p.name} now?")


def never_then_did(b: Builder, p: Project) -> None:
    tool = b.pool.draw(CONTRADICTED_TOOLS)
    component = p.component(b)
    refs = b.place((2, 0), (2, 0), spread=True)
    _pair(b, p, refs[0], f"I have never used {tool} in {p.name}.")
    _pair(b, p, refs[1], f"Quick update: I set up {tool} for the {component} and it works.", component=component)
    first, second = f"never used {tool}", f"set up {tool}"
    facts = [b.fact(refs[0], p.user, f"uses {tool}", first, kind="statement"), b.fact(refs[1], p.user, f"uses {tool}", second, kind="statement")]
    b.change("contradicts", *facts)
    answer = f"The conversation contradicts itself: you said you had {first} in {p.name}, and later that you {second} for the {component}."
    b.ask(f"Have I used {tool} in {p.name}?", answer, "contradiction", facts, ["first_statement", "second_statement"], difficulty="clear",
          rubric=["The answer points out the contradiction", f"The answer mentions: {first}", f"The answer mentions: {second}"])


# --------------------------------------------------------------------------------------------
# temporal: deadlines, finished work, weeks between, order
# --------------------------------------------------------------------------------------------
def _finished(b: Builder, p: Project, ref: TurnRef, thing: str, day) -> Fact:
    expression = describe_past(b.rng, day, b.session_day(ref))
    _pair(b, p, ref, f"I finished the {thing} {expression}.")
    return b.fact(ref, p.user, thing, day.isoformat(), kind="event", expression=expression, day=day)


def _thing(b: Builder, p: Project) -> str:
    return b.pool.draw([w.format(component=c) for w in PAST_WORK for c in p.components])


def deadline(b: Builder, p: Project) -> None:
    sprint = b.rng.randrange(2, 9)
    b.claim(p.name, f"sprint {sprint}")
    (ref,) = b.place((2, 0))
    day = b.session_day(ref) + timedelta(days=b.rng.randrange(5, 30))
    expression = f"on {day_text(day)}"
    _pair(b, p, ref, f"Sprint {sprint} wraps up {expression}.")
    fact = b.fact(ref, p.name, f"sprint {sprint} end", day.isoformat(), kind="event", expression=expression, day=day)
    b.ask(f"On what date does sprint {sprint} wrap up?", day_text(day), "temporal", [fact])


def finished_when(b: Builder, p: Project) -> None:
    thing = _thing(b, p)
    (ref,) = b.place((2, 0))
    fact = _finished(b, p, ref, thing, recent_day(b.rng, b.session_day(ref)))
    b.ask(f"When did I finish the {thing}?", day_text(fact.date), "temporal", [fact])


def weeks_to_milestone(b: Builder, p: Project) -> None:
    thing, milestone = _thing(b, p), b.pool.draw(MILESTONES)
    b.claim(milestone, "due date")
    refs = b.place((2, 0), (2, 0), spread=True)
    done = recent_day(b.rng, b.session_day(refs[0]), most=10)
    due = done + timedelta(weeks=1)
    while due <= b.session_day(refs[1]):
        due += timedelta(weeks=1)
    first = _finished(b, p, refs[0], thing, done)
    expression = f"on {day_text(due)}"
    _pair(b, p, refs[1], f"The {milestone} is scheduled {expression}.")
    second = b.fact(refs[1], milestone, "date", due.isoformat(), kind="event", expression=expression, day=due)
    weeks = (due - done).days // 7
    b.ask(f"How many weeks separate the day I finished the {thing} from the {milestone}?", f"{weeks} week{'s' if weeks > 1 else ''}",
          "temporal", [first, second], ["first_event", "second_event"], difficulty="medium")


def finished_first(b: Builder, p: Project) -> None:
    things = [_thing(b, p), _thing(b, p)]
    refs = b.place((2, 0), (2, 0), spread=True)
    days = [recent_day(b.rng, b.session_day(r)) for r in refs]
    if days[0] == days[1]:
        raise NoRoom("both finished on one day")
    facts = [_finished(b, p, r, t, d) for r, t, d in zip(refs, things, days)]
    first = 0 if days[0] < days[1] else 1
    roles = ["first_event", "second_event"] if first == 0 else ["second_event", "first_event"]
    shown = b.rng.sample(things, 2)
    b.ask(f"Which did I finish first, the {shown[0]} or the {shown[1]}?", f"the {things[first]}", "temporal", facts, roles, difficulty="medium")


# --------------------------------------------------------------------------------------------
# across sessions: lists, order of mention, decisions
# --------------------------------------------------------------------------------------------
def spread_list(b: Builder, p: Project) -> None:
    if b.rng.random() < 0.5:
        table = b.pool.draw(TABLES)
        items = [b.pool.draw(COLUMNS), b.pool.draw(COLUMNS)]
        texts = (f"I want to add a `{items[0]}` column to the `{table}` table.", f"One more change for `{table}`: I am adding a `{items[1]}` column as well.")
        subject, attribute, question = table, "new column", f"Which two fields did I say I would add to the {table} table?"
    else:
        subject = p.component(b)
        items = [b.pool.draw(ENDPOINTS), b.pool.draw(ENDPOINTS)]
        texts = (f"I added a `{items[0]}` endpoint to the {subject}.", f"I also wired up `{items[1]}` on the {subject}.")
        attribute, question = "new endpoint", f"Which endpoints did I add to the {subject}?"
    b.claim(subject, attribute)
    refs = _two_sessions(b, p, *texts)
    facts = [b.fact(r, subject, attribute, v) for r, v in zip(refs, items)]
    b.ask(question, ", ".join(items), "multi_hop", facts, difficulty="medium")


def mention_order(b: Builder, p: Project) -> None:
    features = [b.pool.draw(FEATURES) for _ in range(3)]
    refs = b.place(*[(2, 0)] * 3, spread=b.board.sessions >= 3)
    openers = b.rng.sample(("Next on my list is the {f}.", "I would like to start on the {f} now.", "Let us look at the {f}.", "I want to plan the {f}."), 3)
    facts = []
    for ref, feature, opener in zip(refs, features, openers):
        _pair(b, p, ref, opener.format(f=feature))
        facts.append(b.fact(ref, p.user, "brought up", feature, kind="topic"))
    shown = b.rng.sample(features, 3)
    b.ask(f"Put these in the order I first raised them: the {shown[0]}, the {shown[1]}, the {shown[2]}.", ", ".join(features), "event_ordering", facts,
          difficulty="hard", rubric=[f"The answer places the {f} at position {i}" for i, f in enumerate(features, start=1)])


def decisions(b: Builder, p: Project) -> None:
    component = p.component(b)
    b.claim(component, "decisions")
    chosen = [d.format(component=component) for d in b.rng.sample(DECISIONS, 3)]
    refs = b.place(*[(2, 0)] * 3, spread=b.board.sessions >= 3)
    facts = []
    for ref, decision in zip(refs, chosen):
        _pair(b, p, ref, f"I have decided to {decision}.")
        facts.append(b.fact(ref, component, "decision", decision, kind="decision"))
    summary = f"You decided to {chosen[0]}; then to {chosen[1]}; and then to {chosen[2]}."
    b.ask(f"Give me a summary of what I decided about the {component}.", summary, "summarization", facts, difficulty="hard",
          rubric=[f"The answer mentions the decision to {d}" for d in chosen])


def never_mentioned(b: Builder, p: Project) -> None:
    term = b.rng.choice(NEVER_SAID)
    b.claim("never said", term)
    question = b.rng.choice((f"What did I decide about {term} for {p.name}?", f"When did I add {term} to {p.name}?"))
    b.ask(question, "not mentioned", "abstention", [], never_said=term, rubric=[f"The answer says {term} never came up"])


PLOTS = (
    mention_order, decisions, spread_list, revised_value, revised_value, never_then_did, weeks_to_milestone, finished_first,
    stated_fact, stated_fact, proposal, proposal, preference, instruction, deadline, finished_when, never_mentioned, never_mentioned,
)  # fmt: skip


def plots(project: Project) -> list:
    return [partial(plot, p=project) for plot in PLOTS]


# --------------------------------------------------------------------------------------------
# filler: the user asks about a component, the assistant answers at length
# --------------------------------------------------------------------------------------------
def filler_pair(b: Builder, p: Project, ref: TurnRef, components: list[str]) -> None:
    component = components.pop(0) if components else p.component(b)
    task = b.rng.choice(TASKS)
    followup = ref.position > 1 and b.rng.random() < 0.25
    ask = b.rng.choice(FOLLOWUPS if followup else ASK_OPENERS).format(component=component, task=task)
    b.say(ref, ask, followup=followup)
    lead = f"Sure, here is how I would go about {task} in the {component}."
    b.say(TurnRef(ref.session, ref.position + 1), p.writer.reply(lead, component, task))

