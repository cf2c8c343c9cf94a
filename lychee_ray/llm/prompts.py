"""Prompts of the answer stage's three LLM calls (plan, answer, judge) and judge-reply parsing.

The evaluate stage (DESIGN.md step 6) sends these message lists through the LLM client with
the matching structured-output schema: `PLAN_SCHEMA` (QueryPlan), `ANSWER_SCHEMA`
(AnswerOutput) and `JUDGE_SCHEMA` (JudgeOutput). Nothing here does I/O.

Layout: every list starts with a system message that is the same for every question of a
benchmark, so vLLM's (and OpenAI's) prefix cache reuses it; the per-question parts come last.
Prompts are short on purpose: the paper's budget is about 4K tokens per question for plan plus
answer, and most of that belongs to the evidence.

Judges:
- LoCoMo: the CORRECT/WRONG protocol used across the memory literature (Mem0's ACCURACY_PROMPT,
  also used by Zep and others): generous on wording and length, and a date or relative time
  that names the same day or period as the gold answer counts as correct.
- LongMemEval: the official per-type rules of `src/evaluation/evaluate_qa.py`
  (xiaowu0162/LongMemEval), word for word. Upstream asks for "yes"/"no"; we ask for the JSON label
  and map yes -> CORRECT, no -> WRONG, so both benchmarks share one schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lychee_ray.tables import Turn

ENCODE_SYSTEM_PROMPT = """You turn one segment of a long conversation into long-term memory records.

