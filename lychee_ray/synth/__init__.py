"""The project's own labelled conversations: a generator of archives in every input format the
project reads, for tests, the demo and evaluations, with no benchmark text in them.

`write_archive(out, SynthParams(...))` (or `lychee-ray synth`) writes `archive/` (LoCoMo,
LongMemEval, generic chat, turn rows as JSONL or Parquet, or BEAM's folders), `questions.jsonl`
and `labels.json` (`archive` says what each holds). The same parameters give the same bytes.

Two styles: chit-chat between two friends (short turns, speaker names) and user-assistant work
conversations (long replies with lists, steps, code, versions and commands). Question categories:
- single_hop: one turn states the answer (a pet's name, a colour, a job; work: a version, a port);
- coreference: a person named in one turn, the fact said in a later one with a pronoun, a
  nickname or "my <relation>" (sometimes sessions later), asked by name; evidence: both turns;
- multi_hop: needs two sessions: "<name>'s <relation>" named in one, the fact about that person
  by name in a later one (work: list items added in two sessions; the answer lists them);
- temporal: when an event happened, resolved from an absolute date ("on 14 March") or a relative
  one ("last Saturday", "two weeks ago", "yesterday") against the session date (`calendar`);
  which of two events came first; how many weeks between two (roles first_event/second_event);
- knowledge_update: a value replaced later (moved house, new job, "420 ms" revised to "180 ms"); asks
  the current value; roles original_info/updated_info; a `supersedes` change;
- contradiction: "I have never ..." then a turn where they did; roles first_statement /
  second_statement; a `contradicts` change;
- abstention: about something no turn says; the answer is "not mentioned";
- work only: assistant_recall (what the assistant proposed: a pool size, a table name, a
  command), preference (a question whose answer should follow a stated preference),
  instruction (one that should follow a standing instruction), event_ordering (the order in
  which the user brought up three features), summarization (the decisions about a component).
Filler turns name the same people, pets, components and events without their facts, so finding
the turns that name an entity is not enough.

Layering: with `io`, `llm`, `rules` and `runtime`, above the core modules only.
"""

from lychee_ray.synth.archive import ArchiveSummary, write_archive
from lychee_ray.synth.generate import generate
from lychee_ray.synth.params import FORMATS, STYLES, SynthError, SynthParams

__all__ = ["ArchiveSummary", "FORMATS", "STYLES", "SynthError", "SynthParams", "generate", "write_archive"]
