"""The `rules` LLM backend: encoder, planner and answerer with no model at all.

Role in the pipeline (DESIGN.md, "Backends" -> `llm.backend: rules`): the zero-cost indexer for
huge archives, the fallback for segments whose LLM encode failed (`degraded=true`), and the
baseline the LLM path must beat. It returns exactly the LLM's reply schemas:
- `RulesEncoder.encode` -> `EncodeOutput`: one record per utterance sentence, attributed to its
  speaker, pronouns replaced by names, relative dates resolved against the session date and
  written into the text ("yesterday (7 May 2023)"), a type from lexical cues, entities and
  topics from heuristics; plus the resolution state d_k for the next segment.
- `RulesPlanner.plan` -> `QueryPlan`: one route built from the question itself.
- `extractive_answer`: the evidence sentence that best overlaps the question.

Everything is deterministic (no randomness, no set/dict iteration order in outputs) and CPU
only; regexes are compiled once at import.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from typing import Iterable, Literal, Sequence

from .schemas import (
    RECORD_TYPES,
    EncodedRecord,
    EncodeOutput,
    EntityState,
    NormalizedTime,
    QueryPlan,
    ResolutionState,
    Route,
    TimeWindow,
    Turn,
)
from .timeparse import (
    MONTH_NAMES,
    TimeExpr,
    find_time_expressions,
    format_day,
    parse_source_datetime,
    resolve_question_window,
    to_normalized,
)

# --------------------------------------------------------------------------------------------
# Lexicons
# --------------------------------------------------------------------------------------------
STOPWORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing
    don't down during each few for from further had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into
    is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only
    or other ought our ours ourselves out over own same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's
    these they they'd they'll they're they've this those through to too under until up very was
    wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while
    who who's whom why why's with won't would wouldn't you you'd you'll you're you've your yours
    yourself yourselves also just like get got gonna wanna really much many lot lots thing things
    something anything everything stuff bit kind sort one ones even still yet ever always never
    will shall may might must us im ive id dont cant didnt thats its youre whats lets
    been way well back now then since""".split()
)
# Words that carry no memory on their own: greetings, reactions, discourse markers.
FILLERS = frozenset(
    """hey hi hello hiya yo howdy wow oh ah aw aww yeah yes yep yup yay nope ok okay sure thanks
    thank thx ty cool great awesome amazing nice lol haha hahaha omg totally absolutely definitely
    glad happy congrats congratulations sounds sound good fantastic wonderful incredible lovely sweet
    true right agree exactly indeed hmm um uh man dude buddy pal bye see soon take care love
    cheers hear fun super pretty stunning beautiful gorgeous cute woah whoa gosh wonder wish
    appreciate appreciated means mean ya yea totes yes""".split()
)
_GREETING_WORDS = frozenset("hey hi hello hiya yo howdy morning evening afternoon good there guys all everyone dear".split())
_ROLE_SPEAKERS = frozenset({"user", "assistant", "human", "system", "bot", "ai"})
_MONTH_WEEKDAY = frozenset(
    [m.lower() for m in MONTH_NAMES]
    + "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday".split()
    + "mon tue tues wed thu thur thurs fri sat sun".split()
)
_ENTITY_STOP = (
    STOPWORDS
    | FILLERS
    | _MONTH_WEEKDAY
    | frozenset(
        """i i'm i've i'd i'll mom dad mum mama papa grandma grandpa today yesterday tomorrow tonight
        last next this week weekend month year summer winter spring fall autumn anyway btw by the way
        guess maybe please sorry god gee yeah nah omg lol oh hey hi hello thanks thank wow let let's whenever
        wherever sometimes think hope bet hang plus honestly luckily hopefully actually yep yup nope sure cool nice
        great awesome aw sounds gotta haha congrats congratulations good bad best love miss glad happy proud ok
        okay welcome cheers take keep check look remember enjoy dear totally definitely absolutely exactly seriously
        wish home speaking talking wait ugh yay""".split()
    )
)

