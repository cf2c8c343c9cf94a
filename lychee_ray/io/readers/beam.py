"""Reader for BEAM (arXiv 2510.27246): very long user-assistant conversations, one per folder.

A BEAM conversation is a folder, not a file: `chat.json` (or `chat_trunecated.json`, the authors'
spelling) beside `probing_questions/probing_questions.json` (and `topic.json`, which holds no
turn or question). `beam_folders` finds such folders in an input listing by what they hold: the
two names, and a chat file that opens a JSON list (its batches); a folder whose chat file does
not is no BEAM folder and its files are read as any other input. A bucket (`100K/1`, `100K/2`,
...) or a folder above buckets is just a listing with many such folders. Every file under a BEAM
folder belongs to it: the chat file and the questions file are read, any other is named in the
log (`log.info` for the layout's own unread files, a warning for others), never read again as
another format.

Which chat file: `chat_trunecated.json` when it exists, else `chat.json` (the authors' answer
script). It is a list of batches {batch_number, time_anchor, turns: [[message, ...], ...]}; a
batch is a session (`session_<batch_number>`), and its time anchor ("March-15-2024", on the batch
or on its first message) stamps all of its messages. A message {role, id, content} is a turn
whose id is the message id as text, and the generation markers BEAM leaves in the text
(`->-> 1,1`) are removed.

The conversation id is `beam-<bucket>-<folder>` from the last two names of the folder's resolved
path (`100K/3` -> `beam-100K-3`), anything but letters, digits, `.`, `_` and `-` replaced by `_`:
however the input path is spelled (relative, absolute, through a link, with a trailing slash),
the id is the same. Two folders with the same two names in one input are one id twice: the
second is a `duplicate` row, as for any format.

Probing questions ({ability: [question, ...]}) become questions with the ability as category,
ids `<conversation_id>:<ability>:<k>` (k from 1 in the file's order), the reference under
`answer`, `ideal_answer`, `ideal_response` or `ideal_summary` (instruction and preference
following have none: their rubric is the reference), the rubric nuggets, and the evidence
(`source_chat_ids`: a flat list, nested lists flattened, or a dict by role) as message ids with a
parallel list of roles ("" for a flat list). Questions are dated at the last batch's anchor
unless they carry a `question_date`.

A bad part costs only itself: an unreadable or malformed file, a batch that is not an object, a
message without id or text, a repeated message id, an anchor that is no date, an evidence id that
names no message are each an `errors` row naming the file, the batch (as `line`) and the field;
every valid turn and question is kept and every input message is a turn or an errors row.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow.fs as pafs

from lychee_ray.config_sections import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.fs import comparable_path, join_path, resolve_uri
from lychee_ray.io.readers.common import ErrorEntry, Source, a_type, finish, scalar_text, short, validated_turns
from lychee_ray.io.readers.decode import BOM, decode_utf8, loads_any_depth
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Question

log = logging.getLogger(__name__)

CHAT_FILES = ("chat_trunecated.json", "chat.json")  # the authors' preference, in order
QUESTIONS_DIR = "probing_questions"
QUESTIONS_FILE = f"{QUESTIONS_DIR}/probing_questions.json"
ABILITIES = (
    "abstention", "contradiction_resolution", "event_ordering", "information_extraction",
    "instruction_following", "knowledge_update", "multi_session_reasoning", "preference_following",
    "summarization", "temporal_reasoning",
)  # fmt: skip
ANSWER_KEYS = ("answer", "ideal_answer", "ideal_response", "ideal_summary")
_MARKER = re.compile(r"[ \t]*->->[ \t]*\d+(?:[ \t]*,[ \t]*\d+)*")  # "->-> 1,1", "->->  3,8"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_HEAD = 1 << 12  # bytes of a chat file the listing looks at


# --------------------------------------------------------------------------------------------
# Listing: which folders are BEAM conversations
# --------------------------------------------------------------------------------------------
def beam_folders(fs: pafs.FileSystem, found: list[tuple[str, int | None]]) -> dict[str, str]:
    """The BEAM conversation folders among the listed files `found` -> the chat file read in
    each. The files under them that are not read are named in the log."""
    names_in: dict[str, set[str]] = {}
    for name, _ in found:
        folder, _, base = name.rpartition("/")
        names_in.setdefault(folder, set()).add(base)
    folders: dict[str, str] = {}
    for folder in sorted(names_in, key=len):  # outermost first: a BEAM folder owns all below it
        chat = next((c for c in CHAT_FILES if c in names_in[folder]), None)
        if chat is None or any(folder.startswith(f"{f}/") for f in folders):
            continue
        if _has_questions_dir(fs, folder, names_in) and _opens_list(fs, join_path(folder, chat)):
            folders[folder] = chat
    for folder, chat in folders.items():
        _log_unread(folder, chat, [name for name, _ in found if name.startswith(f"{folder}/")])
    return folders


def _has_questions_dir(fs: pafs.FileSystem, folder: str, names_in: dict[str, set[str]]) -> bool:
    qdir = join_path(folder, QUESTIONS_DIR)
    if qdir in names_in:
        return True
    try:  # one holding no file directly (empty, or only subfolders) is asked for
        return fs.get_file_info(qdir).type == pafs.FileType.Directory
    except OSError:
        return False


def _opens_list(fs: pafs.FileSystem, path: str) -> bool:
    """Whether the file's content starts a JSON list (BEAM's batches), spaces and a BOM aside."""
    try:
        with fs.open_input_file(path) as fh:
            head = fh.read(_HEAD)
    except OSError:
        return False
    return head.removeprefix(BOM).lstrip(b" \t\r\n")[:1] == b"["


def _log_unread(folder: str, chat: str, names: list[str]) -> None:
    read = {join_path(folder, chat), join_path(folder, QUESTIONS_FILE)}
    for name in sorted(set(names) - read):
        rel = name[len(folder) + 1 :]
        if rel in CHAT_FILES:
            log.info("not reading %s: the BEAM folder %s is read from %s (the authors' rule: the truncated chat when it exists)", name, folder, chat)
        elif rel == "topic.json":
            log.info("not reading %s: BEAM's topic.json describes the conversation's topic and holds no turn or question", name)
        else:
            log.warning("not reading %s: it lies in the BEAM folder %s, which is read from %s and %s only", name, folder, chat, QUESTIONS_FILE)


def beam_conversation_id(uri: str) -> str:
    """`beam-<bucket>-<folder>` from the folder's resolved path (see the module docstring)."""
    parts = [p for p in comparable_path(uri).split("/") if p]
    names = [_UNSAFE.sub("_", p) for p in parts[-2:]]
    return "-".join(["beam", *names])


