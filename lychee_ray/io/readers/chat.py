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
    conversation_id,
    finish,
    validated_turns,
)
from lychee_ray.schemas import Conversation, Turn


# --------------------------------------------------------------------------------------------
# Generic chat JSON(L) and turn-level rows
# --------------------------------------------------------------------------------------------
def read_chat(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = conversation_id(obj.get("conversation_id", obj.get("id")), path, where)
    conv = Conversation(conversation_id=cid, source="chat", source_file=path)
    errors: list[ErrorEntry] = []
    turns_in = obj.get("turns", obj.get("messages")) or []
    if not isinstance(turns_in, list):
        errors.append(ErrorEntry(path, where, "turns", "bad_field", f"{path}:{where}: {cid}: field 'turns' is not a list"))
        turns_in = []
    raw = [chat_turn(t, i, f"turns[{i}]") for i, t in enumerate(turns_in)]
    conv.turns = validated_turns(raw, cid, path, where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def chat_turn(t, i: int, field_prefix: str) -> dict:
    if not isinstance(t, dict):
        return dict(turn_id=None, speaker=None, role=None, text=None, field_prefix=field_prefix, bad=True)
    return dict(
        turn_id=t.get("turn_id", t.get("id")),
        session_id=str(t.get("session_id", "session_1")),
        speaker=t.get("speaker", t.get("role")),
        role=t.get("role", t.get("speaker")),
        text=t.get("content", t.get("text")),
        timestamp=t.get("timestamp"),
        field_prefix=field_prefix,
    )


def has_roles(turns: list[Turn]) -> bool:
    return any(t.role in ("user", "assistant") for t in turns)