# word -> topic. Small on purpose: topic nodes are only useful when many records share them.
_TOPIC_WORDS: dict[str, tuple[str, ...]] = {
    "art": ("art", "arts", "artist", "artwork", "paint", "painting", "paintings", "painted", "canvas", "drawing", "draw", "drew",
            "sketch", "pottery", "sculpture", "portrait", "self-portrait", "gallery", "museum", "mural", "craft", "crafts", "ceramics"),
    "music": ("music", "song", "songs", "sing", "singing", "band", "concert", "guitar", "piano", "violin", "album", "playlist",
              "musician", "drums", "festival", "jazz", "rock", "rap", "choir"),
    "books": ("book", "books", "novel", "novels", "read", "reading", "reader", "author", "library", "poem", "poetry", "story",
              "stories", "writing", "writer", "wrote", "screenplay", "comic", "comics"),
    "family": ("family", "fam", "kids", "kid", "children", "child", "son", "daughter", "husband", "wife", "mom", "dad", "mother",
               "father", "parents", "parent", "brother", "sister", "siblings", "grandma", "grandpa", "baby", "mom's", "parenting",
               "adopt", "adoption", "adopting", "adopted"),
    "friends": ("friend", "friends", "friendship", "buddies", "gang", "bestie"),
    "relationships": ("girlfriend", "boyfriend", "partner", "dating", "date", "married", "marriage", "wedding", "engaged",
                      "breakup", "divorce", "relationship", "romance"),
    "career": ("job", "jobs", "career", "work", "working", "boss", "office", "promotion", "company", "business", "startup",
               "interview", "hired", "coworkers", "colleague", "colleagues", "project", "counselor", "counseling", "client",
               "clients", "internship", "salary", "manager"),
    "education": ("school", "college", "university", "class", "classes", "course", "courses", "student", "students", "study",
                  "studying", "degree", "teacher", "exam", "exams", "homework", "lecture", "graduate", "graduation", "learn",
                  "learning", "workshop", "mentor", "mentorship", "mentoring"),
    "health": ("health", "doctor", "hospital", "sick", "illness", "injury", "hurt", "pain", "surgery", "medicine", "therapy",
               "therapist", "diet", "allergic", "allergy", "accident", "recovery", "medical", "clinic"),
    "mental health": ("stress", "stressed", "anxiety", "depression", "self-care", "mindfulness", "meditation", "meditate",
                      "burnout", "wellbeing", "well-being"),
    "fitness": ("gym", "workout", "exercise", "yoga", "running", "run", "ran", "marathon", "race", "hike", "hiking", "hiked",
                "biking", "bike", "cycling", "swim", "swimming", "fitness", "training", "5k", "dance", "dancing"),
    "sports": ("sport", "sports", "football", "soccer", "basketball", "baseball", "tennis", "golf", "hockey", "game", "team",
               "match", "tournament", "league", "coach", "volleyball", "skateboarding", "surfing", "skiing"),
    "travel": ("travel", "traveling", "travelling", "trip", "trips", "vacation", "holiday", "flight", "fly", "flew", "airport",
               "hotel", "abroad", "tour", "road", "roadtrip", "road-trip", "visit", "visited", "visiting", "beach", "country",
               "city", "passport"),
    "nature": ("nature", "camping", "camp", "camped", "campfire", "outdoors", "park", "forest", "mountain", "mountains", "lake",
               "river", "garden", "gardening", "flowers", "plants", "sunset", "sunrise", "ocean", "sea", "waterfall", "trail"),
    "pets": ("pet", "pets", "dog", "dogs", "puppy", "cat", "cats", "kitten", "horse", "bird", "fish", "vet", "turtle", "turtles"),
    "food": ("food", "cook", "cooking", "cooked", "recipe", "recipes", "bake", "baking", "baked", "dinner", "lunch", "breakfast",
             "restaurant", "meal", "eat", "ate", "eating", "cake", "pizza", "coffee", "cookies", "vegan", "vegetarian", "sushi",
             "chef", "kitchen"),
    "lgbtq": ("lgbtq", "lgbtq+", "lgbt", "transgender", "trans", "queer", "gay", "lesbian", "pride", "bisexual",
              "nonbinary", "non-binary", "transition", "coming-out"),
    "community": ("community", "volunteer", "volunteering", "charity", "activist", "activism", "advocacy", "advocate",
                  "support", "fundraiser", "nonprofit", "donate", "donation", "rights", "protest", "group", "council"),
    "celebration": ("birthday", "party", "celebrate", "celebrated", "celebration", "anniversary", "christmas", "thanksgiving",
                    "halloween", "holidays", "gift", "present", "parade"),
    "home": ("home", "house", "apartment", "move", "moved", "moving", "rent", "neighborhood", "room", "decor", "furniture"),
    "finance": ("money", "budget", "savings", "save", "invest", "investment", "bank", "loan", "debt", "bills", "expensive",
                "price", "paid", "buy", "bought", "shopping", "purchase"),
    "technology": ("computer", "laptop", "phone", "software", "app", "apps", "coding", "code", "programming", "tech", "website",
                   "internet", "ai", "robot", "gadget", "online"),
    "games": ("gaming", "video", "videogame", "videogames", "console", "playstation", "xbox", "nintendo", "chess", "board",
              "puzzle", "tournament"),
    "movies": ("movie", "movies", "film", "films", "cinema", "show", "series", "tv", "netflix", "actor", "actress", "theater",
               "theatre", "play"),
    "religion": ("church", "faith", "religion", "religious", "pray", "prayer", "god", "spiritual", "temple", "mosque"),
    "cars": ("car", "cars", "drive", "driving", "truck", "vehicle", "motorcycle", "engine"),
    "fashion": ("clothes", "dress", "outfit", "fashion", "shoes", "jewelry", "necklace", "makeup", "hair"),
    "photography": ("photo", "photos", "picture", "pictures", "pic", "pics", "camera", "photography", "selfie"),
}
_TOPIC_BIGRAMS = {
    "mental health": "mental health", "support group": "community", "pride parade": "lgbtq", "road trip": "travel",
    "video game": "games", "video games": "games", "board game": "games", "board games": "games",
}  # fmt: skip
TOPIC_LEXICON: dict[str, str] = {w: topic for topic, words in _TOPIC_WORDS.items() for w in words}