# --------------------------------------------------------------------------------------------
# Reading one folder
# --------------------------------------------------------------------------------------------
@dataclass
class BeamFolder:
    """A BEAM folder's parsed files: the chat (None: missing or unparseable) and the questions
    (None likewise), where they are, and the problems of reading them."""

    chat_path: str
    questions_path: str
    chat: object = None
    questions: object = None
    problems: list[ErrorEntry] = field(default_factory=list)


def load_beam_folder(uri: str, path: str) -> BeamFolder:
    """The folder's chat file (by the authors' rule) and questions file, parsed. `uri` is what
    is opened, `path` how messages name the folder."""
    fs, base = resolve_uri(uri)
    infos = fs.get_file_info([join_path(base, name) for name in (*CHAT_FILES, QUESTIONS_FILE)])
    kinds = [i.type for i in infos]
    chat = next((c for c, k in zip(CHAT_FILES, kinds) if k == pafs.FileType.File), CHAT_FILES[-1])
    folder = BeamFolder(posixpath.join(path, chat), posixpath.join(path, QUESTIONS_FILE))
    folder.chat = _load(fs, join_path(base, chat), folder.chat_path, folder.problems)
    if kinds[-1] == pafs.FileType.NotFound:
        folder.problems.append(ErrorEntry(folder.questions_path, None, None, "missing_file", f"{path}: BEAM folder without {QUESTIONS_FILE}; the conversation has no questions"))
    else:
        folder.questions = _load(fs, join_path(base, QUESTIONS_FILE), folder.questions_path, folder.problems)
    return folder


