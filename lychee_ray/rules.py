"""The `rules` backend: encoder, planner and answerer with no LLM (deterministic, CPU only).

- Encoder: one record per utterance sentence, attributed to its speaker; first-person pronouns
  become the speaker's name; relative dates are resolved against the session date (timeparse)
  and written into the text; entities are speaker names and capitalized spans; topics come from
  a small lexicon. Same output schema as the LLM (EncodeOutput).
- Planner: the question itself, its entities, its content words and its parsed date window.
- Answerer: extractive, the evidence sentence sharing most content words with the question.
"""

from __future__ import annotations

import re
from datetime import date, datetime

from .schemas import EncodedRecord, EncodeOutput, EntityState, NormalizedTime, QueryPlan, ResolutionState, Route, TimeWindow, Turn
from .timeparse import find_time_expressions, resolve_question_window, to_normalized

_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(\[])")
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
_CAPS = re.compile(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]+(?:\s+[A-Z][a-z]+)*)")
STOP = frozenset(
    "a an the and or but if of to in on at for with from by about as is are was were be been being i me my mine you your yours he him his she her it its we us our they them their this that these those what which who whom when where why how do does did have has had will would can could should may might just so very really too also not no yes oh hey hi hello wow thanks thank great good nice cool lol yeah okay ok well much many some any all more most there here then than into out up down over again once im i'm it's that's don't can't i've i'll you're".split()
)
GREETING = re.compile(r"^(hey|hi|hello|wow|thanks|thank you|congrats|awesome|great|cool|nice|yeah|yes|no|ok|okay|lol|haha)\b[^.!?]*[.!?]?$", re.I)
TOPICS = {
    "art": "paint painting drawing art artist sculpture pottery museum",
    "music": "music song guitar piano concert band sing singing violin",
    "family": "kids children son daughter family mom dad mother father husband wife parents",
    "career": "job work career boss office company business promotion interview",
    "education": "school college university class degree study course exam",
    "health": "health doctor hospital sick therapy exercise gym yoga run running",
    "travel": "trip travel vacation flight beach camping hike hiking visit",
    "pets": "dog cat pet puppy kitten",
    "books": "book books reading read novel library author",
    "sports": "game soccer football basketball tennis team match",
    "food": "cook cooking recipe food dinner restaurant bake baking",
    "lgbtq": "lgbtq transgender trans pride gay lesbian queer",
    "events": "party wedding birthday festival conference event",
}
_TOPIC_OF = {w: t for t, ws in TOPICS.items() for w in ws.split()}
_TYPE_RULES = [
    ("preference", re.compile(r"\b(love|like|prefer|favorite|favourite|enjoy|hate|dislike)\b", re.I)),
    ("constraint", re.compile(r"\b(can't|cannot|must|allergic|never|only|not allowed)\b", re.I)),
    ("procedure", re.compile(r"\b(how to|steps?|first\b.*\bthen)\b", re.I)),
    ("failure_pattern", re.compile(r"\b(failed|didn't work|broke|broken|crashed)\b", re.I)),
    ("tool_affordance", re.compile(r"\b(app|tool|use \w+ to)\b", re.I)),
]
_PAST = re.compile(r"\b(went|did|made|got|saw|visited|started|finished|joined|bought|took|had|\w+ed)\b", re.I)


def content_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in STOP and len(w) > 2]


def _anchor(turn: Turn) -> date | None:
    if not turn.timestamp:
        return None
    try:
        return datetime.fromisoformat(turn.timestamp).date()
    except ValueError:
        return None


def _self_contained(sentence: str, speaker: str, other: str | None) -> str:
    s = re.sub(r"\bI'm\b", f"{speaker} is", sentence)
    s = re.sub(r"\bI've\b", f"{speaker} has", s)
    s = re.sub(r"\b(I|me)\b", speaker, s)
    s = re.sub(r"\b(my|mine)\b", f"{speaker}'s", s, flags=re.I)
    if other:
        s = re.sub(r"\b(your)\b", f"{other}'s", s, flags=re.I)
    return f"{speaker}: {s}"


def _record_type(sentence: str, has_time: bool) -> str:
    for kind, rx in _TYPE_RULES:
        if rx.search(sentence):
            return kind
    return "event" if has_time or _PAST.search(sentence) else "fact"