# --------------------------------------------------------------------------------------------
# Regexes
# --------------------------------------------------------------------------------------------
_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "\u00a0": " "})
_CAPTION_RE = re.compile(r"\s*\[image:\s*([^\]]*)\]")
_SENT_SPLIT_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\s*\n+\s*")
_ABBREV_END_RE = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|approx|e\.g|i\.e|a\.m|p\.m)\.|\b[A-Z]\.)$", re.I)
_LIST_NUMBER_RE = re.compile(r"(?:^|\s)(\d{1,2}[.)])$")  # "1." of a numbered list starts the next item
_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'+-]*")
_ANAPHOR_START_RE = re.compile(r"^\W*(?:it|that|this|they|those|these|he|she|there|which|so\s+it|and\s+it|but\s+it)\b", re.I)
# A dot only inside a word ("St.Louis"), so "Caroline. Taking" is two spans.
_CAP_WORD = r"[A-Z](?:[\w'&+-]|\.(?=\w))*"
_CAP_SPAN_RE = re.compile(rf"(?<![\w'-]){_CAP_WORD}(?:\s+(?:(?:of|the|and|de|la|van|von|&)\s+){{0,2}}{_CAP_WORD})*")
_PHOTO_OF_RE = re.compile(r"\[image:\s*(?:a\s+)?(?:photo|photograph|photography|picture|pic|close up|closeup|screenshot)\s+of\b", re.I)
_QUOTED_RE = re.compile(r'"([^"\n]{2,60})"')
_SENT_START_BEFORE_RE = re.compile(r"(?:^|[.!?:;\"(\[*#>]\s*|\n\s*|^\s*[-•]\s+)$")  # also list bullets, markdown

# "-" in the guards: "me-time" is not "me".
_FIRST_RE = re.compile(r"(?<![\w'-])(?:(?P<s>I|i)(?:'(?P<c>m|ve|d|ll))?|(?P<o>(?i:me|my|mine|myself)))(?![\w'-])")
_SECOND_RE = re.compile(r"(?<![\w'-])(?:(?P<s>(?i:you))(?:'(?P<c>re|ve|d|ll))?|(?P<o>(?i:your|yours|yourself|yourselves)))(?![\w'-])")
# An auxiliary right before a subject pronoun agrees with the name: "have you been" -> "has Caroline been".
_AUX_BEFORE_RE = re.compile(r"(?<![\w'])(am|are|were|have|do|don't|haven't|aren't|weren't)(\s+)$", re.I)
_ADVERBS = r"really|also|just|still|always|never|actually|totally|definitely|usually|often|sometimes|even|finally|truly|absolutely|kinda|already|recently|only|mostly|honestly|seriously|personally"
_NEXT_WORD_RE = re.compile(rf"(\s+)(?:((?i:{_ADVERBS}))(\s+))?([A-Za-z']+)")
_KEEP_SECOND_RE = re.compile(r"\s+(?:know\b(?=\s*(?:[,.!?]|$))|guys\b|all\b)", re.I)
_KEEP_SECOND_BEFORE_RE = re.compile(r"(?i:\b(?:thank|thanks|see|bless)\s+)$")
_CONJ_OK = frozenset(
    "and but so because cause that when whenever wherever if as since while then now though although where who what how why until once think "
    "guess hope know believe feel bet said say mean maybe and".split()
)
_PRESENT_VERBS = frozenset(
    """love like think want need feel know hope enjoy prefer hate mean guess believe play work live go try make take get see
    find use keep plan miss wish remember agree understand appreciate say wonder admire adore run paint read write cook
    teach learn volunteer care worry struggle look sound seem bet imagine hear realize practice train dream own owe visit
    tend usually always""".split()
)
_BE_HAVE_DO = {"am": "is", "are": "is", "were": "was", "have": "has", "haven't": "hasn't", "do": "does", "don't": "doesn't",
               "aren't": "isn't", "weren't": "wasn't"}  # fmt: skip
_CONTRACTION = {"m": "is", "re": "is", "ve": "has", "d": "would", "ll": "will"}