def _load(fs: pafs.FileSystem, real: str, shown: str, problems: list[ErrorEntry]):
    """One JSON file of the folder, or None with its problem recorded."""
    try:
        with fs.open_input_file(real) as fh:
            raw = fh.read()
    except OSError as exc:
        problems.append(ErrorEntry(shown, None, None, "unreadable", f"cannot read {shown}: {exc.strerror or exc}"))
        return None
    text, notes = decode_utf8(raw, shown)
    problems.extend(notes)
    try:
        value, cuts = loads_any_depth(text.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        problems.append(ErrorEntry(shown, exc.lineno, None, "bad_json", f"{shown}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno}); the file is not read"))
        return None
    except RecursionError:
        problems.append(ErrorEntry(shown, None, None, "too_deep", f"{shown}: nested too deeply to parse; the file is not read"))
        return None
    if cuts:
        problems.append(ErrorEntry(shown, None, None, "too_deep", f"{shown}: {len(cuts)} value(s) nested too deeply were read as null"))
    return value


def read_beam_folder(uri: str, src: Source, cfg: ReadConfig) -> Conversation:
    """The conversation of the BEAM folder at `uri` (`src`: the folder as named and keyed)."""
    return read_beam(load_beam_folder(uri, src.path), src, cfg, beam_conversation_id(uri))


def read_beam(folder: BeamFolder, src: Source, cfg: ReadConfig, cid: str) -> Conversation:
    errors = list(folder.problems)
    conv = Conversation(conversation_id=cid, source="beam", source_file=folder.chat_path)
    note = _Notes(errors, cid)
    raw_turns, anchors = _chat_turns(folder.chat, folder.chat_path, note)
    conv.turns = validated_turns(raw_turns, cid, folder.chat_path, 0, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role")
    known = None if folder.chat is None else {t.turn_id for t in conv.turns}  # unparsed chat: ids unchecked
    asked = _question_date(anchors, folder, note)
    conv.questions = _questions(folder.questions, folder.questions_path, cid, known, asked, note)
    return finish(conv, errors)


@dataclass
class _Notes:
    """Where problems go: one call per problem, naming file, batch (`line`), field and kind."""

    errors: list[ErrorEntry]
    cid: str

    def __call__(self, path: str, line: int | None, fld: str | None, kind: str, problem: str) -> None:
        place = f"{path}:{line}" if line else path
        self.errors.append(ErrorEntry(path, line, fld, kind, f"{place}: {self.cid}: {fld + ' ' if fld else ''}{problem}", self.cid))


# ---- the chat ------------------------------------------------------------------------------
def _chat_turns(chat, path: str, note: _Notes) -> tuple[list[dict], list[datetime | None]]:
    """Raw turns of every batch, and each read batch's anchor in order."""
    if chat is None:
        return [], []
    if not isinstance(chat, list):
        note(path, None, None, "bad_field", f"is {a_type(chat)}, not a list of batches; no turn is read")
        return [], []
    raw: list[dict] = []
    anchors: list[datetime | None] = []
    used: set[str] = set()
    for b, batch in enumerate(chat, start=1):
        fld = f"[{b - 1}]"
        if not isinstance(batch, dict):
            note(path, b, fld, "bad_batch", f"is {a_type(batch)}, not a batch object; skipped")
            continue
        session = _session_id(batch.get("batch_number"), b, used, path, note)
        groups = _as_list(batch.get("turns"), path, b, f"{fld}.turns", note)
        anchor = _anchor(batch, groups, path, b, fld, note)
        anchors.append(anchor)
        stamp = anchor.isoformat() if anchor else None
        for g, group in enumerate(groups):
            if isinstance(group, list):  # BEAM's shape: a turn is a list of messages
                raw += [_message(m, f"{fld}.turns[{g}][{k}]", session, stamp, path, b, note) for k, m in enumerate(group)]
            else:  # a message not wrapped in its list is still a message; anything else a bad turn
                raw.append(_message(group, f"{fld}.turns[{g}]", session, stamp, path, b, note))
    return raw, anchors


def _session_id(number, b: int, used: set[str], path: str, note: _Notes) -> str:
    """`session_<batch_number>`; a batch without a usable or unique number gets `session_item<b>`
    (b: its place in the file), which no batch number can take."""
    text = str(number) if isinstance(number, int) and not isinstance(number, bool) else None
    sid = f"session_{text}" if text is not None else f"session_item{b}"
    if text is None:
        kind = "missing_field" if number is None else "bad_field"
        note(path, b, f"[{b - 1}].batch_number", kind, f"{short(number)} is no batch number; the batch is session {sid}")
    elif sid in used:
        sid = f"session_item{b}"
        note(path, b, f"[{b - 1}].batch_number", "bad_field", f"{number} repeats an earlier batch's; the batch is session {sid}")
    used.add(sid)
    return sid


def _as_list(value, path: str, b: int, fld: str, note: _Notes) -> list:
    if isinstance(value, list):
        return value
    if value is None:
        note(path, b, fld, "missing_field", "is missing; the batch has no turns")
    else:
        note(path, b, fld, "bad_field", f"is {a_type(value)}, not a list; its content is not read")
    return []


def _anchor(batch: dict, groups: list, path: str, b: int, fld: str, note: _Notes) -> datetime | None:
    """The batch's time anchor: its own, else its first message's."""
    raw, where = batch.get("time_anchor"), f"{fld}.time_anchor"
    if raw is None:
        first = next((m for g in groups for m in (g if isinstance(g, list) else [g]) if isinstance(m, dict)), None)
        if first is not None and first.get("time_anchor") is not None:
            raw, where = first["time_anchor"], f"{fld}.turns[0][0].time_anchor"
    if raw is None:
        note(path, b, where, "missing_session_date", "is missing, on the batch and on its first message; its turns have no time")
        return None
    stamp = parse_source_datetime(raw)
    if stamp is None:
        note(path, b, where, "bad_timestamp", f"{short(raw)} is not a date; the batch's turns have no time")
    return stamp


def _message(m, fld: str, session: str, stamp: str | None, path: str, b: int, note: _Notes) -> dict:
    if not isinstance(m, dict):
        return dict(field_prefix=fld, bad=True, bad_type=type(m).__name__, path=path, line=b)
    turn_id = id_text(m.get("id"))
    if turn_id is None:
        note(path, b, f"{fld}.id", "missing_field" if m.get("id") is None else "bad_field", f"{short(m.get('id'))} is no message id; the turn gets a made-up id")
    text = m.get("content")
    if isinstance(text, str):
        text = _MARKER.sub("", text).rstrip()
    role = m.get("role")
    return dict(turn_id=turn_id, session_id=session, speaker=role, role=role, text=text, timestamp=stamp, field_prefix=fld, path=path, line=b)


def id_text(value) -> str | None:
    """A message id as text: 7, 7.0 and "7" are "7"; a bool, list or blank is none."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return scalar_text(value)


# ---- the questions -------------------------------------------------------------------------
def _question_date(anchors: list[datetime | None], folder: BeamFolder, note: _Notes) -> str | None:
    """After the last message: the last batch's anchor (an earlier one would put the question
    before turns it asks about), or None, recorded, when that batch has none."""
    if not anchors:
        return None
    if anchors[-1] is None:
        note(folder.questions_path, None, None, "unknown_question_date", "the last batch has no time anchor, so its questions have no date")
        return None
    return anchors[-1].isoformat()


def _questions(doc, path: str, cid: str, known: set[str] | None, asked: str | None, note: _Notes) -> list[Question]:
    if doc is None:
        return []
    if not isinstance(doc, dict):
        note(path, None, None, "bad_field", f"is {a_type(doc)}, not an object of abilities; no question is read")
        return []
    out = []
    for ability, items in doc.items():
        if ability not in ABILITIES:
            note(path, None, ability, "unknown_category", f"is not one of BEAM's {len(ABILITIES)} abilities; its questions are read under it")
        if not isinstance(items, list):
            note(path, None, ability, "bad_field", f"is {a_type(items)}, not a list of questions; not read")
            continue
        for k, item in enumerate(items, start=1):
            q = _question(item, f"{ability}[{k - 1}]", cid, f"{cid}:{ability}:{k}", ability, path, known, asked, note)
            if q is not None:
                out.append(q)
    return out


def _question(item, fld: str, cid: str, qid: str, ability: str, path: str, known: set[str] | None, asked: str | None, note: _Notes) -> Question | None:
    if not isinstance(item, dict):
        note(path, None, fld, "bad_question", f"is {a_type(item)}, not an object; question skipped")
        return None
    text = scalar_text(item.get("question"))
    if text is None:
        note(path, None, f"{fld}.question", "bad_question", f"{short(item.get('question'))} is no question text; question skipped")
        return None
    ids, roles = _evidence(item.get("source_chat_ids"), f"{fld}.source_chat_ids", path, known, note)
    return Question(
        conversation_id=cid,
        question_id=qid,
        question=text,
        answer=_answer(item),
        category=ability,
        evidence_turn_ids=ids,
        question_date=_given_date(item.get("question_date"), f"{fld}.question_date", path, note) or asked,
        difficulty=scalar_text(item.get("difficulty")),
        rubric=_rubric(item.get("rubric"), f"{fld}.rubric", path, note),
        evidence_roles=roles,
    )


def _answer(item: dict) -> str:
    value = next((item[k] for k in ANSWER_KEYS if item.get(k) is not None), "")
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _rubric(value, fld: str, path: str, note: _Notes) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        note(path, None, fld, "bad_field", f"is {a_type(value)}, not a list of nuggets; not read")
        return []
    nuggets = []
    for k, nugget in enumerate(value):
        if (text := scalar_text(nugget)) is None:
            note(path, None, f"{fld}[{k}]", "bad_field", f"{short(nugget)} is no rubric nugget; skipped")
        else:
            nuggets.append(text)
    return nuggets


def _evidence(value, fld: str, path: str, known: set[str] | None, note: _Notes) -> tuple[list[str], list[str]]:
    """(message ids, their roles) of `source_chat_ids`: a list (nested lists flattened) with role
    "", or a dict role -> ids. An id that names no message is recorded and left out."""
    if value is None:
        return [], []
    if isinstance(value, dict):
        pairs = [(f"{fld}.{role}", str(role), ids) for role, ids in value.items()]
    elif isinstance(value, list):
        pairs = [(fld, "", value)]
    else:
        pairs = [(fld, "", [value])]
    ids, roles = [], []
    for where, role, entries in pairs:
        for k, entry in _flat(entries if isinstance(entries, list) else [entries], where):
            mid = id_text(entry)
            if mid is None:
                note(path, None, k, "bad_field", f"{short(entry)} is no message id; left out of the evidence")
            elif known is not None and mid not in known:
                note(path, None, k, "unknown_evidence_id", f"message {mid} is not in the chat; left out of the evidence")
            else:
                ids.append(mid)
                roles.append(role)
    return ids, roles


def _flat(entries: list, fld: str) -> list[tuple[str, object]]:
    """(field, entry) of every entry in order, lists inside lists flattened (event_ordering
    groups its ids by event). A stack, not recursion: nesting may be as deep as the parser read."""
    out, stack = [], [(fld, iter(enumerate(entries)))]
    while stack:
        where, items = stack[-1]
        nxt = next(items, None)
        if nxt is None:
            stack.pop()
        elif isinstance(nxt[1], list):
            stack.append((f"{where}[{nxt[0]}]", iter(enumerate(nxt[1]))))
        else:
            out.append((f"{where}[{nxt[0]}]", nxt[1]))
    return out


def _given_date(raw, fld: str, path: str, note: _Notes) -> str | None:
    if raw is None:
        return None
    stamp = parse_source_datetime(raw)
    if stamp is None:
        note(path, None, fld, "bad_timestamp", f"{short(raw)} is not a date; the question is dated after the last message")
        return None
    return stamp.isoformat()


def is_beam_batch(obj: dict) -> bool:
    """A BEAM batch met as an item of a plain file: its chat file was read without its folder."""
    return "batch_number" in obj and isinstance(obj.get("turns"), list)

