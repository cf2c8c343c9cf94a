"""Reader for generic chat JSON/JSONL: {conversation_id, turns|messages: [{role|speaker,
content|text, timestamp?}]}.

`chat_turn` maps one message onto the raw-turn fields `validated_turns` expects; the turn-level
reader reuses it for its rows. Exchanges follow the roles when there are user/assistant roles,
else speaker pairs.
"""

from __future__ import annotations

from lychee_ray.config import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    ErrorEntry,
    Recorder,
    as_list,
    checked_conversation_id,
    finish,
    validated_turns,
)
from lychee_ray.schemas import Conversation, Turn


# --------------------------------------------------------------------------------------------
# Generic chat JSON(L) and turn-level rows
# --------------------------------------------------------------------------------------------
def read_chat(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    id_field = "conversation_id" if "conversation_id" in obj else "id"
    cid = checked_conversation_id(obj.get(id_field), id_field, path, where, errors)
    conv = Conversation(conversation_id=cid, source="chat", source_file=path)
    rec = Recorder(path, where, cid, errors)
    turns_field = "turns" if "turns" in obj else "messages"
    turns_in = as_list(obj.get(turns_field), turns_field, rec)
    raw = [chat_turn(t, i, f"{turns_field}[{i}]") for i, t in enumerate(turns_in)]
    conv.turns = validated_turns(raw, cid, path, where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def chat_turn(t, i: int, field_prefix: str) -> dict:
    if not isinstance(t, dict):
        return dict(turn_id=None, speaker=None, role=None, text=None, field_prefix=field_prefix, bad=True, bad_type=type(t).__name__)
    return dict(
        turn_id=t.get("turn_id", t.get("id")),
        session_id=t.get("session_id", "session_1"),
        speaker=t.get("speaker", t.get("role")),
        role=t.get("role", t.get("speaker")),
        text=t.get("content", t.get("text")),
        timestamp=t.get("timestamp"),
        field_prefix=field_prefix,
    )


def has_roles(turns: list[Turn]) -> bool:
    return any(t.role in ("user", "assistant") for t in turns)
