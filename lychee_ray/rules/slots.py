"""Slots: what a record's sentences say about one attribute of its speaker, read by a few precise
patterns with no model. `links.LinkDetector` compares them across records to find supersessions
and contradictions.

A `Slot` is an attribute with a value: where the speaker lives or works, a named quantity with its
unit ("commute ... 19 minutes each way"), a tool's version, a due date, a preference between two
things, a status (started / done). A `Claim` is a polarity statement about an action: "never"
(I have never used X), "always", or "did" (an affirmative past or perfect: I set up X).

Precision first: a wrong supersession hides a true fact. So a pattern fires only on explicit
wording with the speaker as its subject (I, we, the speaker's name, "the user"), hypotheticals
("if", "want to", "plan to") say nothing up to the next clause the speaker opens, and a quantity
only names a slot with words just before it that a later one can be matched on. A question says
only what it states before it starts asking ("I've done 10 of them, can you ...?") and what it
presupposes ("the fact that ...", "the new quota of 1,200 calls"): people talking to an assistant
state most of their facts that way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lychee_ray.dates import MONTH_NAMES, MONTH_NUM, WEEKDAY_NAMES, month_num
from lychee_ray.names import normalize_name
from lychee_ray.rules.lexicon import ED_NOT_PAST, IRREGULAR_PAST, STOPWORDS
from lychee_ray.rules.text import content_words, normalize_text, singular, split_sentences, stem


@dataclass(frozen=True)
class Slot:
    attribute: str  # "home", "job", "quantity:<unit>", "version:<tool>", "due", "favorite:<what>", "preference:<a|b>", "status"
    value: str  # normalized: compared for equality (a number as its float text)
    pre: frozenset[str] = frozenset()  # quantity / due / status: the thing it is about (its words)
    post: str = ""  # quantity: the phrase after the unit ("each way", "per request")
    update: bool = field(default=False, compare=False)  # quantity: its sentence says the value changed ("now", "down to")


@dataclass(frozen=True)
class Claim:
    polarity: str  # never | always | did | didnt
    verb: str  # lemma
    key: frozenset[str]  # the object words the claim is about (named ones when it has any)
    words: frozenset[str] = field(default=frozenset(), compare=False)  # every object word (did claims are matched on these)
    named: bool = False  # the key holds a capitalized name (a tool, a place)


@dataclass(frozen=True)
class Reading:
    slots: tuple[Slot, ...] = ()
    claims: tuple[Claim, ...] = ()


# --------------------------------------------------------------------------------------------
# Words
# --------------------------------------------------------------------------------------------
# participles and pasts the lexicon's IRREGULAR_PAST lacks, and the lemma of each irregular form
_IRREGULAR = {
    "been": "be", "was": "be", "were": "be", "gone": "go", "went": "go", "seen": "see", "saw": "see", "ridden": "ride", "rode": "ride",
    "sung": "sing", "sang": "sing", "written": "write", "wrote": "write", "done": "do", "did": "do", "made": "make", "built": "build",
    "run": "run", "ran": "run", "set": "set", "taken": "take", "took": "take", "eaten": "eat", "ate": "eat", "flown": "fly", "flew": "fly",
    "swum": "swim", "swam": "swim", "driven": "drive", "drove": "drive", "given": "give", "gave": "give", "got": "get", "gotten": "get",
    "begun": "begin", "began": "begin", "tried": "try", "found": "find", "bought": "buy", "read": "read", "met": "meet", "had": "have",
    "put": "put", "fixed": "fix", "used": "use", "visited": "visit", "played": "play", "baked": "bake", "planted": "plant",
}
_PAST = IRREGULAR_PAST | frozenset(_IRREGULAR)
# verbs that say a thing was done or put to use: "never used Docker" is broken by "set up Docker"
DO_VERBS = frozenset(stem(v) for v in "use set install deploy build write run configure integrate implement add make do adopt create start ship fix".split())
PLACE_VERBS = frozenset(stem(v) for v in "be go visit travel live stay".split())
_DAY_AND_MONTH_NAMES = frozenset(WEEKDAY_NAMES) | frozenset(m.lower() for m in MONTH_NAMES)
_TIME_WORDS = _DAY_AND_MONTH_NAMES | frozenset(
    "last next week weeks month months year years day days today yesterday tomorrow morning evening night weekend ago kid child".split()
)
_GENERIC_OBJECT = frozenset("any anything project thing things before time times life ever yet one kind sort actually code go way".split())
# words of an update that are not the thing updated
_UPDATE_WORDS = frozenset("new news good great big update heads quick record now latest current currently".split())
_NOT_UNIT = _DAY_AND_MONTH_NAMES | frozenset(MONTH_NUM) | frozenset(
    "am pm st nd rd th of and or to x times percent-of years year months month weeks week days day ago".split()
)
# verbs that only link a thing to its measure ("takes 400 ms", "is down to"): no part of the thing
_MEASURING = frozenset("take takes took cost costs weigh weighs measure measures last lasts hit hits reach reaches reached sit sits stand stands come comes run runs down up".split())
_VAGUE = frozenset("around about roughly approximately nearly almost only already currently still just even total overall average".split())
# words around a number that say it changed or how the speaker feels, never what it measures: "a 12%
# salary increase" and "a 35% increase in views" share "increase", "kinda" is in half of a chat's lines
NOT_A_THING = frozenset(
    "increase decrease reduce reduction improve improvement boost cut drop growth grow gain rise raise lower jump change "
    "kinda sorta curious worried excited happy glad proud sure wondering thinking".split()
)
THING_WINDOW = 5  # a number measures what the last few words before it name, not its whole clause
DEADLINE_WINDOW = 2  # "... and the user has a submission deadline": the deadline of a submission
# a later number replaces an earlier one only when its sentence says it changed (or is the news)
_UPDATE_CUE = re.compile(
    r"(?i)\b(?:now|new|newly|updated?|updates|improved|reduced|increased|decreased|dropped|grew|grown|rose|risen|fell|fallen|"
    r"down to|changed|revised|latest|currently|at the moment|anymore|no longer|record|hired|raised|lowered|went up|went down|"
    r"has reached|have reached|reached|after (?:the|a|an|we|i|adding|switching|moving|upgrading|some)|since the)\b"
)
_UNIT_ALIASES = {"percent": "%", "milliseconds": "ms", "millisecond": "ms", "seconds": "s", "second": "s", "sec": "s", "secs": "s",
                 "minutes": "minute", "mins": "minute", "min": "minute", "hours": "hour", "hrs": "hour", "k": "k", "gb": "gb", "mb": "mb"}


def lemma(word: str) -> str:
    """An irregular form's base ("went" -> "go"), else the crude stem both sides of a comparison share."""
    w = word.lower()
    return stem(_IRREGULAR.get(w, w))


