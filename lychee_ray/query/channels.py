"""Retrieval channels: each a small registered unit that ranks evidence for one route.

A channel gets a `RouteQuery` (the loaded conversation, the route, its query vector, this
route's cosine to every row of the tables the channel declares, the time-window scope) and
returns a ranking of evidence keys, adding its candidates to the question's `CandidatePool`. The
config names which channels run (`retrieval.channels`); they run in registration order, route by
route, and each ranking goes to fusion as "r<route>:<channel>".

Adding a channel: a subclass with a `name`, the `tables` whose cosines it reads, and `rank`,
decorated with `@register`; then name it in `retrieval.channels`.

The built-in ones (DESIGN.md step 6):
- record_vector: records nearest to the route's query vector;
- node: evidence nodes matched by name (the route's entities and topics) or by vector, expanded
  to their records, ranked by similarity to the query;
- time: records in the route's time window (the rule in conversation.py), by similarity;
- turn_vector / turn_bm25: raw turns by vector and by BM25 (a long turn by its best passage,
  turn_docs.py), each hit mapped to the records that cite its turn (a turn no record covers
  stays as raw evidence: the passage hit, for a long turn). "turn" names both.
- speaker_turn / speaker_record: when the route names exactly one of the conversation's
  speakers, the turns that speaker said (and the records citing them) by vector: a second
  ranking within what that person said, where the answer nearly always is (focus.py). "speaker"
  names both; a route naming no speaker, or two, gets nothing from them.
- standing: for a route in the asker's own voice ("I", "my", "you"; "the user" where the asker
  talks to an assistant), the preference and constraint records alone (standing instructions:
  "always ... when I ask about ..."), which govern a request on their subject yet share few
  words with it.
- neighbor: the turns beside the route's best turns in their session (or the records citing
  them), where the fact often is when the question's words are in the turn before it; in
  conversations between people only, not with an assistant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.evidence import CandidatePool
from lychee_ray.query.focus import route_text
from lychee_ray.schemas import Route


@dataclass
class WindowScope:
    """Masks over the loaded conversation's records and turns: what a windowed route may return
    under `retrieval.time_routes: filter`, or what the route's one named speaker said."""

    records: np.ndarray
    turns: np.ndarray


@dataclass
class RouteQuery:
    conv: LoadedConversation
    route: Route
    vector: np.ndarray  # the route's query vector (unit length)
    sims: dict[str, np.ndarray]  # table -> this route's cosine to each row that has a vector
    window: tuple[str | None, str | None] | None  # the route's time window, when it has one
    scope: WindowScope | None
    k: int  # how deep a channel ranks: top_k_per_channel, deeper for a plural ask (Retriever._depths)
    speaker_k: int  # how deep the speaker channels rank: speaker_top_k, deeper for a plural ask
    said: WindowScope | None = None  # the turns the route's one named speaker said, and their records (focus.py)

    def within(self, table: str, mask: np.ndarray | None) -> np.ndarray | None:
        """`mask` and the time scope of `table` ("records" or "turns") together (None: no limit)."""
        window = getattr(self.scope, table) if self.scope else None
        if mask is None or window is None:
            return window if mask is None else mask
        return mask & window


class Channel:
    name: ClassVar[str]
    # what `rank` reads the route vector's cosine to: a table of the loaded conversation
    # (records, nodes, turns) or "docs", the raw-turn documents (turn_docs.py)
    tables: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg: RetrievalConfig):
        self.cfg = cfg

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        raise NotImplementedError


CHANNELS: dict[str, type[Channel]] = {}
# config names that stand for several channels
CHANNEL_GROUPS: dict[str, tuple[str, ...]] = {"turn": ("turn_vector", "turn_bm25"), "speaker": ("speaker_turn", "speaker_record")}


def register(cls: type[Channel]) -> type[Channel]:
    CHANNELS[cls.name] = cls
    return cls


def channels_for(cfg: RetrievalConfig) -> list[Channel]:
    """The configured channels, in registration order (the order rankings reach fusion, whose
    ties go to first appearance); an unknown name is one sentence naming the known ones."""
    names: set[str] = set()
    for name in cfg.channels:
        if name not in CHANNELS and name not in CHANNEL_GROUPS:
            raise ValueError(f"retrieval.channels: unknown channel {name!r}; known: {', '.join([*CHANNELS, *CHANNEL_GROUPS])}")
        names.update(CHANNEL_GROUPS.get(name, (name,)))
    return [cls(cfg) for name, cls in CHANNELS.items() if name in names]