_TYPE_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("failure_pattern", re.compile(
        r"\b(?:fail(?:ed|s|ing|ure)?|didn't work|did not work|doesn't work|does not work|won't work|stopped working|broke|broken"
        r"|crash(?:ed|es)?|error|went wrong|messed up|bug(?:gy)?|glitch)\b", re.I)),
    ("procedure", re.compile(
        r"\b(?:how to|step by step|steps?\b|instructions?|recipe|tutorial|first\b.{1,80}\bthen\b|the trick is|the key is)", re.I)),
    ("tool_affordance", re.compile(
        r"\b(?:tools?|apps?|software|plugin|extension|website|app lets|lets (?:you|me|us)|allows (?:you|me|us)"
        r"|can use \w+(?: \w+)? to|use[sd]? (?:\w+ ){0,3}to (?:track|find|plan|make|edit|learn|record|organize|manage|keep))\b", re.I)),
    ("constraint", re.compile(
        r"\b(?:can't(?! (?:wait|believe|imagine|thank|stop|help|express|get enough|tell))|cannot|can not|must(?:n't)?|allergic|allergy"
        r"|intolerant|not allowed|never (?:eat|drink|use|go|fly|drive|touch|skip)|only (?:eat|drink|use|wear|buy|work|take)"
        r"|have to|has to|avoid(?:s|ing)?|deadline|no later than)\b", re.I)),
    ("preference", re.compile(
        r"(?:\b(?:i|we|they|he|she|kids|really|also|just|so|absolutely|totally|always|still|'d|would|don't|do)\s+(?:really\s+)?"
        r"(?:love|like|enjoy|prefer|hate|adore|dislike)\b|\b(?:loves|likes|enjoys|prefers|hates|adores|dislikes|favou?rites?"
        r"|fan of|passionate about|into (?:\w+ing)|obsessed with)\b|(?:^|[,.!?]\s+)(?:love|loving|adore)\b)", re.I)),
)
_IRREGULAR_PAST = frozenset(
    """went did got made took saw met had ran came gave found bought brought began drew drove ate fell felt flew forgot held
    kept knew led left lost meant paid put read rode rose sang sat sent set shot showed sold spent spoke stood stole swam
    taught thought threw told understood woke won wore wrote heard became built caught chose dug fed fought hid hit hung
    hurt let lit quit shook slept slid split spun sprang struck swore swept swung tore""".split()
)
_ED_NOT_PAST = frozenset(
    """excited interested tired scared worried amazed blessed inspired thrilled stoked pumped bored married related
    talented beloved needed indeed bed red shed wed seed feed speed proceed exceed succeed united limited based
    supposed used detailed advanced""".split()
)
_ED_ADJ_CUES = frozenset(
    "is am are was were be been being so very really too feel feels felt feeling get gets got getting i'm it's that's super pretty totally im kinda quite".split()
)
_INTERROGATIVE_RE = re.compile(
    r"^\W*(?:(?:hey|hi|so|and|but|oh|wow|well|btw|also|anyway|ok|okay|[A-Z][a-z]+),?\s+)?"
    r"(?:what|what's|whats|how|how's|why|when|where|who|whose|which|did|do|does|don't|have|has|had|are|is|was|were|can|could"
    r"|would|will|should|any|anything|ever|wanna|want|you|your|got|is|isn't|aren't|didn't|doesn't|haven't|care|mind|need|tell)\b",
    re.I,
)
_RHETORICAL_RE = re.compile(r"^\W*(?:guess|you\s+know)\s+what\b", re.I)
# "I just launched ...", "currently reading": said on the session day, the best date there is.
_RECENT_CUE_RE = re.compile(
    rf"\bjust\s+(?!(?:wanted|needed|wondered|thought|meant|felt)\b)(?:(?:{'|'.join(sorted(_IRREGULAR_PAST))})\b|[a-z]{{3,}}ed\b)"
    r"|\bcurrently\b|\bright\s+now\b|\bat\s+the\s+moment\b",
    re.I,
)
_WHEN_Q_RE = re.compile(r"^\W*(?:when\b|what\s+(?:date|day|year|month|time)\b|which\s+(?:date|day|year|month)\b|in\s+what\s+year\b|on\s+what\s+date\b)", re.I)


# --------------------------------------------------------------------------------------------
# Text helpers (public: the planner, the tests and evaluation reuse them)
# --------------------------------------------------------------------------------------------
def normalize_text(text: str) -> str:
    return (text or "").translate(_QUOTES)


def split_sentences(text: str) -> list[str]:
    """Sentences of an utterance; "Dr." and "e.g." do not end one."""
    out: list[str] = []
    for piece in _SENT_SPLIT_RE.split(text):
        piece = piece.strip()
        if not piece:
            continue
        if out and _ABBREV_END_RE.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
            continue
        if out and (num := _LIST_NUMBER_RE.search(out[-1])):  # "Options: 1." + "Check ..." -> "1. Check ..."
            piece = f"{num.group(1)} {piece}"
            out[-1] = out[-1][: num.start()].rstrip()
            if not out[-1]:
                out.pop()
        out.append(piece)
    return out


def _norm_token(tok: str) -> str:
    t = tok.lower().strip("'-+")
    return t[:-2] if t.endswith("'s") else t