class RulesEncoder:
    def encode(self, turns: list[Turn], context: ResolutionState | None, recent_records=(), *, summary: bool = False) -> EncodeOutput:
        speakers = list(dict.fromkeys(t.speaker for t in turns))
        known = {e.name for e in (context.entities if context else [])} | set(speakers)
        records: list[EncodedRecord] = []
        for t in turns:
            other = next((s for s in speakers if s != t.speaker), None)
            records.extend(self._turn_records(t, other, known))
        if summary and records:
            records = [
                EncodedRecord(
                    type="fact",
                    text=" ".join(r.text for r in records)[:2000],
                    entities=list(dict.fromkeys(e for r in records for e in r.entities)),
                    topics=list(dict.fromkeys(x for r in records for x in r.topics))[:5],
                    time=next((r.time for r in records if r.time.start), NormalizedTime(start=None, end=None, granularity="none", expression=None)),
                    source_turn_ids=list(dict.fromkeys(i for r in records for i in r.source_turn_ids)),
                )
            ]
        return EncodeOutput(records=records, state=self._state(turns, context, records))

    def _turn_records(self, t: Turn, other: str | None, known: set[str]) -> list[EncodedRecord]:
        anchor = _anchor(t)
        sentences = [s.strip() for s in _SENT.split(t.text) if s.strip()]
        kept = [s for s in sentences if not GREETING.match(s) and content_words(s)] or ([t.text] if content_words(t.text) else [])
        out = []
        for s in kept:
            times = find_time_expressions(s, anchor) if anchor else []
            text = _self_contained(s, t.speaker, other)
            for e in reversed(times):
                if e.relative:
                    a, b = e.span
                    offset = len(text) - len(s)
                    text = text[: offset + b] + f" ({e.label})" + text[offset + b :]
            ents = [t.speaker] + [m for m in _CAPS.findall(s) if m.lower() not in STOP and m != "I"]
            ents += [k for k in known if k != t.speaker and k.lower() in s.lower()]
            topics = list(dict.fromkeys(_TOPIC_OF[w] for w in content_words(s) if w in _TOPIC_OF))[:3]
            time = to_normalized(times[0]) if times else NormalizedTime(start=None, end=None, granularity="none", expression=None)
            out.append(
                EncodedRecord(type=_record_type(s, bool(times)), text=text, entities=list(dict.fromkeys(ents)), topics=topics, time=time, source_turn_ids=[t.turn_id])
            )
        return out

    def _state(self, turns, context, records) -> ResolutionState:
        ents = {e.name: e for e in (context.entities if context else [])}
        for t in turns:
            ents.setdefault(t.speaker, EntityState(name=t.speaker, aliases=[], referent=f"{t.speaker} (speaker)"))
        for r in records:
            for e in r.entities:
                ents.setdefault(e, EntityState(name=e, aliases=[], referent=e))
        anchors = [t.timestamp[:10] for t in turns if t.timestamp]
        questions = [s for t in turns for s in _SENT.split(t.text) if s.strip().endswith("?")][-3:]
        return ResolutionState(entities=list(ents.values())[-40:], date_anchor=anchors[-1] if anchors else (context.date_anchor if context else None), open_threads=questions)


class RulesPlanner:
    def plan(self, question: str, question_date: datetime | None, known_entities=()) -> QueryPlan:
        q = question.lower()
        ents = [e for e in known_entities if e and re.search(rf"\b{re.escape(e.lower())}\b", q)]
        ents += [m for m in _CAPS.findall(question) if m not in ents and m.lower() not in STOP]
        topics = list(dict.fromkeys(_TOPIC_OF[w] for w in content_words(question) if w in _TOPIC_OF))
        window = resolve_question_window(question, question_date)
        return QueryPlan(
            routes=[
                Route(
                    goal=question,
                    search_terms=list(dict.fromkeys(content_words(question)))[:8],
                    entities=list(dict.fromkeys(ents)),
                    topics=topics,
                    time_window=TimeWindow(start=window[0], end=window[1]) if window else None,
                )
            ]
        )


def extractive_answer(question: str, evidence: list[str]) -> str:
    """The evidence sentence with the most question content words (ties: higher-ranked first);
    for when-questions, the resolved date inside it when there is one."""
    qwords = set(content_words(question))
    best, best_score = "", -1
    for text in evidence:
        for s in _SENT.split(text):
            score = len(qwords & set(content_words(s)))
            if score > best_score:
                best, best_score = s.strip(), score
    if question.lower().startswith("when"):
        m = re.search(r"\((\d{1,2} \w+ \d{4}|\w+ \d{4}|\d{4})\)", best)
        if m:
            return m.group(1)
    return best
