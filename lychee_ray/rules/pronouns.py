"""Pronoun resolution, so a record stands alone: first person -> the speaker's name, second person
-> the other participant.

The verb after a rewritten subject is made to agree ("I love" -> "Ana loves", "have you
been" -> "has Ana been"); set phrases such as "you know" and "thank you" are left alone. Role
speakers are named "the user" / "the assistant" (`display_name`).
"""

from __future__ import annotations

import re

from lychee_ray.rules.lexicon import (
    ADVERBS,
    BE_HAVE_DO,
    CONJ_OK,
    CONTRACTION,
    PRESENT_VERBS,
    ROLE_SPEAKERS,
)

# "-" in the guards: "me-time" is not "me".
_FIRST_RE = re.compile(r"(?<![\w'-])(?:(?P<s>I|i)(?:'(?P<c>m|ve|d|ll))?|(?P<o>(?i:me|my|mine|myself)))(?![\w'-])")
_SECOND_RE = re.compile(r"(?<![\w'-])(?:(?P<s>(?i:you))(?:'(?P<c>re|ve|d|ll))?|(?P<o>(?i:your|yours|yourself|yourselves)))(?![\w'-])")
# An auxiliary right before a subject pronoun agrees with the name: "have you been" -> "has Ana been".
_AUX_BEFORE_RE = re.compile(r"(?<![\w'])(am|are|were|have|do|don't|haven't|aren't|weren't)(\s+)$", re.I)
_NEXT_WORD_RE = re.compile(rf"(\s+)(?:((?i:{ADVERBS}))(\s+))?([A-Za-z']+)")
_KEEP_SECOND_RE = re.compile(r"\s+(?:know\b(?=\s*(?:[,.!?]|$))|guys\b|all\b)", re.I)
_KEEP_SECOND_BEFORE_RE = re.compile(r"(?i:\b(?:thank|thanks|see|bless)\s+)$")


def display_name(speaker: str) -> str:
    """How a speaker is named inside record text: "Ana", or "the user" for role speakers."""
    s = (speaker or "").strip()
    return f"the {s.lower()}" if s.lower() in ROLE_SPEAKERS else s or "someone"


def cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _possessive(name: str) -> str:
    return f"{name}'s"


def _third_person(verb: str) -> str:
    v = verb.lower()
    if v in BE_HAVE_DO:
        out = BE_HAVE_DO[v]
    elif v.endswith(("s", "sh", "ch", "x", "z", "o")):
        out = v + "es"
    elif len(v) > 1 and v.endswith("y") and v[-2] not in "aeiou":
        out = v[:-1] + "ies"
    else:
        out = v + "s"
    return cap(out) if verb[:1].isupper() else out


def _may_conjugate(text: str, start: int) -> bool:
    """Is the pronoun at `start` a clause subject (not "did you go", "made you feel")?"""
    before = text[max(0, start - 30) : start].rstrip()
    if not before or before[-1] in ",.;:!?-–—(\"":
        return True
    m = re.search(r"([A-Za-z']+)$", before)
    return bool(m) and m.group(1).lower() in CONJ_OK


def at_sentence_start(text: str, pos: int) -> bool:
    return bool(SENT_START_BEFORE_RE.search(text[max(0, pos - 3) : pos]))


def _rewrite_person(text: str, rx: re.Pattern, name: str, second: bool) -> str:
    """Replace one grammatical person by `name`, fixing the verb right after a subject."""
    out: list[str] = []
    pos = 0
    for m in rx.finditer(text):
        if m.start() < pos:
            continue
        s, e = m.start(), m.end()
        if second and m["s"] and (_KEEP_SECOND_RE.match(text, e) or _KEEP_SECOND_BEFORE_RE.search(text[max(0, s - 10) : s])):
            continue  # "you know", "thank you", "you guys": not a reference to the listener
        if m["o"]:
            low = m["o"].lower()
            if low in ("my", "mine", "your", "yours"):
                rep = _possessive(name)
            elif low.endswith(("self", "selves")):  # "embrace yourself": the name, unless it is already the subject
                rep = "themself" if name in "".join(out) + text[pos:s] else name
            else:
                rep = name
        elif m["c"]:
            rep = f"{name} {CONTRACTION[m['c'].lower()]}"
        else:
            rep = name
            nxt = _NEXT_WORD_RE.match(text, e)
            if nxt and _may_conjugate(text, s):
                verb = nxt.group(4)
                low = verb.lower()
                if low in BE_HAVE_DO or low in PRESENT_VERBS:
                    if not (low == "am" and second) and not (low in ("are", "were", "aren't", "weren't") and not second):
                        adv = f"{nxt.group(2)}{nxt.group(3)}" if nxt.group(2) else ""
                        rep = f"{name}{nxt.group(1)}{adv}{_third_person(verb)}"
                        e = nxt.end()
        if at_sentence_start(text, s):
            rep = cap(rep)
        head = text[pos:s]
        if m["s"] and not m["c"] and (aux := _AUX_BEFORE_RE.search(head)):
            if not (aux.group(1).lower() == "am" and second) and not (aux.group(1).lower() in ("are", "were", "aren't", "weren't") and not second):
                head = head[: aux.start()] + _third_person(aux.group(1)) + aux.group(2)
        out.append(head)
        out.append(rep)
        pos = e
    out.append(text[pos:])
    return "".join(out)


def resolve_pronouns(text: str, speaker: str, other: str | None) -> str:
    """First person -> the speaker's name; second person -> the other participant, when known.
    "I went" -> "Ana went", "my" -> "Ana's", "I love" -> "Ana loves"."""
    text = _rewrite_person(text, _FIRST_RE, display_name(speaker), second=False)
    if other:
        text = _rewrite_person(text, _SECOND_RE, display_name(other), second=True)
    return text


SENT_START_BEFORE_RE = re.compile(r"(?:^|[.!?:;\"(\[*#>]\s*|\n\s*|^\s*[-•]\s+)$")  # also list bullets, markdown
