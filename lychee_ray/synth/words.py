"""The chit-chat vocabulary: invented names and places, pets, objects, jobs, hobbies, events,
and the small talk that pads a turn. All of it is the generator's own.

Two rules keep the labels exact. Small talk names no person, place, number or date, so padding
never states a fact. The terms in `NEVER_SAID` are used by no template and no list: abstention
questions ask about them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Given names are an invented stem and an ending; the stem is the nickname, so stems are unique
# within a conversation and no stem is an English word.
NAME_STEMS = (
    "Bren", "Cosk", "Dael", "Ferr", "Gwil", "Hask", "Ivr", "Jorr", "Kess", "Lorv", "Mirr", "Nesk",
    "Oss", "Pell", "Quen", "Rall", "Sev", "Torv", "Ulv", "Vess", "Wyl", "Yorr", "Zann", "Brav",
    "Cael", "Drem", "Eld", "Fyn", "Gorr", "Heth", "Isk", "Jask",
)  # fmt: skip
FEMALE_ENDINGS = ("ira", "ela", "wen", "etta", "ise", "ova")
MALE_ENDINGS = ("ic", "an", "ov", "ard", "ius", "emar")

PLACE_HEADS = (
    "Bramble", "Cinder", "Elder", "Fallow", "Gorse", "Heron", "Kestrel", "Lantern", "Marrow",
    "Nettle", "Osier", "Pebble", "Rook", "Sorrel", "Thistle", "Umber", "Vetch", "Wren",
)  # fmt: skip
PLACE_TAILS = ("mere", "ford", "wick", "combe", "haven", "stead", "bury", "holt", "ridge", "moor")

# relation -> the pronoun its person takes ("" : either)
RELATIONS = {
    "sister": "she", "brother": "he", "aunt": "she", "uncle": "he", "cousin": "", "neighbour": "",
    "flatmate": "", "colleague": "", "godmother": "she", "stepbrother": "he", "grandmother": "she",
}  # fmt: skip

SPECIES = ("cat", "dog", "rabbit", "ferret", "hamster", "guinea pig", "lizard", "hedgehog")
PET_NAMES = (
    "Pickle", "Biscuit", "Noodle", "Mochi", "Pretzel", "Waffle", "Clementine", "Button", "Domino",
    "Pippin", "Sprocket", "Tofu", "Marble", "Rascal", "Crumpet", "Dumpling", "Gizmo", "Nutmeg",
)  # fmt: skip
OBJECTS = ("kayak", "bicycle", "scooter", "camper van", "guitar", "tent", "armchair", "canoe", "typewriter", "telescope", "sewing machine")
COLOURS = ("teal", "ochre", "mustard yellow", "burgundy", "lilac", "forest green", "copper", "navy blue", "coral", "charcoal grey", "turquoise", "plum")
JOBS = (
    "glassblower", "tram driver", "cartographer", "beekeeper", "sound engineer", "ferry pilot",
    "locksmith", "radio host", "bookbinder", "arborist", "court stenographer", "pastry chef",
    "lighthouse keeper", "tailor", "land surveyor", "puppeteer", "welder", "zookeeper",
    "translator", "organ builder", "florist", "paramedic",
)  # fmt: skip
HOBBIES = ("pottery", "fencing", "birdwatching", "rock climbing", "calligraphy", "salsa dancing", "woodturning", "archery", "knitting", "origami", "juggling")
# things a person has never done, then did: (never said, a later turn says, the question's verb phrase)
FIRSTS = (
    ("never gone skiing", "went skiing", "gone skiing"),
    ("never baked bread", "baked bread", "baked bread"),
    ("never played chess", "played chess", "played chess"),
    ("never ridden a horse", "rode a horse", "ridden a horse"),
    ("never seen the sea", "saw the sea", "seen the sea"),
    ("never sung karaoke", "sang karaoke", "sung karaoke"),
    ("never planted a tree", "planted a tree", "planted a tree"),
)
# a number that gets revised: (attribute, first statement, later statement, question); {n} is the value
NUMBERS = (
    ("longest swim", "My longest swim so far is {n} in one go.", "New record at the pool: {n} in one go!", "What is {who}'s longest swim?", "lengths", (20, 90)),
    ("commute", "My commute takes {n} each way.", "Good news: my commute is down to {n} each way.", "How long is {who}'s commute?", "minutes", (12, 70)),
    ("books read this year", "I've read {n} this year so far.", "Update on my reading: I'm at {n} this year.", "How many books has {who} read this year?", "books", (3, 40)),
)


@dataclass(frozen=True)
class EventKind:
    """A dated event: "ran" + "the half marathon in {place}"; asked "When did X run ...?"."""

    past: str
    base: str
    gerund: str
    thing: str  # may hold {place}


EVENTS = (
    EventKind("ran", "run", "running", "the half marathon in {place}"),
    EventKind("visited", "visit", "visiting", "the night market in {place}"),
    EventKind("went to", "go to", "going to", "the lantern festival in {place}"),
    EventKind("finished", "finish", "finishing", "the pottery course in {place}"),
    EventKind("played", "play", "playing", "a gig at the folk club in {place}"),
    EventKind("hosted", "host", "hosting", "a quiz night at the library in {place}"),
    EventKind("repainted", "repaint", "repainting", "the garden shed"),
    EventKind("passed", "pass", "passing", "the driving test"),
    EventKind("climbed", "climb", "climbing", "the big hill above {place}"),
    EventKind("swam in", "swim in", "swimming in", "the open-water race at {place}"),
    EventKind("toured", "tour", "touring", "the old mill in {place}"),
    EventKind("judged", "judge", "judging", "the cake contest in {place}"),
)

# Terms no turn ever contains: abstention questions ask about them.
NEVER_SAID = {
    "pet": ("parrot", "iguana", "goldfish", "alpaca", "tortoise", "cockatoo"),
    "object": ("motorbike", "piano", "sailboat", "greenhouse", "trampoline", "drum kit"),
    "place": ("Quarrydale", "Saltbarrow", "Tinmouth", "Oakhallow", "Ferncliffe"),
    "relation": ("nephew", "niece", "stepsister", "grandfather"),
}

GREETINGS = ("Hey {other}!", "Hi {other}!", "Hello {other}!", "Oh hi {other}!", "{other}! Good to hear from you.")
SMALL_TALK = (
    "How have you been?", "It has been a busy stretch over here.", "I finally got some sleep.",
    "The weather keeps changing its mind.", "I made way too much soup again.", "My plants are thriving, somehow.",
    "I have been trying to drink more water.", "The neighbours' music was loud again.",
    "I keep meaning to tidy the hallway.", "That reminds me, I need new shoelaces.",
    "I started a new book, slow going so far.", "I could really use a holiday.",
    "Work has been fine, nothing exciting.", "The kettle finally gave up.", "I tried a new recipe, it was alright.",
    "The bus was late as usual.", "I love this time of year.", "I have been listening to a lot of old records.",
)  # fmt: skip
REACTIONS = (
    "Oh wow, that is great!", "Ha, that sounds about right.", "No way, really?", "That is lovely to hear.",
    "Oh, I did not know that.", "Nice, good for you!", "That sounds like a lot of fun.", "Ha, classic.",
    "I know exactly what you mean.", "Oh, that is interesting.", "Sounds like a good plan.", "Love that.",
)  # fmt: skip
# a mention of someone or something with no fact in it: {name} is a person's or a pet's name
PERSON_MENTIONS = (
    "{name} says hi, by the way.", "I keep meaning to call {name}.", "Have you heard from {name} at all?",
    "{name} sent me a funny message earlier.", "I should invite {name} round sometime.",
    "{name} asked about you.", "I owe {name} a long letter.", "{name} would love this story.",
)  # fmt: skip
