"""`RulesEncoder`: one segment's turns -> `EncodeOutput`, the LLM encoder's reply, with no LLM.

One record per contentful sentence of a person (filler fragments join the next sentence, a short
anaphoric one the sentence before; questions to the other speaker become open threads unless a
turn holds nothing else, or unless that speaker is an assistant: what a user asks an assistant
for is worth remembering), each rewritten to stand alone. An assistant's reply gives instead
its few most concrete blocks (rules/deliverables.py: what it proposed or delivered, not its
generic advice). Then the resolution state d_k (speakers, entities with aliases in recency order,
date anchor, open threads), which is what carries across segments.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import date

from lychee_ray.dates import parse_source_datetime
from lychee_ray.rules.deliverables import concreteness, deliverables
from lychee_ray.rules.entities import PHOTO_OF_RE, EntityIndex, extract_entities
from lychee_ray.rules.lexicon import ASSISTANT_ROLES, GREETING_WORDS, ROLE_SPEAKERS
from lychee_ray.rules.pronouns import cap, display_name, resolve_pronouns
from lychee_ray.rules.text import (
    ANAPHOR_START_RE,
    CAPTION_RE,
    INTERROGATIVE_RE,
    RECENT_CUE_RE,
    RHETORICAL_RE,
    WORD_RE,
    classify,
    content_words,
    fallback_topic,
    insert_dates,
    is_name_prefix,
    norm_token,
    normalize_text,
    segment_keyphrases,
    split_sentences,
    topics_in,
)
from lychee_ray.rules.timeparse import (
    TimeExpr,
    find_time_expressions,
    format_day,
    to_normalized,
)
from lychee_ray.schemas import (
    EncodedRecord,
    EncodeOutput,
    EntityState,
    NormalizedTime,
    ResolutionState,
)
from lychee_ray.tables import RECORD_TYPES, Turn


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------
@dataclass
class _Unit:
    text: str  # normalized source text of one record (one sentence, maybe with merged fragments)
    turn: Turn
    n_content: int
    question: bool


def is_assistant(turn: Turn) -> bool:
    """An assistant's turn (by its role, or its speaker when the source gives roles as speakers)."""
    return said_by_assistant(turn.role, turn.speaker)


def said_by_assistant(role: str | None, speaker: str | None) -> bool:
    """`is_assistant` on a turn's two columns (query/conversation.py reads them as columns)."""
    return (role or "").lower() in ASSISTANT_ROLES or (speaker or "").lower() in ASSISTANT_ROLES


def _is_question(sentence: str) -> bool:
    """A question addressed to the other speaker. Declarative sentences that end in "?"
    ("We're hiking the ridge trail on Saturday, want to come along?") and rhetorical "Guess what happened
    at work today?" carry facts and are kept as statements."""
    if not sentence.rstrip(" \"')]").endswith("?"):
        return False
    return bool(INTERROGATIVE_RE.match(sentence)) and not RHETORICAL_RE.match(sentence)


def _turn_units(turn: Turn, names: frozenset[str], to_assistant: bool = False) -> tuple[list[_Unit], list[str]]:
    """The record-sized pieces of one turn, and its question sentences (for open threads).
    `to_assistant`: the turn is a user's to an assistant, whose questions are kept as records."""
    if is_assistant(turn):
        return [_Unit(text, turn, concreteness(text), False) for text in deliverables(normalize_text(turn.text))], []
    text = normalize_text(turn.text)
    captions = [c.strip() for c in CAPTION_RE.findall(text) if c.strip()]
    body = CAPTION_RE.sub("", text).strip()
    units: list[_Unit] = []
    questions: list[str] = []
    pending: list[str] = []  # filler fragments waiting for the next sentence
    for sent in split_sentences(body):
        n = len(content_words(sent, names))
        if n == 0:
            words = [norm_token(t) for t in WORD_RE.findall(sent)]
            if all(w in GREETING_WORDS or w in names or is_name_prefix(w, names) for w in words):
                continue  # "Hey Tess!": a pure greeting
            pending.append(sent)
            continue
        q = _is_question(sent)
        if q:
            questions.append(sent)
        if units and not q and not units[-1].question and ANAPHOR_START_RE.match(sent) and len(sent.split()) <= 12 and not pending:
            units[-1].text += " " + sent  # "It was so powerful." belongs to the sentence before
            units[-1].n_content += n
            continue
        units.append(_Unit(" ".join(pending + [sent]), turn, n, q))
        pending = []
    if pending and units:
        units[-1].text += " " + " ".join(pending)
    statements = [u for u in units if not u.question]
    if statements and not to_assistant:
        units = statements
    elif units:  # a turn of questions only keeps them, as one record
        units = [_Unit(" ".join(u.text for u in units), turn, sum(u.n_content for u in units), True)]
    if captions:
        cap = " ".join(f"[image: {c}]" for c in captions)
        if units:
            units[-1].text += " " + cap
        elif any(content_words(c, names) for c in captions):
            units = [_Unit(cap, turn, len(content_words(cap, names)), False)]
    return units, questions