@register
class RecordVectorChannel(Channel):
    name = "record_vector"
    tables = ("records",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        allowed = q.scope.records if q.scope else None
        return pool.add_records(q.conv.records.top(q.sims["records"], q.k, allowed))


@register
class NodeChannel(Channel):
    name = "node"
    tables = ("nodes",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        conv, most = q.conv, self.cfg.max_node_matches
        names = list(dict.fromkeys([*q.route.entities, *q.route.topics]))
        matched = conv.match_nodes(names) if names else []
        by_vector = conv.nodes.top(q.sims["nodes"], most)
        ids = conv.nodes.ids
        node_ids = list(dict.fromkeys([ids[i] for i in matched] + [ids[i] for i in by_vector]))[: most * 2]
        if not node_ids:
            return []
        rows = conv.node_records(node_ids)
        if q.scope:
            rows = [i for i in rows if q.scope.records[i]]
        return pool.add_records(conv.records.rank_by_vector(rows, q.vector)[: q.k])


@register
class TimeChannel(Channel):
    name = "time"

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        if not q.window:
            return []
        return pool.add_records(q.conv.records.rank_by_vector(q.conv.records_in_window(*q.window), q.vector)[: q.k])


@register
class TurnVectorChannel(Channel):
    name = "turn_vector"
    tables = ("docs",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        hits = q.conv.docs.top(q.sims["docs"], q.k, q.scope.turns if q.scope else None)
        return pool.add_turn_hits(hits, q.scope.records if q.scope else None)


@register
class TurnBm25Channel(Channel):
    name = "turn_bm25"

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        hits = q.conv.docs.bm25(route_text(q.route), q.k, q.scope.turns if q.scope else None)
        return pool.add_turn_hits(hits, q.scope.records if q.scope else None)


@register
class SpeakerTurnChannel(Channel):
    name = "speaker_turn"
    tables = ("docs",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        if q.said is None:
            return []
        hits = q.conv.docs.top(q.sims["docs"], q.speaker_k, q.within("turns", q.said.turns))
        return pool.add_turn_hits(hits, q.scope.records if q.scope else None)


@register
class SpeakerRecordChannel(Channel):
    name = "speaker_record"
    tables = ("records",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        if q.said is None:
            return []
        return pool.add_records(q.conv.records.top(q.sims["records"], q.speaker_k, q.within("records", q.said.records)))


# A request in the asker's own voice ("what should I ...", "can you suggest ...") is one that
# standing instructions and preferences govern; a question about someone else ("what does
# Odalys like?") is answered by the facts the other channels rank, and gets nothing here.
FIRST_OR_SECOND_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll|you|your|yours)\b", re.I)
# how a planner model restates the asker of an assistant conversation ("find the user's
# preferred units" for "which units do I like?")
THE_USER = re.compile(r"\bthe user(?:'s)?\b", re.I)


@register
class StandingChannel(Channel):
    """The records that say how the person wants things done or what they like and must avoid
    (types preference and constraint: "always give the gear ratio when I ask about cycling
    routes", "I'm allergic to nuts"), by vector. Why: such a record governs every later
    question on its subject, yet it shares few words with one ("a route for me on Sunday?"), and in
    a long conversation about that subject hundreds of records outrank it on the other channels.
    Ranked among the few records of these types, the one that applies comes first."""

    name = "standing"
    tables = ("records",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        if not in_askers_voice(q.route.goal, q.conv.with_assistant):
            return []
        return pool.add_records(q.conv.records.top(q.sims["records"], q.k, q.within("records", q.conv.standing_records)))


def in_askers_voice(goal: str, with_assistant: bool) -> bool:
    """A route about the asker: "I", "my", "you" in its goal, or, in a conversation with an
    assistant, "the user" (where the asker is the user, whom an LLM planner names so)."""
    return bool(FIRST_OR_SECOND_PERSON.search(goal) or (with_assistant and THE_USER.search(goal)))


def tables_read(channels: Iterable[Channel]) -> list[str]:
    """The tables whose cosines the channels read, once each."""
    return list(dict.fromkeys(t for ch in channels for t in ch.tables))


@register
class NeighborChannel(Channel):
    """The turns said next to the route's best turns: within `neighbor_span` turns of each of
    the `neighbor_seeds` best turn documents by vector, in the same session, nearest seed first.

    Why: on the LoCoMo tune part most gold turns that no channel ranked had a neighbour that
    one did. The fact sits in the reply or the line after ("the red one, in the end"), while
    the question's words are in the turn before it ("which bike did you buy?"), so neither the
    vector nor BM25 reaches it. Under a time window only in-window turns and records count.

    It runs only where people talk to each other (`retrieval.neighbor_with_assistant`): beside
    a user's turn to an assistant is a long reply whose records fill the budget, and on BEAM's
    user-assistant conversations the channel cost recall (preference following most).
    """

    name = "neighbor"
    tables = ("docs",)

    def rank(self, q: RouteQuery, pool: CandidatePool) -> list[str]:
        conv = q.conv
        if conv.with_assistant and not self.cfg.neighbor_with_assistant:
            return []
        hits = conv.docs.top(q.sims["docs"], self.cfg.neighbor_seeds, q.scope.turns if q.scope else None)
        seeds = list(dict.fromkeys(int(conv.docs.turn_of[d]) for d in hits))
        near = adjacent_turns(seeds, conv.turns.cols["session_id"], self.cfg.neighbor_span)
        if q.scope:
            near = [t for t in near if q.scope.turns[t]]
        return pool.add_turn_evidence(near, q.scope.records if q.scope else None)[: q.k]


def adjacent_turns(seeds: list[int], sessions: list[str], span: int) -> list[int]:
    """Positions (turn order) within `span` of each seed in the seed's own session, seed by seed,
    nearest first and the later turn before the earlier one (the reply before the question); no
    seed itself, each position once."""
    taken = set(seeds)
    out: list[int] = []
    for t in seeds:
        for step in range(1, span + 1):
            for j in (t + step, t - step):
                if 0 <= j < len(sessions) and j not in taken and sessions[j] == sessions[t]:
                    taken.add(j)
                    out.append(j)
    return out