def _is_past(word: str, following: str) -> bool:
    w = word.lower()
    if w == "used" and following.startswith("to "):
        return False  # "used to": a habit, not a use
    if w in _PAST:
        return True
    return w.endswith("ed") and len(w) > 3 and (w not in ED_NOT_PAST or w == "used")


# --------------------------------------------------------------------------------------------
# Patterns (subject: {s} is filled per speaker)
# --------------------------------------------------------------------------------------------
_HEDGE = re.compile(r"(?i)\b(?:if|whether|would|could|should|might|want(?:s|ed)? to|plan(?:s|ning)? to|going to|hope to|wish|trying to|try to|will|'ll)\b")
_NEGATION = re.compile(r"(?i)\b(?:not|no|never|no longer|n't|nor)\b|n't\b")
_PLACE = r"(?-i:(?P<v>[A-Z][\w'-]+(?:\s+[A-Z][\w'-]+){0,2}))"
_JOB = r"(?:a|an)\s+(?P<v>[a-z][a-z-]+(?:\s+[a-z][a-z-]+){0,2}?)(?=\s*(?:[,.;!?]|$|\s(?:now|at|for|in|and|since|who|which)\b))"
_ADV = r"(?:(?:now|still|currently|just|finally|recently|already|actually|also|have|has|had|'ve|'s)\s+)*"
# a tool is capitalized (FastAPI, Postgres 16) or written with a dotted version (nginx 1.25)
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
_TOOL = rf"(?!(?i:{_MONTHS})\b)(?-i:(?P<tool>[A-Z][\w+#.-]*[\w+#]|[A-Z]|[a-z][\w+#-]*[a-z+#](?=\s+v?\d+\.\d)))"
_VERSION = r"v?(?P<v>\d+(?:\.\d+)+|\d+(?=\s*(?:[,.;!?]|$)))"
_DATE = rf"(?P<d>\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?(?:{_MONTHS})\b(?:,?\s+\d{{4}})?|(?:{_MONTHS})\s+\d{{1,2}}(?:st|nd|rd|th)?\b(?:,?\s+\d{{4}})?|\d{{4}}-\d{{2}}-\d{{2}})"
_THING = r"(?P<t>[a-z0-9][\w' -]{1,48}?)"
# what a deadline is for, after its date: "a deadline of 1 April, 2024, for the first sprint"
_DUE_FOR = r"(?:,?\s+(?:\d{4},?\s+)?for\s+(?:the|my|our)\s+(?P<t3>[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2}?)(?=\s*(?:[,.;!?]|$|\s(?:and|so|but|which|that|is|was|in|on|by|at)\b)))?"