def _topic_source(text: str) -> str:
    """Text to take topics from: the caption tag and its "a photo of" are no topic."""
    return _IMAGE_TAG_RE.sub(" ", PHOTO_OF_RE.sub(" ", text))


_IMAGE_TAG_RE = re.compile(r"\[image:")


def _turn_date(turn: Turn) -> date | None:
    dt = parse_source_datetime(turn.timestamp) if turn.timestamp else None
    return dt.date() if dt else None


def _session_expr(cue: re.Match, anchor: date) -> TimeExpr:
    iso = anchor.isoformat()
    return TimeExpr(iso, iso, "day", cue.group(0), cue.span(), True, format_day(anchor))


class RulesEncoder:
    """Segment -> `EncodeOutput` without an LLM.

    A record whose sentence names no time gets no time, as the LLM contract says ("null dates
    when unknown"); when it was said follows from its source turns.
    max_entities: cap on d_k's entity list (participants are always kept).
    """

    def __init__(self, max_entities: int = 64):
        self.max_entities = max_entities

    # ---- public -------------------------------------------------------------------------
    def encode(
        self,
        turns: list[Turn],
        context: ResolutionState | None,
        recent_records: list[EncodedRecord],
        *,
        summary: bool = False,
    ) -> EncodeOutput:
        participants = self._participants(turns, context)
        index = self._index(participants, context, recent_records)
        names = frozenset(p.lower() for p in index.participants)  # what "has content words" is measured against
        anchor_fallback = date.fromisoformat(context.date_anchor) if context and context.date_anchor else None
        records: list[EncodedRecord] = []
        unit_turns: list[str] = []
        n_content: list[int] = []
        asked: list[tuple[int, str, str]] = []  # (turn position, asker, rewritten question)
        mentions: list[tuple[str, str]] = []  # (entity, speaker) in order of mention
        to_assistant = any(is_assistant(t) for t in turns)
        per_turn = [_turn_units(turn, names, to_assistant) for turn in turns]
        keyphrases = segment_keyphrases(
            "\n".join(_topic_source(normalize_text(t.text)) for t in turns),
            [*index.participants, *(a for aliases in index.aliases.values() for a in aliases)],
        )  # the segment is the YAKE document: enough text for its statistics, shared by its records
        for pos, (turn, (units, questions)) in enumerate(zip(turns, per_turn)):
            anchor = _turn_date(turn) or anchor_fallback
            other = self._other(turn.speaker, participants)
            for u in units:
                rec = self._record(u, anchor, other, index, keyphrases)
                records.append(rec)
                unit_turns.append(turn.turn_id)
                n_content.append(u.n_content)
                mentions.extend((e, turn.speaker) for e in rec.entities)
            for q in questions:
                asked.append((pos, turn.speaker, resolve_pronouns(q, turn.speaker, other)))
        state = self._state(turns, context, participants, index, mentions, asked, anchor_fallback)
        if summary:
            records = self._summary(records, unit_turns, n_content, turns)
        return EncodeOutput(records=records, state=state)

    # ---- records ------------------------------------------------------------------------
    def _record(self, u: _Unit, anchor: date | None, other: str | None, index: EntityIndex, keyphrases: list[str]) -> EncodedRecord:
        speaker = u.turn.speaker
        times = find_time_expressions(u.text, anchor)
        if not times and anchor is not None and (cue := RECENT_CUE_RE.search(u.text)):
            times = [_session_expr(cue, anchor)]
        text = resolve_pronouns(insert_dates(u.text, times), speaker, other)
        shown = display_name(speaker)
        if shown.lower() not in text.lower():
            text = f"{cap(shown)}: {text}"
        entities = [] if speaker.lower() in ROLE_SPEAKERS else [speaker]
        for e in extract_entities(u.text, index):
            if e not in entities:
                entities.append(e)
        if other and other.lower() not in ROLE_SPEAKERS and other not in entities and re.search(rf"\b{re.escape(display_name(other))}\b", text):
            entities.append(other)
        topic_text = _topic_source(u.text)
        topics = topics_in(topic_text, keyphrases) or fallback_topic(content_words(topic_text, index.canonical))
        time = to_normalized(times[0] if times else None)
        return EncodedRecord(
            type=classify(u.text, bool(times)),
            text=text,
            entities=entities,
            topics=topics,
            time=time,
            source_turn_ids=[u.turn.turn_id],
        )

    def _summary(self, records: list[EncodedRecord], unit_turns: list[str], n_content: list[int], turns: list[Turn]) -> list[EncodedRecord]:
        """Ablation: one record per segment from each turn's main (most contentful) sentence."""
        if not records:
            return []
        best: dict[str, int] = {}
        for i, tid in enumerate(unit_turns):
            if tid not in best or n_content[i] > n_content[best[tid]]:
                best[tid] = i
        main = sorted(best.values())
        entities = list(dict.fromkeys(e for r in records for e in r.entities))
        topic_counts = Counter(t for r in records for t in r.topics)
        first = {t: i for i, t in reversed(list(enumerate(t for r in records for t in r.topics)))}
        topics = sorted(topic_counts, key=lambda t: (-topic_counts[t], first[t]))
        type_counts = Counter(r.type for r in records)
        rtype = min(type_counts, key=lambda t: (-type_counts[t], RECORD_TYPES.index(t)))
        return [
            EncodedRecord(
                type=rtype,
                text=" ".join(records[i].text for i in main),
                entities=entities,
                topics=topics,
                time=_union_time([r.time for r in records]),
                source_turn_ids=[t.turn_id for t in turns],
            )
        ]

    # ---- participants, entities, state ----------------------------------------------------
    @staticmethod
    def _participants(turns: list[Turn], context: ResolutionState | None) -> list[str]:
        out: list[str] = []
        if context:
            out.extend(e.name for e in context.entities if e.referent.endswith("(speaker)"))
        for t in turns:
            if t.speaker and t.speaker not in out:
                out.append(t.speaker)
        return out

    @staticmethod
    def _other(speaker: str, participants: list[str]) -> str | None:
        others = [p for p in participants if p != speaker]
        return others[0] if len(participants) == 2 and len(others) == 1 else None

    @staticmethod
    def _index(participants: list[str], context: ResolutionState | None, recent: list[EncodedRecord]) -> EntityIndex:
        index = EntityIndex(participants=[p for p in participants if p.lower() not in ROLE_SPEAKERS])
        for p in index.participants:
            index.add(p)
        if context:
            for ent in context.entities:
                index.add(ent.name)
                for alias in ent.aliases:
                    index.canonical.setdefault(alias.lower(), ent.name)
                    index.aliases.setdefault(ent.name, [])
                    if alias not in index.aliases[ent.name]:
                        index.aliases[ent.name].append(alias)
        for rec in recent:
            for e in rec.entities:
                index.add(e)
        return index

    def _state(
        self,
        turns: list[Turn],
        context: ResolutionState | None,
        participants: list[str],
        index: EntityIndex,
        mentions: list[tuple[str, str]],
        asked: list[tuple[int, str, str]],
        anchor_fallback: date | None,
    ) -> ResolutionState:
        # Known entities in recency order: incoming first, then re-mentioned ones move last.
        ents: dict[str, EntityState] = {}
        for e in context.entities if context else []:
            ents[e.name.lower()] = EntityState(name=e.name, aliases=list(e.aliases), referent=e.referent)
        for p in participants:
            if p.lower() not in ents:
                ents[p.lower()] = EntityState(name=p, aliases=[], referent=f"{p} (speaker)")
        for name, speaker in mentions:
            key = name.lower()
            prev = ents.pop(key, None)
            ents[key] = prev or EntityState(name=name, aliases=[], referent=f"mentioned by {display_name(speaker)}")
        for canonical, aliases in index.aliases.items():
            ent = ents.get(canonical.lower())
            if ent is not None:
                ent.aliases = list(dict.fromkeys(ent.aliases + aliases))
        order = {p.lower(): i for i, p in enumerate(participants)}
        speakers = sorted((e for e in ents.values() if e.referent.endswith("(speaker)")), key=lambda e: order.get(e.name.lower(), len(order)))
        rest = [e for e in ents.values() if not e.referent.endswith("(speaker)")]
        keep = max(0, self.max_entities - len(speakers))
        entities = speakers + (rest[-keep:] if keep else [])
        dates = [d for d in (_turn_date(t) for t in turns) if d is not None]
        anchor = max(dates) if dates else anchor_fallback
        return ResolutionState(entities=entities, date_anchor=anchor.isoformat() if anchor else None, open_threads=_open_threads(turns, context, asked))