def content_words(text: str, names: Iterable[str] = ()) -> list[str]:
    """Lowercased words that carry content: no stopwords, fillers or participant names."""
    skip = {n.lower() for n in names}
    out = []
    for tok in _WORD_RE.findall(text):
        t = _norm_token(tok)
        if len(t) < 2 and not t.isdigit() or t in STOPWORDS or t in FILLERS or t in skip:
            continue
        if tok[0].isupper() and _is_name_prefix(t, skip):  # "Mel" for Melanie
            continue
        out.append(t)
    return out


def stem(word: str) -> str:
    """A crude suffix stripper for overlap scoring: paints/painted/painting -> paint."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":  # planned -> plann -> plan
        w = w[:-1]
    return w


def topics_for(words: Sequence[str], max_topics: int = 3) -> list[str]:
    """Lexicon topics of a word list: most frequent first, ties by first occurrence."""
    hits: list[str] = []
    skip_next = False
    for i, w in enumerate(words):
        if skip_next:  # the second word of a bigram already counted
            skip_next = False
            continue
        if i + 1 < len(words) and (big := _TOPIC_BIGRAMS.get(f"{w} {words[i + 1]}")):
            hits.append(big)
            skip_next = True
            continue
        topic = TOPIC_LEXICON.get(w) or (TOPIC_LEXICON.get(w[:-1]) if w.endswith("s") else None)
        if topic:
            hits.append(topic)
    counts = Counter(hits)
    first = {t: i for i, t in reversed(list(enumerate(hits)))}
    return sorted(counts, key=lambda t: (-counts[t], first[t]))[:max_topics]


def _fallback_topic(words: Sequence[str]) -> list[str]:
    """No lexicon hit: the longest noun-looking content word, so every record has a topic."""
    cands = [
        w for w in words
        if len(w) >= 4 and not w.isdigit() and not w.endswith(("ly", "ed", "ing"))
        and w not in _ENTITY_STOP and w not in _PRESENT_VERBS and w not in _IRREGULAR_PAST and w not in _NOT_TOPICS
    ]  # fmt: skip
    if not cands:
        return []
    for w in sorted(cands, key=len, reverse=True):  # stable: the first of equal length wins
        single = _singular(w)
        if single not in _NOT_TOPICS and single not in _PRESENT_VERBS:
            return [single]
    return []


def _singular(w: str) -> str:
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("oes", "xes", "ches", "shes")) and len(w) > 4:
        return w[:-2]
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


_NOT_TOPICS = frozenset(
    """talk chat chatted chatting tell told stay doing done start started help helps helped lots difference long
    important tough wait positive later adorable proud special hard easy big small new old little best better worse
    give make time together everyone people idea blast moment challenge happiness lucky huge whole true real sure
    probably able worth tiny cozy crazy wild awesome amazing glad right left kind mind minds thing ways work
    experience word words forward around busy check luck favorite""".split()
)


def display_name(speaker: str) -> str:
    """How a speaker is named inside record text: "Caroline", or "the user" for role speakers."""
    s = (speaker or "").strip()
    return f"the {s.lower()}" if s.lower() in _ROLE_SPEAKERS else s or "someone"


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _possessive(name: str) -> str:
    return f"{name}'s"


def _third_person(verb: str) -> str:
    v = verb.lower()
    if v in _BE_HAVE_DO:
        out = _BE_HAVE_DO[v]
    elif v.endswith(("s", "sh", "ch", "x", "z", "o")):
        out = v + "es"
    elif len(v) > 1 and v.endswith("y") and v[-2] not in "aeiou":
        out = v[:-1] + "ies"
    else:
        out = v + "s"
    return _cap(out) if verb[:1].isupper() else out


def _may_conjugate(text: str, start: int) -> bool:
    """Is the pronoun at `start` a clause subject (not "did you go", "made you feel")?"""
    before = text[max(0, start - 30) : start].rstrip()
    if not before or before[-1] in ",.;:!?-–—(\"":
        return True
    m = re.search(r"([A-Za-z']+)$", before)
    return bool(m) and m.group(1).lower() in _CONJ_OK


def _at_sentence_start(text: str, pos: int) -> bool:
    return bool(_SENT_START_BEFORE_RE.search(text[max(0, pos - 3) : pos]))


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
            rep = f"{name} {_CONTRACTION[m['c'].lower()]}"
        else:
            rep = name
            nxt = _NEXT_WORD_RE.match(text, e)
            if nxt and _may_conjugate(text, s):
                verb = nxt.group(4)
                low = verb.lower()
                if low in _BE_HAVE_DO or low in _PRESENT_VERBS:
                    if not (low == "am" and second) and not (low in ("are", "were", "aren't", "weren't") and not second):
                        adv = f"{nxt.group(2)}{nxt.group(3)}" if nxt.group(2) else ""
                        rep = f"{name}{nxt.group(1)}{adv}{_third_person(verb)}"
                        e = nxt.end()
        if _at_sentence_start(text, s):
            rep = _cap(rep)
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
    "I went" -> "Caroline went", "my" -> "Caroline's", "I love" -> "Caroline loves"."""
    text = _rewrite_person(text, _FIRST_RE, display_name(speaker), second=False)
    if other:
        text = _rewrite_person(text, _SECOND_RE, display_name(other), second=True)
    return text