def _speaker_patterns(name: str) -> dict[str, list[re.Pattern]]:
    s = rf"(?:\bi|\bwe|\bthe user|{re.escape(name.lower())})" if name else r"(?:\bi|\bwe|\bthe user)"
    own = rf"(?:\bmy|\bour|\bthe user's|{re.escape(name.lower())}'s)" if name else r"(?:\bmy|\bour|\bthe user's)"
    flags = re.IGNORECASE
    return {
        "home": [re.compile(rf"{s}\s+{_ADV}(?:live|lives|am living|is living|are living|'m living|'re living)\s+in\s+{_PLACE}", flags),
                 re.compile(rf"{s}\s+{_ADV}(?:moved|relocated)\s+(?:house\s+|back\s+)?(?:from\s+[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){{0,2}}\s+)?to\s+{_PLACE}(?!\s*\d)", flags)],
        "job": [re.compile(rf"{s}\s+{_ADV}(?:work|works|am working|is working|'m working)\s+as\s+{_JOB}", flags),
                re.compile(rf"{s}\s+{_ADV}(?:became|become|got a (?:new )?job as|started working as)\s+{_JOB}", flags)],
        "job_now": [re.compile(rf"{s}\s+(?:am|is|'m|'s)\s+(?:now\s+)?{_JOB}(?:\s+now\b)", flags)],
        "version": [re.compile(rf"\b(?:on|using|use|uses|running|run|runs|installed|pinned|pinning)\s+{_TOOL}\s+{_VERSION}", flags),
                    re.compile(rf"\b(?:upgraded|updated|bumped|migrated|switched|downgraded|moved)\s+{_TOOL}\s+(?:from\s+v?[\d.]+\s+)?to\s+{_VERSION}", flags),
                    re.compile(rf"\b(?:upgraded|updated|migrated|switched|downgraded|moved)\s+to\s+{_TOOL}\s+{_VERSION}", flags)],
        "due": [re.compile(rf"(?:^|\bthe\s|\bour\s|{own}\s){_THING}\s+(?:is|was|are)\s+(?:now\s+)?due\s+(?:on|by)\s+{_DATE}", flags),
                re.compile(rf"(?:^|\bthe\s|\bour\s|{own}\s){_THING}\s+(?:has|have|had)\s+(?:been\s+)?(?:moved|pushed|postponed|rescheduled|brought forward|slipped)\s+(?:back\s+)?(?:to|until)\s+{_DATE}", flags),
                re.compile(rf"\b(?P<t2>[a-z0-9][\w -]{{0,30}}?)\s*deadline\s+(?:of|is|on|to|for|by)\s+(?:now\s+)?{_DATE}{_DUE_FOR}", flags)],
        "favorite": [re.compile(rf"{own}\s+favou?rite\s+(?P<what>[a-z]+(?:\s+[a-z]+)?)\s+is\s+(?:now\s+)?(?P<v>[^,.;!?]+)", flags)],
        "preference": [re.compile(rf"{s}\s+{_ADV}(?:prefer|prefers|'d prefer)\s+(?P<a>[^,.;!?]+?)\s+(?:over|to|rather than|instead of)\s+(?P<b>[^,.;!?]+?)(?=\s+(?:for|in|at|when|because|on|as|since)\b|\s*[,.;!?]|\s*$)", flags)],
        "started": [re.compile(rf"{s}\s+{_ADV}(?:started|began|begun)\s+(?:on\s+|working on\s+)?(?:the|my|our)\s+{_THING}(?=\s*(?:[,.;!?]|$|\s(?:last|yesterday|today|on|in|at|this|and)\b))", flags)],
        "done": [re.compile(rf"{s}\s+{_ADV}(?:finished|completed|wrapped up|shipped)\s+(?:the|my|our)\s+{_THING}(?=\s*(?:[,.;!?]|$|\s(?:last|yesterday|today|on|in|at|this|and)\b))", flags)],
        "never": [re.compile(rf"{s}\s+(?:have|has|had|'ve|'d)?\s*(?:actually\s+|really\s+|honestly\s+|still\s+)?(?:never|not ever|n't ever)\s+(?:actually\s+|ever\s+|really\s+|once\s+)?(?P<vp>[^,.;!?]+)", flags)],
        "always": [re.compile(rf"{s}\s+(?:have\s+|has\s+)?always\s+(?P<vp>[^,.;!?]+)", flags)],
        "did": [re.compile(rf"{s}\s+(?:(?:have|has|had|'ve|'d|just|finally|already|recently|once|actually|also|successfully|then)\s+){{0,3}}(?P<verb>[a-z]+)\b", flags)],
    }