Return JSON only, matching the schema.
records: atomic, self-contained statements worth remembering later.
- type: fact | preference | event | constraint | procedure | failure_pattern | tool_affordance.
  A standing instruction to the assistant ("always give prices in euros when I ask about
  travel") is a constraint; what someone likes, wants or avoids is a preference.
- text: one statement that is understandable with no other context. Use names, never pronouns
  ("I", "you", "she", "they" become the person's name). Replace relative dates ("yesterday",
  "last week") with absolute dates computed from the turn's session date.
- entities: people, places, organizations, objects named in the record.
- topics: 1-3 short topic labels.
- time: when the event happened (ISO dates YYYY-MM-DD; granularity day|week|month|year|none),
  with the original expression; time is null when the turns say nothing about when.
- source_turn_ids: the ids of the turns the record comes from.
Skip greetings and small talk. Do not invent facts that are not in the turns.
In a conversation between a user and an assistant, remember what the user states, asks for,
decides and prefers, and what the assistant concretely proposed or delivered: names, numbers,
commands, versions, settings, file names. Do not record the assistant's generic advice.
Example: the assistant explains caching at length and ends "set maxmemory 256mb and use
allkeys-lru"; the user answers "I'll go with 512mb". Records: "The assistant proposed setting
maxmemory to 256mb with the allkeys-lru policy." and "The user decided to use 512mb for maxmemory."
supersedes / contradicts: ids ([m1], [m2], ...) of reference-context records this record
replaces (the same person's or thing's attribute now has another value: moved, new job, a
revised number, version or date) or contradicts ("never did X" against doing X). Usually empty.
state: the resolution state for the next segment: entities with aliases and who/what they
refer to, the current date anchor (ISO date), and open threads (unresolved questions or plans).
The REFERENCE CONTEXT holds the previous state and recent records: use it to resolve who
"he", "she", "it" or "that" refers to. Never copy it into new records."""

# Older records offered to one encode call for links (ingest/links.py picks them; rho's recent
# records carry ids too; reference_context renders both).
LINK_CANDIDATES_HEADER = "older records (ids for supersedes / contradicts):"


def candidate_line(ref: str, text: str, said: str | None) -> str:
    """`[m3] (2024-03-01) Ana lives in Porto.`: an earlier record as one encode call is offered it."""
    when = f" ({said})" if said else ""
    return f"[{ref}]{when} {' '.join(text.split())}"

SUMMARY_INSTRUCTION = "Return exactly ONE record: a summary of the whole segment (type fact)."


def render_turns(turns: list[Turn]) -> str:
    """Turn lines as the model sees them: `[D1:3] Ana (2023-05-08 13:56): text`."""
    lines = []
    for t in turns:
        when = f" ({t.timestamp.replace('T', ' ')[:16]})" if t.timestamp else ""
        lines.append(f"[{t.turn_id}] {t.speaker}{when}: {t.text}")
    return "\n".join(lines)


def encode_messages(context_text: str, turns: list[Turn], summary: bool = False) -> list[dict]:
    user = f"REFERENCE CONTEXT\n{context_text}\n\nSEGMENT\n{render_turns(turns)}"
    if summary:
        user += f"\n\n{SUMMARY_INSTRUCTION}"
    return [{"role": "system", "content": ENCODE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

BENCHMARKS = ("locomo", "longmemeval", "beam", "generic")
LONGMEMEVAL_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "temporal-reasoning",
    "knowledge-update",
    "multi-session",
)

_UNKNOWN_DATE = "unknown"


def _msgs(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------------------------
# Planner
# --------------------------------------------------------------------------------------------
PLAN_SYSTEM = """\
You plan memory searches for a question about a user's past conversations. Return JSON like:
{"routes": [{"goal": "find when Tess repotted the fig tree", "search_terms": ["repotting", "fig tree"], "entities": ["Tess"], "topics": ["gardening"], "time_window": null}]}
- 1 to 3 routes; one route per distinct piece of information the answer needs.
- goal: what this route must find, one short sentence.
- search_terms: 2-6 keywords or short phrases likely to appear in the memories, synonyms included.
- entities: people, places, organizations or things the route is about; prefer the exact spelling from the known entities.
- topics: 0-3 short topic labels (e.g. "work", "travel", "health").
- time_window: {"start": "YYYY-MM-DD", "end": "YYYY-MM-DD"} only if the question restricts time; resolve relative expressions ("last month", "two weeks ago") against the question date; otherwise null. Either bound may be null.
Do not answer the question."""


def plan_messages(
    question: str,
    question_date: str | None,
    known_entities: Iterable[str],
    max_entities: int = 40,
) -> list[dict]:
    """Messages for the planner (-> QueryPlan). Known entities are deduplicated and capped at
    `max_entities` (the caller passes them most frequent first) to bound the prompt."""
    entities = list(dict.fromkeys(e.strip() for e in known_entities if e and e.strip()))[:max_entities]
    user = (
        f"Question date: {question_date or _UNKNOWN_DATE}\n"
        f"Known entities: {', '.join(entities) if entities else 'none'}\n"
        f"Question: {question}"
    )
    return _msgs(PLAN_SYSTEM, user)


# --------------------------------------------------------------------------------------------
# Answer
# --------------------------------------------------------------------------------------------
ANSWER_SYSTEM = {
    # LoCoMo gold answers are short phrases, and temporal gold answers are absolute dates.
    "locomo": """\
You answer questions about a long conversation between two people, using memories taken from it. Each memory starts with its date.
- Use only the memories. If they conflict, prefer the most recent one.
- For when-questions, give an absolute date, month or year: convert relative times ("last week", "yesterday") using the date of the memory they appear in.
- Answer with a short phrase (at most 6 words), no explanation. List several items separated by commas.
- If the memories do not contain the answer, answer "Not mentioned".
Return JSON: {"answer": "..."}""",
    # LongMemEval: the model is the assistant of the chat history; some questions are
    # unanswerable on purpose and are scored on abstaining.
    "longmemeval": """\
You are the assistant in earlier chats with this user. Below are memories from those chats, each with its date. Answer the user's question as that assistant.
- Use only the memories; if they conflict, the most recent one is current.
- Resolve times against the memory dates and the current date (e.g. "how many days ago").
- For recommendations, use the user's stated preferences and circumstances.
- If the memories do not contain the information needed, say you do not know; do not guess.
- Be concise: one or two sentences.
Return JSON: {"answer": "..."}""",
    # BEAM: a user's long work with an assistant; answers are judged nugget by nugget against a
    # rubric, and some questions ask for a list in order, a summary, or an abstention.
    "beam": """\
You are the assistant in a long earlier conversation with this user. Below are memories from it, each with its date. Answer the user's question as that assistant.
- Use only the memories; if they conflict, the most recent one is current, and say that the statements conflict when the user contradicted themselves.
- When asked for the order of events, list them one per line, earliest first.
- Follow the user's stated preferences and standing instructions.
- If the memories do not contain the information needed, say you do not know; do not guess.
Return JSON: {"answer": "..."}""",
    "generic": """\
You answer a question using memories from a user's past conversations, each with its date.
- Use only the memories; if they conflict, the most recent one is current.
- Resolve relative times against the memory dates and the current date.
- If the memories do not contain the information needed, say you do not know.
- Be concise.
Return JSON: {"answer": "..."}""",
}


@dataclass(frozen=True)
class ValidityNote:
    """What the links say of one memory, as its evidence line shows it: it was superseded (held
    until a day; what holds now), and what it conflicts with (each other statement with its day)."""

    until: str | None = None  # the day a later memory replaced it ("?" when unknown)
    now: str | None = None  # that later memory's text
    conflicts: tuple[str, ...] = ()  # "said 2024-05-02: <the other statement>"

    def wrap(self, body: str) -> str:
        if self.now is not None:
            body = f"[was: {body} until {self.until or '?'}; now: {short(self.now)}]"
        if self.conflicts:
            body += " [conflicts with: " + " | ".join(self.conflicts) + "]"
        return body


NOTE_WORDS = 30  # a successor or a conflicting statement quoted in a note is cut to this many words


def short(text: str, words: int = NOTE_WORDS) -> str:
    parts = str(text).split()
    return " ".join(parts[:words]) + (" ..." if len(parts) > words else "")


def conflict_text(said: str | None, text: str) -> str:
    """One conflicting statement as a note quotes it."""
    return f"said {said or '?'}: {short(text)}"


@dataclass(frozen=True)
class EvidenceItem:
    """One memory as the answer prompt shows it: its type, its time and its source turns, as
    the paper serialises evidence. `time` is the event's normalized time ("2023-05-07" or
    "start..end"); `said` is the day it was said (the record's `stated_at`, or the turn's day),
    shown when there is no event time so that "the most recent memory" can still be told."""

    text: str
    type: str | None = None  # record type; None for a raw turn
    time: str | None = None
    said: str | None = None
    sources: tuple[str, ...] = ()
    note: ValidityNote | None = None  # superseded / conflicting (retrieval.validity)

    def line(self) -> str:
        """`- [type | time | src ids] text` and its newline. Each line ends in "\n" and the
        next begins with "- ", where o200k's pre-tokenizer always splits, so the tokens of a
        block are the sum of its lines' tokens: the budget is charged on exactly what is sent."""
        meta = [self.type or "turn"]
        if self.time:
            meta.append(self.time)
        if self.said and (not self.time or self.note is not None):  # a marked memory always says its day
            meta.append(f"said {self.said}")
        if self.sources:
            meta.append("src " + ",".join(self.sources[:MAX_SOURCES_SHOWN]))
        flat = " ".join(str(self.text).split())  # one memory, one line
        if self.note is not None:
            flat = " ".join(self.note.wrap(flat).split())
        return f"- [{' | '.join(meta)}] {flat}\n"

    @property
    def when(self) -> str:
        """The sort key of time order: event time, else the day said; undated items last."""
        return self.time or self.said or "~"