def insert_dates(text: str, times: Sequence[TimeExpr]) -> str:
    """"... yesterday ..." -> "... yesterday (7 May 2023) ..." for relative expressions."""
    out, pos = [], 0
    for te in times:
        if not te.relative:
            continue
        out.append(text[pos : te.span[1]])
        out.append(f" ({te.label})")
        pos = te.span[1]
    out.append(text[pos:])
    return "".join(out)


def classify(text: str, has_time: bool) -> str:
    """One of the seven record types from lexical cues (first matching rule wins)."""
    for rtype, rx in _TYPE_RULES:
        if rx.search(text):
            return rtype
    if has_time or _has_past_action(text):
        return "event"
    return "fact"


def _has_past_action(text: str) -> bool:
    prev = ""
    for tok in _WORD_RE.findall(text):
        t = tok.lower()
        if t in _IRREGULAR_PAST:
            return True
        # "-ed" after be/feel/so is an adjective or a passive: "is swamped", "so excited".
        if len(t) > 4 and t.endswith("ed") and t not in _ED_NOT_PAST and not t.endswith("eed") and prev not in _ED_ADJ_CUES:
            return True
        prev = t
    return False


# --------------------------------------------------------------------------------------------
# Entities
# --------------------------------------------------------------------------------------------
@dataclass
class _EntityIndex:
    """Known names (lowercase -> canonical) and the participant names aliases resolve to."""

    participants: list[str] = field(default_factory=list)
    canonical: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # canonical -> aliases seen

    def add(self, name: str) -> None:
        self.canonical.setdefault(name.lower(), name)

    def lookup(self, name: str) -> str | None:
        low = name.lower()
        if low in self.canonical:
            return self.canonical[low]
        if len(low) >= 3:  # "Mel" for "Melanie": a proper prefix of exactly one participant
            hits = [p for p in self.participants if p.lower().startswith(low) and p.lower() != low]
            if len(hits) == 1:
                self.aliases.setdefault(hits[0], [])
                if name not in self.aliases[hits[0]]:
                    self.aliases[hits[0]].append(name)
                return hits[0]
        return None


def _clean_entity(span: str) -> str:
    span = re.sub(r"'s$|'$", "", span.strip(" .,'-+&"))
    span = re.sub(r"^(?:the|a|an)\s+", "", span, flags=re.I)  # "The Expanse" and "Expanse" are one entity
    return " ".join(span.split())


_AND_SPLIT_RE = re.compile(r"\s+(?:and|&)\s+")


def _span_names(words: list[str], at_start: bool, index: _EntityIndex) -> list[str]:
    """Names in one capitalized span; "Josh and Mark" is two."""
    if at_start and words and index.lookup(_clean_entity(words[0])) is None:
        first = _clean_entity(words[0]).lower()
        # A sentence-initial word is only capitalized by position: keep it only as part of a
        # longer name that does not start with an ordinary word ("Kingkiller Chronicle").
        if len(words) == 1 or first in _ENTITY_STOP or first.endswith(("ing", "ed", "ly", "'s")):
            words = words[1:]
    out = []
    for part in _AND_SPLIT_RE.split(" ".join(words)):
        ws = part.split()
        while ws and _clean_entity(ws[0]).lower() in _ENTITY_STOP:
            ws = ws[1:]
        while ws and _clean_entity(ws[-1]).lower() in _ENTITY_STOP:
            ws = ws[:-1]
        name = _clean_entity(" ".join(ws))
        if len(name) >= 2 and name.lower() not in _ENTITY_STOP:
            out.append(index.lookup(name) or name)
    return out


def extract_entities(text: str, index: _EntityIndex) -> list[str]:
    """Capitalized spans (a sentence-initial word only when it is a known name or starts a
    longer name), quoted titles, and known names in any case; aliases map to their participant."""
    found: list[tuple[int, str]] = []
    for m in _CAP_SPAN_RE.finditer(text):
        if text[max(0, m.start() - 2) : m.start()] == "**" or (text[m.end() : m.end() + 1] == ":" and _at_sentence_start(text, m.start())):
            continue  # a markdown heading ("**Strength Training**:"), not a name
        for name in _span_names(m.group(0).split(), _at_sentence_start(text, m.start()), index):
            found.append((m.start(), name))
    for m in _QUOTED_RE.finditer(text):
        title = _clean_entity(m.group(1))
        if title and len(title.split()) <= 8:
            found.append((m.start(), title))
    for tok in _WORD_RE.findall(text):  # participants written in lower case ("mel", "caroline")
        hit = index.canonical.get(_norm_token(tok))
        if hit and hit in index.participants:
            found.append((len(text), hit))
    found.sort(key=lambda x: x[0])
    out: list[str] = []
    seen: set[str] = set()
    for _, name in found:
        if name.lower() not in seen:
            seen.add(name.lower())
            out.append(name)
    return out


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------
@dataclass
class _Unit:
    text: str  # normalized source text of one record (one sentence, maybe with merged fragments)
    turn: Turn
    n_content: int
    question: bool