_QUANTITY = re.compile(r"(?<![\w.:/-])(?P<n>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s?(?P<u>%(?!\w)|[a-zA-Z]+\b)(?P<post>[^,.;!?:]*)")
_QUANTITY_HEDGE = re.compile(r"(?i)\b(?:target|goal|aim|achieve|want|need|plan|hope|expect|limit|max|maximum|minimum|at least|at most|under|below|above|than|up to|every|each|per|about to|if)\s*$")
_TRAILING_FILLER = re.compile(r"(?i)\b(?:at the moment|for now|so far|right now|these days|at present|now|again|currently|already|anymore|today|in total|total)\b")
_CLAUSE_CUT = re.compile(r"(?i)\b(?:so|but|because|although|though|which|since|until|before|yet|while|when|and then|and i|and we|can|could)\b.*$")


# --------------------------------------------------------------------------------------------
# Reading one record
# --------------------------------------------------------------------------------------------
def read_record(text: str, speaker: str) -> Reading:
    """The slots and claims of a record's text said by `speaker` (its name, "" when unknown)."""
    pats = _patterns(speaker)
    slots: list[Slot] = []
    claims: list[Claim] = []
    for sentence in split_sentences(_PARENTHESES.sub("", normalize_text(text))):
        sentence = _TAG_QUESTION.sub("", sentence.strip())  # "..., can you believe it?" asks nothing
        # each part a question states is read on its own, so a hedge in one never governs another
        for part in asserted_before_asking(sentence) if sentence.endswith("?") else [sentence]:
            for clause in re.split(r"\s*[;:]\s+|\s*,\s+(?=(?:and |but |so )?(?:i|we|the user)\b)", part):
                slots += _slots(clause, part, pats, speaker)
                claims += _claims(clause, pats, speaker)
    return Reading(tuple(dict.fromkeys(slots)), tuple(dict.fromkeys(claims)))


# a date the rules encoder wrote into the text ("upgraded (23 August 2023) FastAPI"), an aside
_PARENTHESES = re.compile(r"\s*\([^()]{0,60}\)")
_TAG_QUESTION = re.compile(r"(?i),\s*(?:can|could|do|does|did|is|are|was|were|would|will|have|has|right|isn't|aren't|don't|no|eh|huh)\b[^,]*\?$")


# where a question begins inside a sentence: at its start, or a clause opened by an auxiliary or a
# wh-word after a comma or "so" ("I've completed 10 problems, so can you ...?", "..., how can I ...?")
_ASKING = re.compile(
    r"(?i)(?:^|,\s+(?:(?:so|and|but|or)\s+)?|\s(?:so|but)\s+)(?:can|could|would|will|do|does|did|should|shall|is|are|am|was|were|"
    r"have|has|how|what|why|any\s+(?:tips|ideas|advice|suggestions))\b"
)
_THE_FACT_THAT = re.compile(r"(?i)\b(?:the fact that|given that|now that)\s+(?P<s>[^,;?]+)")


def asserted_before_asking(sentence: str) -> list[str]:
    """What a question sentence states as given, part by part: the clauses before its first
    asking clause, and each thing it presupposes ("how can I use the fact that I secured 5
    interviews?"). Users of an assistant state their facts this way ("I've completed 10
    problems, can you check the 11th?"); a sentence that asks from its first word states nothing
    but its presuppositions."""
    asking = _ASKING.search(sentence)
    stated = sentence[: asking.start()] if asking else ""
    given = [m["s"] for m in _THE_FACT_THAT.finditer(sentence, asking.start() if asking else 0)]
    return [part.strip() for part in [stated, *given] if part.strip()]


_PATTERN_CACHE: dict[str, dict[str, list[re.Pattern]]] = {}