MAX_SOURCES_SHOWN = 4  # provenance, not a dump: long multi-turn records cite many turns
NO_MEMORIES = "(no memories found)\n"


def in_time_order(items: Iterable[EvidenceItem]) -> list[EvidenceItem]:
    """Items by `when`, stable: items of one day keep their selection (relevance) order."""
    return sorted(items, key=lambda e: e.when)


def format_evidence(items: Sequence[EvidenceItem]) -> str:
    """The answer prompt's context section: one line per memory, in time order."""
    return "".join(e.line() for e in in_time_order(items)) or NO_MEMORIES


def answer_messages(
    benchmark: str, question: str, question_date: str | None, evidence_block: str
) -> list[dict]:
    """Messages for the answer call (-> AnswerOutput). `benchmark` is one of BENCHMARKS.
    The question comes after the evidence so that it is read last."""
    if benchmark not in ANSWER_SYSTEM:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {BENCHMARKS}")
    label = "Question date" if benchmark == "locomo" else "Current date"
    user = f"Memories:\n{evidence_block}\n{label}: {question_date or _UNKNOWN_DATE}\nQuestion: {question}"
    return _msgs(ANSWER_SYSTEM[benchmark], user)


# --------------------------------------------------------------------------------------------
# Judges
# --------------------------------------------------------------------------------------------
LOCOMO_JUDGE_SYSTEM = """\
You are an expert grader that determines if answers to questions match a gold standard answer.
Your task is to label an answer to a question as 'CORRECT' or 'WRONG'. You will be given (1) a question (posed by one user to another user), (2) a 'gold' (ground truth) answer, (3) a generated answer.
The point of the question is to ask about something one user should know about the other user based on their prior conversations. The gold answer will usually be a concise and short answer that includes the referenced topic, for example:
Question: Do you remember what I got the last time I went to Hawaii?
Gold answer: A shell necklace
The generated answer might be much longer, but you should be generous with your grading - as long as it touches on the same topic as the gold answer, it should be counted as CORRECT.
For time related questions, the gold answer will be a specific date, month, year, etc. The generated answer might be much longer or use relative time references (like "last Tuesday" or "next month"), but you should be generous with your grading - as long as it refers to the same date or time period as the gold answer, it should be counted as CORRECT. Even if the format differs (e.g., "May 7th" vs "7 May"), consider it CORRECT if it's the same date.
Return JSON: {"label": "CORRECT"} or {"label": "WRONG"}."""


