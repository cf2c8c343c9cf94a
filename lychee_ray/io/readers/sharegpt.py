"""Reader for ShareGPT JSON/JSONL: {id, conversations: [{from: human|gpt|system|..., value}]}.

`from` is mapped onto roles: human/user -> user; gpt, chatgpt, bing, bard, assistant, model ->
assistant; any other name is kept as both speaker and role. System and tool turns (`system`,
`tool`, `function_call`, `observation`, ...) are no turn of the conversation: each is skipped and
counted in an errors row (`skipped_system` / `skipped_tool`) naming it, so the input's turns add
up to stored turns + skipped rows. Variants that write `role`/`content` instead of
`from`/`value` are read the same way. ShareGPT has no dates; a `timestamp` on a turn is read if
there is one. Exchanges follow the roles.
"""

from __future__ import annotations

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.chat import has_roles
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

ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bing": "assistant",
    "bard": "assistant",
    "assistant": "assistant",
    "model": "assistant",
}


def is_sharegpt(obj: dict) -> bool:
    """A `conversations` list whose items (when it has any) include a turn: from/value, or the
    role/content that some ShareGPT-style sets write instead."""
    turns = obj.get("conversations")
    if not isinstance(turns, list):
        return False
    return not turns or any(isinstance(t, dict) and any(k in t for k in ("from", "value", "role", "content")) for t in turns)


def read_sharegpt(obj: dict, src: Source, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    id_field = "id" if "id" in obj or "conversation_id" not in obj else "conversation_id"
    cid = checked_conversation_id(obj, id_field, src, errors)
    conv = Conversation(conversation_id=cid, source="sharegpt", source_file=src.path)
    rec = Recorder(src.path, src.where, cid, errors)
    raw = [_sharegpt_turn(t, i) for i, t in enumerate(as_list(obj.get("conversations"), "conversations", rec))]
    conv.turns = validated_turns(raw, cid, src.path, src.where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def _sharegpt_turn(t, i: int) -> dict:
    field_prefix = f"conversations[{i}]"
    if not isinstance(t, dict):
        return dict(field_prefix=field_prefix, bad=True, bad_type=type(t).__name__)
    name = scalar_text(t.get("from", t.get("role")))
    if name is not None and name.lower() in SKIPPED_ROLES:
        # A system prompt or tool traffic is no turn of the conversation, but it is counted:
        # one row per skipped turn, so turns in the file = stored turns + skipped rows.
        return dict(field_prefix=field_prefix, skip=SKIPPED_ROLES[name.lower()], why=f"is {with_article(repr(name))} turn")
    role = ROLES.get(name.lower(), name) if name is not None else None
    return dict(
        session_id="session_1",
        speaker=role,
        role=role,
        text=t.get("value", t.get("content")),
        timestamp=t.get("timestamp"),
        field_prefix=field_prefix,
    )