def _patterns(speaker: str) -> dict[str, list[re.Pattern]]:
    pats = _PATTERN_CACHE.get(speaker)
    if pats is None:
        if len(_PATTERN_CACHE) > 256:
            _PATTERN_CACHE.clear()
        pats = _PATTERN_CACHE[speaker] = _speaker_patterns(speaker)
    return pats


# a hedge reaches to the next clause the speaker opens: "I'm trying to plan it and I have a deadline
# of 1 April" states the deadline
_OWN_CLAUSE = re.compile(r"(?i)\b(?:and|but|so)\s+(?:i|we|the user)\b")
# a definite "the new <thing> of <value>" presupposes the value, hedged or not: "trying to update
# my settings to the new daily quota of 1,200 calls" states the quota
_PRESUPPOSED = re.compile(r"(?i)\bthe\s+(?:new|updated|revised|latest|current)\s+(?:[\w-]+\s+){0,3}?(?:of|is)\s+$")


def _hedged(clause: str, start: int, value_at: int | None = None) -> bool:
    """Whether a hedge governs the text at `start`; `value_at`: where the value itself begins,
    for the presupposition test."""
    if value_at is not None and _PRESUPPOSED.search(clause[max(0, value_at - 60):value_at]):
        return False
    return bool(_HEDGE.search(_OWN_CLAUSE.split(clause[:max(start, value_at or 0)])[-1]))


def _slots(clause: str, sentence: str, pats: dict, speaker: str) -> list[Slot]:
    out = []
    for kind in ("home", "job", "job_now", "version", "due", "favorite", "preference", "started", "done"):
        for pat in pats[kind]:
            for m in pat.finditer(clause):
                value_at = m.start("d") if "d" in pat.groupindex else None
                if _hedged(clause, m.start(), value_at) or _NEGATION.search(clause[max(0, m.start() - 12):m.end()]):
                    continue
                slot = _slot(kind, m, sentence, speaker)
                if slot is not None:
                    out.append(slot)
    out += _quantities(clause, sentence, speaker)
    return out


def _words(text: str, speaker: str) -> frozenset[str]:
    return frozenset(singular(w) for w in content_words(text, [speaker] if speaker else []) if w not in _UPDATE_WORDS and not w.isdigit())


def _slot(kind: str, m: re.Match, sentence: str, speaker: str) -> Slot | None:
    if kind == "home":
        return Slot("home", normalize_name(m["v"]))
    if kind in ("job", "job_now"):
        if kind == "job_now" and not re.search(r"(?i)\b(?:job|work|career|position|role|hired|promoted|left|quit)\b", sentence):
            return None  # "I am a big fan now": only a job when the clause speaks of work
        return Slot("job", normalize_name(m["v"]))
    if kind == "version":
        return Slot(f"version:{m['tool'].lower()}", m["v"])
    if kind == "due":
        groups = m.groupdict()
        near = " ".join((groups.get("t2") or "").split()[-DEADLINE_WINDOW:])  # "the new sprint deadline": sprint
        words = (_words(groups.get("t") or near, speaker) | _words(groups.get("t3") or "", speaker)) - {"deadline"}
        day = _day_key(m["d"])
        return Slot("due", day, pre=words) if words and day else None
    if kind == "favorite":
        return Slot(f"favorite:{normalize_name(m['what'])}", normalize_name(m["v"]))
    if kind == "preference":
        a, b = normalize_name(m["a"]), normalize_name(m["b"])
        return Slot(f"preference:{'|'.join(sorted((a, b)))}", a) if a and b and a != b else None
    words = _words(m["t"], speaker)
    return Slot("status", "done" if kind == "done" else "started", pre=words) if words else None


def _day_key(text: str) -> str | None:
    """A due date as month-day (and year when given): "5 May 2024" and "May 5, 2024" agree."""
    t = text.lower()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t):
        return t
    month = re.search(_MONTHS, t)
    day = re.search(r"\b(\d{1,2})(?:st|nd|rd|th)?\b", t)
    year = re.search(r"\b(\d{4})\b", t)
    if not month or not day:
        return None
    return f"{year.group(1) if year else '????'}-{month_num(month.group(0)):02d}-{int(day.group(1)):02d}"