def locomo_judge_messages(question: str, gold: object, prediction: str) -> list[dict]:
    """Messages for the LoCoMo judge (-> JudgeOutput). `gold` may be an int in the source."""
    user = f"Question: {question}\nGold answer: {gold}\nGenerated answer: {prediction}"
    return _msgs(LOCOMO_JUDGE_SYSTEM, user)


LONGMEMEVAL_JUDGE_SYSTEM = """\
You grade a chat assistant's response for a long-term memory benchmark. Follow the grading instructions in the user message exactly.
Where they say to answer yes, return {"label": "CORRECT"}; where they say no, return {"label": "WRONG"}. Return only that JSON."""

# Official rules (LongMemEval src/evaluation/evaluate_qa.py, MIT), verbatim up to the format.
_LME_BASE = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes "
    "if the response contains the correct answer. Otherwise, answer no. If the response is "
    "equivalent to the correct answer or contains all the intermediate steps to get the correct "
    "answer, you should also answer yes. If the response only contains a subset of the "
    "information required by the answer, answer no."
)
_LME_RULES = {
    "single-session-user": _LME_BASE,
    "single-session-assistant": _LME_BASE,
    "multi-session": _LME_BASE,
    "temporal-reasoning": _LME_BASE
    + " In addition, do not penalize off-by-one errors for the number of days. If the question "
    "asks for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., "
    "predicting 19 days when the answer is 18), the model's response is still correct.",
    "knowledge-update": (
        "I will give you a question, a correct answer, and a response from a model. Please answer "
        "yes if the response contains the correct answer. Otherwise, answer no. If the response "
        "contains some previous information along with an updated answer, the response should be "
        "considered as correct as long as the updated answer is the required answer."
    ),
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response "
        "from a model. Please answer yes if the response satisfies the desired response. "
        "Otherwise, answer no. The model does not need to reflect all the points in the rubric. "
        "The response is correct as long as it recalls and utilizes the user's personal "
        "information correctly."
    ),
}
_LME_ABSTENTION_RULE = (
    "I will give you an unanswerable question, an explanation, and a response from a model. "
    "Please answer yes if the model correctly identifies the question as unanswerable. The model "
    "could say that the information is incomplete, or some other information is given but the "
    "asked information is not."
)


def longmemeval_judge_messages(
    question_type: str, question: str, gold: str, prediction: str, abstention: bool
) -> list[dict]:
    """Messages for the LongMemEval judge (-> JudgeOutput), with the official rule of the question
    type; `abstention` (question_id ends in "_abs") overrides the type, as upstream does."""
    if question_type not in _LME_RULES:
        raise ValueError(f"unknown LongMemEval question type {question_type!r}")
    if abstention:
        rule, gold_label, ask = (
            _LME_ABSTENTION_RULE,
            "Explanation",
            "Does the model correctly identify the question as unanswerable?",
        )
    elif question_type == "single-session-preference":
        rule, gold_label, ask = _LME_RULES[question_type], "Rubric", "Is the model response correct?"
    else:
        rule, gold_label, ask = _LME_RULES[question_type], "Correct Answer", "Is the model response correct?"
    user = (
        f"{rule}\n\nQuestion: {question}\n\n{gold_label}: {gold}\n\nModel Response: {prediction}\n\n"
        f'{ask} Answer {{"label": "CORRECT"}} for yes or {{"label": "WRONG"}} for no.'
    )
    return _msgs(LONGMEMEVAL_JUDGE_SYSTEM, user)


# Our own prompt after the BEAM authors' protocol (src/evaluation in their repository): every
# rubric nugget is graded alone, 0 / 0.5 / 1, positive requirements and negative constraints
# alike, by meaning rather than wording, and an answer that does not address the question is 0.
RUBRIC_JUDGE_SYSTEM = """\
You grade one answer of a chat assistant against ONE rubric criterion.
- The criterion is a requirement (something the answer must say or do) or a constraint (something it must not). Decide which.
- Judge by meaning, not wording: accept paraphrases, synonyms, and numbers, dates or amounts written another way.
- An answer that does not address the question scores 0, whatever the criterion.
- 1: fully meets the criterion (for a constraint: responsive, and the forbidden element is absent).
- 0.5: partly meets it (present but incomplete or slightly wrong; or mostly avoids the forbidden element).
- 0: does not meet it (missing or wrong; or the forbidden element is present).
- Ignore tone, length and style unless the criterion asks for a format.
Return JSON: {"score": 0} or {"score": 0.5} or {"score": 1}."""


def rubric_judge_messages(question: str, criterion: str, prediction: str) -> list[dict]:
    """Messages grading one rubric nugget (-> RubricGrade)."""
    user = f"Question: {question}\nRubric criterion: {criterion}\nAnswer to grade: {prediction}"
    return _msgs(RUBRIC_JUDGE_SYSTEM, user)