def _open_threads(turns: list[Turn], context: ResolutionState | None, asked: list[tuple[int, str, str]]) -> list[str]:
    """Up to 3 most recent questions that no other speaker answered within the segment. An
    incoming thread ("Asker: question?") stays open if nobody but its asker spoke here."""
    speakers = {t.speaker for t in turns}
    kept = []
    for thread in context.open_threads if context else []:
        asker = thread.split(": ", 1)[0] if ": " in thread else None
        if asker is not None and not (speakers - {asker}):
            kept.append(thread)
    for pos, asker, q in asked:
        if not any(t.speaker != asker for t in turns[pos + 1 :]):
            kept.append(q if q.lower().startswith(display_name(asker).lower()) else f"{cap(display_name(asker))}: {q}")
    return list(dict.fromkeys(kept))[-3:]


def _union_time(times: list[NormalizedTime]) -> NormalizedTime:
    dated = [t for t in times if t.start and t.end]
    if not dated:
        return to_normalized(None)
    s = min(t.start for t in dated)
    e = max(t.end for t in dated)
    span = (date.fromisoformat(e) - date.fromisoformat(s)).days
    gran = "day" if span == 0 else "week" if span <= 7 else "month" if span <= 62 else "year"
    exprs = [t.expression for t in dated if t.expression]
    return NormalizedTime(start=s, end=e, granularity=gran, expression="; ".join(exprs) if exprs else None)