def _quantities(clause: str, sentence: str, speaker: str) -> list[Slot]:
    """Numbers with a unit. Not a slot: a hedged or bounded number ("aim for 90%", "under 5 ms"),
    the first of "from X to Y", an age or a span ("3 weeks ago"), and numbers in a list of the same
    unit ("sides of 40 cm, 42 cm and 58 cm": a computation, not an attribute's value)."""
    units = [_unit(m["u"]) for m in _QUANTITY.finditer(sentence)]
    listed = {u for u in units if units.count(u) > 1} if not re.search(r"(?i)\bfrom\s+\S+\s+to\s", sentence) else set()
    update = bool(_UPDATE_CUE.search(sentence))
    out = []
    for m in _QUANTITY.finditer(clause):
        unit, before = _unit(m["u"]), clause[: m.start()]
        if m["u"].lower() in _NOT_UNIT or unit in STOPWORDS or unit in listed or _QUANTITY_HEDGE.search(before) or _hedged(clause, m.start(), m.start()):
            continue
        if re.search(r"(?i)\bfrom\s*$", before) and re.match(r"\s*to\s+\d", m["post"]):
            continue  # "from 70% to 90%": the value is the second
        if re.match(r"\s*(?:ago|old)\b", m["post"]) or (unit != "%" and re.match(r"\s*of\b", m["post"])) or re.search(r"[\d.]\d*\.$", before):
            continue
        post = _TRAILING_FILLER.sub(" ", m["post"].lower())
        post = " ".join(re.split(r"\b(?:and|but|so|because|with|after|since|which)\b", post)[0].split()[:4])
        nearest = re.split(r"(?i),|\b(?:and|but|so|because|with|after)\b", before)[-1].split()[-THING_WINDOW:]
        pre = _thing_words(" ".join(nearest), speaker)
        if re.match(r"(?:of|for|on|at|in)\b", post):  # "61% of the billing module": what is measured
            measured = re.split(r"(?i)\b(?:and|but|so|because|with|after|since|which|by)\b", m["post"])[0]
            pre |= _thing_words(" ".join(measured.split()[:6]), speaker) - _GENERIC_OBJECT
        value = f"{float(m['n'].replace(',', '')):g}"
        out.append(Slot(f"quantity:{unit}", value, pre=pre, post=post, update=update))
    return out


def _unit(word: str) -> str:
    w = word.lower()
    return _UNIT_ALIASES.get(w, singular(w))


def _thing_words(text: str, speaker: str) -> frozenset[str]:
    """The words that name what a number measures: no verbs of measuring or changing, no -ed /
    -ing / -ly words, no vague qualifiers ("around", "already")."""
    return frozenset(w for w in _words(text, speaker) - _MEASURING - _VAGUE - NOT_A_THING if not w.endswith(("ed", "ing", "ly")))


def _claims(clause: str, pats: dict, speaker: str) -> list[Claim]:
    out = []
    for polarity in ("never", "always"):
        for m in pats[polarity][0].finditer(clause):
            if _hedged(clause, m.start()):
                continue
            claim = _claim(polarity, m["vp"], speaker)
            if claim is not None:
                out.append(claim)
    if out or _hedged(clause, len(clause)) or _NEGATION.search(clause):
        return out  # an affirmative past is only read from a clause that negates nothing
    starts = list(pats["did"][0].finditer(clause))
    for m, nxt in zip(starts, [*starts[1:], None]):
        verb, rest = m["verb"], clause[m.end():nxt.start() if nxt else len(clause)]
        if not _is_past(verb, rest.strip()):
            continue
        if verb.lower() == "set" and re.match(r"\s*up\b", rest):
            rest = rest.lstrip()[2:]
        claim = _claim("did", f"{verb} {rest}", speaker)
        if claim is not None:
            out.append(claim)
    return out


def _claim(polarity: str, vp: str, speaker: str) -> Claim | None:
    vp = _CLAUSE_CUT.sub("", vp).strip()
    parts = vp.split(None, 1)
    if not parts:
        return None
    verb, rest = lemma(parts[0]), parts[1] if len(parts) > 1 else ""
    words = frozenset(w for w in _words(rest, speaker) if w not in _GENERIC_OBJECT and w not in _TIME_WORDS)
    if not words:
        return None
    # the head object: the first name after the verb with the noun it qualifies ("used Ansible in
    # Flintcrest" is about Ansible, "written Flask routes" about Flask routes)
    head = re.search(r"\b([A-Z][\w+#-]*)(?:\s+([A-Za-z][\w-]*))?", rest)
    key = words
    if head and singular(head.group(1).lower()) in words:
        noun = singular((head.group(2) or "").lower())
        key = frozenset({singular(head.group(1).lower())} | ({noun} if noun in words else set()))
    return Claim(polarity, verb, key, words, key != words or bool(head and singular(head.group(1).lower()) in words))
