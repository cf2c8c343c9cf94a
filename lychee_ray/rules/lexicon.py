"""Word lists of the rules backend: stopwords, fillers, entity stop words, verb forms for pronoun
rewriting, record-type cues, words that are never a topic, and question starters.

Data only, kept apart from the code that uses it so that tuning a list touches no logic. Every list
is general English; none names what a benchmark conversation is about (topics are keyphrases of
the text itself: `text.segment_keyphrases`).
"""

from __future__ import annotations

import re

from lychee_ray.dates import MONTH_NAMES

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
GREETING_WORDS = frozenset("hey hi hello hiya yo howdy morning evening afternoon good there guys all everyone dear".split())
ROLE_SPEAKERS = frozenset({"user", "assistant", "human", "system", "bot", "ai"})
ASSISTANT_ROLES = frozenset({"assistant", "bot", "ai", "gpt", "chatgpt", "model"})
MONTH_WEEKDAY = frozenset(
    [m.lower() for m in MONTH_NAMES]
    + "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday".split()
    + "mon tue tues wed thu thur thurs fri sat sun".split()
)
ENTITY_STOP = (
    STOPWORDS
    | FILLERS
    | MONTH_WEEKDAY
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

ADVERBS = r"really|also|just|still|always|never|actually|totally|definitely|usually|often|sometimes|even|finally|truly|absolutely|kinda|already|recently|only|mostly|honestly|seriously|personally"
CONJ_OK = frozenset(
    "and but so because cause that when whenever wherever if as since while then now though although where who what how why until once think "
    "guess hope know believe feel bet said say mean maybe and".split()
)
PRESENT_VERBS = frozenset(
    """love like think want need feel know hope enjoy prefer hate mean guess believe play work live go try make take get see
    find use keep plan miss wish remember agree understand appreciate say wonder admire adore run paint read write cook
    teach learn volunteer care worry struggle look sound seem bet imagine hear realize practice train dream own owe visit
    tend usually always""".split()
)
BE_HAVE_DO = {"am": "is", "are": "is", "were": "was", "have": "has", "haven't": "hasn't", "do": "does", "don't": "doesn't",
               "aren't": "isn't", "weren't": "wasn't"}  # fmt: skip
CONTRACTION = {"m": "is", "re": "is", "ve": "has", "d": "would", "ll": "will"}

# A standing instruction to the assistant: an imperative that opens a sentence ("Always ...",
# "Never ...", "Make sure to ...") and says when it applies ("... when I ask about ..."), or one
# that says it holds from now on. It governs every later answer on its subject, so it is a
# constraint whatever else it mentions ("always list the errors when I ask about builds" is no
# failure report): this rule runs first. The when-clause and the word after the opener keep out
# "Always a pleasure when we meet" and "Never mind"; a statement about oneself ("I always ...
# when I ...") opens with no imperative.
STANDING_INSTRUCTION = re.compile(
    r"(?:^|[.!?;:]\s+|\n)(?:(?:please|and|also|oh|ok(?:ay)?|so),?\s+)?"
    r"(?:(?:always|never|make sure|be sure|remember|don't forget|do not forget)\b"
    r"(?![\s,]+(?:mind|a|an|the|been|so|such|good|great|nice|fun|happy|glad|lovely|there|here|ever)\b)"
    r"[^.!?\n]{0,160}?\b(?:when(?:ever)?|every time|each time|any time|anytime|if)\s+(?:i|we|the user)\b"
    r"|(?:from now on|going forward|in (?:the )?future)\b[^.!?\n]{0,160}?\b(?:always|never|please|make sure|use|include|give|keep|avoid)\b)",
    re.I)

TYPE_RULES: tuple[tuple[str, re.Pattern], ...] = (
    ("constraint", STANDING_INSTRUCTION),
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
IRREGULAR_PAST = frozenset(
    """went did got made took saw met had ran came gave found bought brought began drew drove ate fell felt flew forgot held
    kept knew led left lost meant paid put read rode rose sang sat sent set shot showed sold spent spoke stood stole swam
    taught thought threw told understood woke won wore wrote heard became built caught chose dug fed fought hid hit hung
    hurt let lit quit shook slept slid split spun sprang struck swore swept swung tore""".split()
)
ED_NOT_PAST = frozenset(
    """excited interested tired scared worried amazed blessed inspired thrilled stoked pumped bored married related
    talented beloved needed indeed bed red shed wed seed feed speed proceed exceed succeed united limited based
    supposed used detailed advanced""".split()
)
ED_ADJ_CUES = frozenset(
    "is am are was were be been being so very really too feel feels felt feeling get gets got getting i'm it's that's super pretty totally im kinda quite".split()
)


NOT_TOPICS = frozenset(
    """talk chat chatted chatting tell told stay doing done start started help helps helped lots difference long
    important tough wait positive later adorable proud special hard easy big small new old little best better worse
    give make time together everyone people idea blast moment challenge happiness lucky huge whole true real sure
    probably able worth tiny cozy crazy wild awesome amazing glad right left kind mind minds thing ways work
    experience word words forward around busy check luck favorite day days""".split()
)


# --------------------------------------------------------------------------------------------
# Planner
# --------------------------------------------------------------------------------------------
QUESTION_STARTERS = frozenset("what when where who whom whose which why how did does do is are was were has have had can could would should will".split())