def _is_question(sentence: str) -> bool:
    """A question addressed to the other speaker. Declarative sentences that end in "?"
    ("We're going to a game next Sunday, want to join?") and rhetorical "Guess what I did
    this week?" carry facts and are kept as statements."""
    if not sentence.rstrip(" \"')]").endswith("?"):
        return False
    return bool(_INTERROGATIVE_RE.match(sentence)) and not _RHETORICAL_RE.match(sentence)


def _turn_units(turn: Turn, names: frozenset[str]) -> tuple[list[_Unit], list[str]]:
    """The record-sized pieces of one turn, and its question sentences (for open threads)."""
    text = normalize_text(turn.text)
    captions = [c.strip() for c in _CAPTION_RE.findall(text) if c.strip()]
    body = _CAPTION_RE.sub("", text).strip()
    units: list[_Unit] = []
    questions: list[str] = []
    pending: list[str] = []  # filler fragments waiting for the next sentence
    for sent in split_sentences(body):
        n = len(content_words(sent, names))
        if n == 0:
            words = [_norm_token(t) for t in _WORD_RE.findall(sent)]
            if all(w in _GREETING_WORDS or w in names or _is_name_prefix(w, names) for w in words):
                continue  # "Hey Mel!": a pure greeting
            pending.append(sent)
            continue
        q = _is_question(sent)
        if q:
            questions.append(sent)
        if units and not q and not units[-1].question and _ANAPHOR_START_RE.match(sent) and len(sent.split()) <= 12 and not pending:
            units[-1].text += " " + sent  # "It was so powerful." belongs to the sentence before
            units[-1].n_content += n
            continue
        units.append(_Unit(" ".join(pending + [sent]), turn, n, q))
        pending = []
    if pending and units:
        units[-1].text += " " + " ".join(pending)
    statements = [u for u in units if not u.question]
    if statements:
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


def _is_name_prefix(word: str, names) -> bool:
    return len(word) >= 3 and any(n.startswith(word) for n in names)


def _turn_date(turn: Turn) -> date | None:
    dt = parse_source_datetime(turn.timestamp) if turn.timestamp else None
    return dt.date() if dt else None


def _session_expr(cue: re.Match, anchor: date) -> TimeExpr:
    iso = anchor.isoformat()
    return TimeExpr(iso, iso, "day", cue.group(0), cue.span(), True, format_day(anchor))


def _session_time(d: date | None) -> NormalizedTime:
    if d is None:
        return to_normalized(None)
    iso = d.isoformat()
    return NormalizedTime(start=iso, end=iso, granularity="day", expression=None)


class RulesEncoder:
    """Segment -> `EncodeOutput` without an LLM.

    default_time: the `time` of a record whose sentence names no time. "none" (the default)
    matches the LLM contract ("null dates when unknown"); "session" puts the session date
    there, with expression null, so a time filter also finds what was said on a day.
    max_entities: cap on d_k's entity list (participants are always kept).
    """

    def __init__(self, default_time: Literal["none", "session"] = "none", max_entities: int = 64):
        if default_time not in ("none", "session"):
            raise ValueError(f"default_time must be 'none' or 'session', got {default_time!r}")
        self.default_time = default_time
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
        for pos, turn in enumerate(turns):
            anchor = _turn_date(turn) or anchor_fallback
            other = self._other(turn.speaker, participants)
            units, questions = _turn_units(turn, names)
            for u in units:
                rec = self._record(u, anchor, other, index)
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
    def _record(self, u: _Unit, anchor: date | None, other: str | None, index: _EntityIndex) -> EncodedRecord:
        speaker = u.turn.speaker
        times = find_time_expressions(u.text, anchor)
        if not times and anchor is not None and (cue := _RECENT_CUE_RE.search(u.text)):
            times = [_session_expr(cue, anchor)]
        text = resolve_pronouns(insert_dates(u.text, times), speaker, other)
        shown = display_name(speaker)
        if shown.lower() not in text.lower():
            text = f"{_cap(shown)}: {text}"
        entities = [] if speaker.lower() in _ROLE_SPEAKERS else [speaker]
        for e in extract_entities(u.text, index):
            if e not in entities:
                entities.append(e)
        if other and other.lower() not in _ROLE_SPEAKERS and other not in entities and re.search(rf"\b{re.escape(display_name(other))}\b", text):
            entities.append(other)
        topic_text = _PHOTO_OF_RE.sub(" ", u.text)  # every caption starts "a photo of": not a topic
        topics = topics_for(content_words(topic_text, ())) or _fallback_topic(content_words(topic_text, index.canonical))
        if times:
            time = to_normalized(times[0])
        else:
            time = _session_time(anchor) if self.default_time == "session" else to_normalized(None)
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
    def _index(participants: list[str], context: ResolutionState | None, recent: list[EncodedRecord]) -> _EntityIndex:
        index = _EntityIndex(participants=[p for p in participants if p.lower() not in _ROLE_SPEAKERS])
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
        index: _EntityIndex,
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
            kept.append(q if q.lower().startswith(display_name(asker).lower()) else f"{_cap(display_name(asker))}: {q}")
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


