"""Reader for generic chat JSON/JSONL: {conversation_id, turns|messages: [{role|speaker,
content|text, timestamp?}]}, which includes OpenAI chat-completions / fine-tuning JSONL
({"messages": [{"role", "content"}]}, usually with no id: the id is then `anon_id`'s).

`chat_turn` maps one message onto the raw-turn fields `validated_turns` expects; the turn-level
reader reuses it for its rows. `content` may be OpenAI's list of parts: its text parts (and parts
that are plain strings) are the turn's text, and other parts (images, audio) are counted in a
`non_text_content` row. A
system, developer or tool message, or an assistant tool call, with no text is no turn: it is
skipped and counted (`skipped_system` / `skipped_tool`); with text it is kept like any other.
Exchanges follow the roles when there are user/assistant roles, else speaker pairs.
"""

from __future__ import annotations

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    SKIPPED_ROLES,
    ErrorEntry,
    Recorder,
    Source,
    as_list,
    checked_conversation_id,
    finish,
    scalar_text,
    validated_turns,
    with_article,
)
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Turn

_TEXT_PARTS = ("text", "input_text", "output_text")  # chat completions; the Responses API


# --------------------------------------------------------------------------------------------
# Generic chat JSON(L) and turn-level rows
# --------------------------------------------------------------------------------------------
def read_chat(obj: dict, src: Source, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    id_field = "conversation_id" if "conversation_id" in obj else "id"
    cid = checked_conversation_id(obj, id_field, src, errors)
    conv = Conversation(conversation_id=cid, source="chat", source_file=src.path)
    rec = Recorder(src.path, src.where, cid, errors)
    turns_field = "turns" if "turns" in obj else "messages"
    turns_in = as_list(obj.get(turns_field), turns_field, rec)
    raw = [chat_turn(t, i, f"{turns_field}[{i}]") for i, t in enumerate(turns_in)]
    conv.turns = validated_turns(raw, cid, src.path, src.where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def chat_turn(t, i: int, field_prefix: str) -> dict:
    if not isinstance(t, dict):
        return dict(turn_id=None, speaker=None, role=None, text=None, field_prefix=field_prefix, bad=True, bad_type=type(t).__name__)
    text, dropped = content_text(t.get("content", t.get("text")))
    raw = dict(
        turn_id=t.get("turn_id", t.get("id")),
        session_id=t.get("session_id", "session_1"),
        speaker=t.get("speaker", t.get("role")),
        role=t.get("role", t.get("speaker")),
        text=text,
        timestamp=t.get("timestamp"),
        field_prefix=field_prefix,
        dropped=dropped,
    )
    if text is None or (isinstance(text, str) and not text.strip()):
        role = (scalar_text(t.get("role")) or "").lower()
        if role in SKIPPED_ROLES:
            raw.update(skip=SKIPPED_ROLES[role], why=f"is {with_article(role)} message with no text")
        elif t.get("tool_calls") or t.get("function_call"):
            raw.update(skip="skipped_tool", why="is a tool call with no text")
    return raw


def content_text(content) -> tuple[object, list[str]]:
    """OpenAI's content parts -> (their text parts joined by newlines, or None when there are
    none; the types of the other parts). A part that is a plain string is a text part: some
    chat exports write a message as a list of strings, and a string part can only be text
    (dropping it would lose the message). Anything but a list comes back as it is, for `validated_turns`
    to check: a string is the text, another type is recorded there."""
    if not isinstance(content, list):
        return content, []
    texts, dropped = [], []
    for part in content:
        if isinstance(part, str):
            part = {"type": "text", "text": part}
        kind = scalar_text(part.get("type")) if isinstance(part, dict) else None
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, dict):  # the Assistants API: {"type": "text", "text": {"value": ...}}
            text = text.get("value")
        if kind in _TEXT_PARTS and isinstance(text, str):
            if text.strip():
                texts.append(text)
        else:
            dropped.append(kind or type(part).__name__)
    return ("\n".join(texts) if texts else None), dropped


def has_roles(turns: list[Turn]) -> bool:
    return any(t.role in ("user", "assistant") for t in turns)
