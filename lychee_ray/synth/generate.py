"""Generate the conversations of an archive: dates, plots in rounds, filler, padding, checks.

Each conversation has its own random stream (seeded by the archive's seed and its index), so
one conversation does not change when another does, and the whole is deterministic. Planting
runs in rounds over the style's plots: the first round tries every plot, so every kind of
question appears whenever there is room; later rounds add more until about half the turns
hold a labelled fact, the rest being filler.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import datetime, timedelta

from lychee_ray.synth import chitchat, work
from lychee_ray.synth.build import Builder, LabelError, contains
from lychee_ray.synth.calendar import session_starts
from lychee_ray.synth.layout import Board
from lychee_ray.synth.model import Conversation, Session, TurnRef
from lychee_ray.synth.params import SynthParams
from lychee_ray.synth.people import new_person
from lychee_ray.synth.pool import ValuePool
from lychee_ray.synth.words import NEVER_SAID as CHITCHAT_NEVER_SAID
from lychee_ray.synth.words import SMALL_TALK
from lychee_ray.synth.work_reply import ReplyWriter
from lychee_ray.synth.work_words import COMPONENTS, LIBRARIES, PROJECT_HEADS, PROJECT_KINDS, PROJECT_TAILS, USER_PADDING
from lychee_ray.synth.work_words import NEVER_SAID as WORK_NEVER_SAID

NEVER_SAID = tuple(t for terms in CHITCHAT_NEVER_SAID.values() for t in terms) + WORK_NEVER_SAID
PLANTED_FRACTION = 0.5  # later rounds stop once this share of the turns holds a fact
MAX_ROUNDS = 200


def generate(params: SynthParams) -> list[Conversation]:
    return [build_conversation(params, i) for i in range(params.conversations)]


def build_conversation(params: SynthParams, index: int) -> Conversation:
    rng = random.Random(params.seed * 1_000_003 + index)
    style = params.style_of(index)
    sessions = [Session(n, start) for n, start in enumerate(session_starts(rng, params.sessions), start=1)]
    greeting_turns = 2 if style == "chitchat" else 0
    board = Board(params.sessions, params.turns_per_session, greeting_turns)
    b = Builder(f"synth-{index + 1:04d}", style, ("", ""), sessions, board, ValuePool(rng, NEVER_SAID), rng)
    if style == "chitchat":
        cast = chitchat.Cast((new_person(b), new_person(b)))
        b.speakers = (cast.name(0), cast.name(1))
        plant(b, chitchat.plots(cast))
        fill_chitchat(b, cast, params.turn_words)
        return finish(b, cast.name(0), cast.name(1), f"{cast.name(0)} and {cast.name(1)} catching up")
    project = new_project(b, params)
    b.speakers = ("user", "assistant")
    plant(b, work.plots(project))
    fill_work(b, project, params.turn_words)
    return finish(b, project.user, "Assistant", f"{project.name}, a {project.kind}")


def new_project(b: Builder, params: SynthParams) -> work.Project:
    user = new_person(b).name
    name = b.pool.draw([h + t for h in PROJECT_HEADS for t in PROJECT_TAILS])
    libraries = {lib: b.pool.draw_made(work.version(0, 4)) for lib in b.rng.sample(LIBRARIES, 4)}
    components = b.rng.sample(COMPONENTS, 5)
    return work.Project(user, name, b.rng.choice(PROJECT_KINDS), components, ReplyWriter(b.rng, params.turn_words, libraries))


def plant(b: Builder, plots: list[Callable[[Builder], None]]) -> None:
    for round_no in range(MAX_ROUNDS):
        placed = 0
        for plot in plots:
            if round_no and b.board.used_fraction() >= PLANTED_FRACTION:
                return
            placed += b.attempt(plot)
        if not placed:
            return


def fill_chitchat(b: Builder, cast: chitchat.Cast, words: int) -> None:
    queues = [[m.text for m in b.mentions if m.speaker in (None, who)] for who in (0, 1)]
    for ref in b.board.free():
        b.say(ref, chitchat.filler(b, cast, ref, queues[Board.speaker_of(ref.position)]))
    for turn in b.lines.values():
        turn.text = padded(b.rng, turn.text, words, SMALL_TALK)


def fill_work(b: Builder, project: work.Project, words: int) -> None:
    mentioned = [m.text for m in b.mentions]
    components = list(dict.fromkeys(mentioned + b.rng.sample(project.components, len(project.components))))
    for ref in b.board.free():
        if Board.speaker_of(ref.position) == 0:
            work.filler_pair(b, project, ref, components)
    for turn in b.lines.values():
        if turn.speaker == "user":
            turn.text = padded(b.rng, turn.text, words, USER_PADDING)


def padded(rng: random.Random, text: str, words: int, sentences: tuple[str, ...]) -> str:
    """`text` with sentences from `sentences` (each at most once) added until it has `words` words."""
    extra = [s for s in rng.sample(sentences, len(sentences)) if s not in text]
    while len(text.split()) < words and extra:
        text = f"{text} {extra.pop()}"
    return text


def finish(b: Builder, speaker_a: str, speaker_b: str, title: str) -> Conversation:
    for session in b.sessions:
        session.turns = [b.lines[TurnRef(session.number, p)] for p in range(1, b.board.turns + 1)]
    last = b.sessions[-1].start
    asked = datetime(last.year, last.month, last.day, 18, 0) + timedelta(days=b.rng.randrange(1, 6))
    for i, q in enumerate(b.questions):
        q.question_id = f"{b.conversation_id}:q{i:04d}"  # the LoCoMo reader's ids: its qa list in order
    conv = Conversation(b.conversation_id, b.style, speaker_a, speaker_b, title, b.sessions, b.facts, b.changes, b.questions, asked)
    check_never_said(conv)
    return conv


def check_never_said(conv: Conversation) -> None:
    """No turn may contain a term an abstention question could ask about."""
    for turn in conv.turns():
        for term in NEVER_SAID:
            if contains(turn.text, term):
                raise LabelError(f"{conv.conversation_id}: turn {turn.ref} says {term!r}, which abstention questions ask about")