# --------------------------------------------------------------------------------------------
# Planner
# --------------------------------------------------------------------------------------------
_QUESTION_STARTERS = frozenset("what when where who whom whose which why how did does do is are was were has have had can could would should will".split())


class RulesPlanner:
    """Question -> a one-route `QueryPlan`: the question as goal, its content words and
    phrases as search terms, its named entities, lexicon topics and parsed time window."""

    def plan(self, question: str, question_date=None, known_entities: Sequence[str] = ()) -> QueryPlan:
        q = normalize_text(question).strip()
        times = find_time_expressions(q, question_date)
        in_time = [te.span for te in times]
        index = _EntityIndex(participants=list(known_entities))
        for e in known_entities:
            index.add(e)
        entities = self._entities(q, index, bool(known_entities))
        phrases = [m.group(1).strip() for m in _QUOTED_RE.finditer(q)]
        phrases += [e for e in entities if " " in e]
        words = [
            _norm_token(m.group(0))
            for m in _WORD_RE.finditer(q)
            if not any(s <= m.start() < e for s, e in in_time)
        ]
        terms = [w for w in words if w not in STOPWORDS and w not in FILLERS and w not in _MONTH_WEEKDAY and (len(w) > 1 or w.isdigit())]
        search_terms = list(dict.fromkeys(phrases + entities + [t for t in terms if t not in {e.lower() for e in entities}]))
        window = resolve_question_window(q, question_date)
        return QueryPlan(
            routes=[
                Route(
                    goal=q,
                    search_terms=search_terms,
                    entities=entities,
                    topics=topics_for(terms),
                    time_window=TimeWindow(start=window[0], end=window[1]) if window else None,
                )
            ]
        )

    @staticmethod
    def _entities(q: str, index: _EntityIndex, have_known: bool) -> list[str]:
        out: list[str] = []
        for m in _CAP_SPAN_RE.finditer(q):
            words = m.group(0).split()
            if m.start() == 0 and words and words[0].lower() in _QUESTION_STARTERS:
                words = words[1:]
            for cand in _candidate_names(words):
                hit = index.lookup(cand)
                if hit is None and not have_known and cand.lower() not in _ENTITY_STOP:
                    hit = cand
                if hit and hit not in out:
                    out.append(hit)
        for tok in _WORD_RE.findall(q):  # known names in lower case
            hit = index.canonical.get(_norm_token(tok))
            if hit and hit not in out:
                out.append(hit)
        return out


def _candidate_names(words: list[str]) -> list[str]:
    """The whole capitalized span, or failing a match, its single words."""
    out = []
    for part in _AND_SPLIT_RE.split(" ".join(words)):  # "Jon and Gina" is two names
        ws = [w for w in (_clean_entity(x) for x in part.split()) if w and w.lower() not in _ENTITY_STOP]
        if ws:
            out.append(" ".join(ws))
            if len(ws) > 1:
                out.extend(ws)
    return out


# --------------------------------------------------------------------------------------------
# Extractive answer
# --------------------------------------------------------------------------------------------
def _stems(text: str) -> set[str]:
    """Stemmed non-stopwords. Fillers count here: "love" is small talk in a greeting but the
    point of "What does Melanie love?"."""
    return {stem(t) for t in (_norm_token(x) for x in _WORD_RE.findall(text)) if t and t not in STOPWORDS}


def _date_phrase(sentence: str) -> str | None:
    """The resolved date of a sentence: a parenthesized label we wrote, else its last date."""
    found = find_time_expressions(sentence, None)
    if not found:
        return None
    for te in found:
        if sentence[max(0, te.span[0] - 1) : te.span[0]] == "(":
            return te.label
    return found[-1].label


def extractive_answer(question: str, evidence: list[str]) -> str:
    """The evidence sentence with the most content-word overlap with the question (ties: the
    earlier, higher-ranked evidence). For "when" questions a sentence holding a date wins ties
    and the date itself is returned. Empty evidence gives ""."""
    q = normalize_text(question)
    q_stems = _stems(q)
    wants_date = bool(_WHEN_Q_RE.search(q))
    best: tuple[float, str, str | None] | None = None
    for ev in evidence:
        for sent in split_sentences(normalize_text(ev)):
            score = float(len(q_stems & _stems(sent)))
            phrase = _date_phrase(sent) if wants_date else None
            if phrase:
                score += 0.5
            if best is None or score > best[0]:
                best = (score, sent, phrase)
    if best is None:
        return ""
    return best[2] if best[2] else best[1]
