"""Reader for a ChatGPT data export (`conversations.json`): a list of {title, create_time,
update_time, mapping: {node_id: {id, message, parent, children}}, current_node,
conversation_id | id}.

`mapping` is a tree: each regenerated answer or edited question opens a branch. The reader
follows the branch the user last saw, from `current_node` up its parents to the root, then
reversed. Without a usable `current_node` it takes the longest root-to-leaf path (the earlier
child on ties) and records why. Each message's `create_time` (epoch seconds) is its turn's
timestamp, in UTC ISO.

Every node of `mapping` ends as a turn or in exactly one errors row naming it
(`mapping.<node_id>`): `skipped_system` and `skipped_tool` (system and tool messages, messages
addressed to a tool), `skipped_no_text` (the empty root, content that is not text, such as code
or browsing results, empty parts), `off_branch` (nodes of other branches), or a validation row
(`bad_turn`, ...). So the nodes of a conversation add up to stored turns + those rows. The
title and the conversation's own times are not kept (a conversation has no field for them).
"""

from __future__ import annotations

from datetime import datetime, timezone

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.chat import has_roles
from lychee_ray.io.readers.common import (
    SKIPPED_ROLES,
    ErrorEntry,
    Recorder,
    Source,
    checked_conversation_id,
    finish,
    scalar_text,
    short,
    validated_turns,
    with_article,
)
from lychee_ray.schemas import Conversation

_TEXT_TYPES = ("text", "multimodal_text")


def is_chatgpt_export(obj: dict) -> bool:
    return isinstance(obj.get("mapping"), dict)


def read_chatgpt(obj: dict, src: Source, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    id_field = "conversation_id" if scalar_text(obj.get("conversation_id")) or "id" not in obj else "id"
    cid = checked_conversation_id(obj, id_field, src, errors)
    conv = Conversation(conversation_id=cid, source="chatgpt", source_file=src.path)
    rec = Recorder(src.path, src.where, cid, errors)
    mapping: dict = obj["mapping"]
    branch = _branch(mapping, obj.get("current_node"), rec)
    on_branch = set(branch)
    for key in mapping:
        if key not in on_branch:
            rec.record(node_field(key), "off_branch", f"{node_field(key)} is on another branch (a regenerated answer or an edited message); not read")
    raw = [_node_turn(mapping[key], key) for key in branch]
    conv.turns = validated_turns(raw, cid, src.path, src.where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def node_field(key: str) -> str:
    return f"mapping.{key}" if len(key) <= 80 else f"mapping.{key[:77]}..."


def _parent(mapping: dict, key: str) -> str | None:
    node = mapping[key]
    return scalar_text(node.get("parent")) if isinstance(node, dict) else None


def _branch(mapping: dict, current, rec: Recorder) -> list[str]:
    """The node keys of the branch to read, root first."""
    start = scalar_text(current)
    if start is None or start not in mapping:
        if start is None:
            rec.record("current_node", "no_current_node", "the conversation has no current_node; the longest branch is read")
        else:
            rec.record("current_node", "bad_field", f"current_node {short(start)} is not a node of mapping; the longest branch is read")
        return _longest_branch(mapping)
    path, seen, key = [], set(), start
    while key is not None and key in mapping and key not in seen:
        seen.add(key)
        path.append(key)
        key = _parent(mapping, key)
    if key in seen:
        rec.record(node_field(key), "bad_field", f"the parent links from current_node loop back to {node_field(key)}; the branch is read from there")
    elif key is not None:
        rec.record(node_field(path[-1]), "bad_field", f"{node_field(path[-1])} names a parent {short(key)} that is not in mapping; the branch is read from there")
    return path[::-1]


def _longest_branch(mapping: dict) -> list[str]:
    """The longest root-to-leaf path along `children` (the first one on ties). Iterative and
    visiting each node once, so a cycle or a shared child cannot make it loop or explode."""
    roots = [k for k in mapping if _parent(mapping, k) not in mapping]
    depth_parent: dict[str, tuple[int, str | None]] = {}
    best: str | None = None
    for root in roots or list(mapping)[:1]:
        if root in depth_parent:
            continue
        stack = [(root, None, 1)]
        while stack:
            key, parent, depth = stack.pop()
            if key in depth_parent:
                continue
            depth_parent[key] = (depth, parent)
            if best is None or depth > depth_parent[best][0]:
                best = key
            node = mapping[key]
            children = node.get("children") if isinstance(node, dict) else None
            kids = [c for c in (children if isinstance(children, list) else []) if isinstance(c, str) and c in mapping and c not in depth_parent]
            stack += [(c, key, depth + 1) for c in reversed(kids)]  # first child popped first
    path = []
    while best is not None:
        path.append(best)
        best = depth_parent[best][1]
    return path[::-1]


def _node_turn(node, key: str) -> dict:
    """One node of the branch as a raw turn: a turn to validate, or a skip with its reason."""
    fld = node_field(key)
    if not isinstance(node, dict):
        return dict(field_prefix=fld, bad=True, bad_type=type(node).__name__)
    msg = node.get("message")
    if msg is None:
        return dict(field_prefix=fld, skip="skipped_no_text", why="has no message (the conversation's root)")
    if not isinstance(msg, dict):
        return dict(field_prefix=f"{fld}.message", bad=True, bad_type=type(msg).__name__)
    author = msg.get("author")
    role = scalar_text(author.get("role")) if isinstance(author, dict) else None
    if role is not None and role.lower() in SKIPPED_ROLES:
        return dict(field_prefix=fld, skip=SKIPPED_ROLES[role.lower()], why=f"is {with_article(role)} message")
    recipient = scalar_text(msg.get("recipient"))
    if recipient is not None and recipient != "all":
        return dict(field_prefix=fld, skip="skipped_tool", why=f"is addressed to the tool {short(recipient)}")
    content = msg.get("content")
    ctype = scalar_text(content.get("content_type")) if isinstance(content, dict) else None
    if ctype not in _TEXT_TYPES:
        return dict(field_prefix=fld, skip="skipped_no_text", why=f"holds content of type {short(ctype)}, not text")
    parts = content.get("parts")
    text, dropped = _parts_text(parts)
    if not text.strip():
        why = f"holds only non-text parts ({short(sorted(set(dropped)))})" if dropped else "has no text"
        if not isinstance(parts, list):
            why = f"has no parts list (content.parts is {short(parts)})"
        return dict(field_prefix=fld, skip="skipped_no_text", why=why)
    return dict(
        session_id="session_1",
        speaker=role,
        role=role,
        text=text,
        timestamp=epoch_iso(msg.get("create_time")),
        field_prefix=fld,
        dropped=dropped,
    )


def _parts_text(parts) -> tuple[str, list[str]]:
    """The text of `parts`: its strings, and the transcript of voice parts, joined by newlines;
    plus the types of the other parts (images, audio)."""
    texts, dropped = [], []
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("content_type") == "audio_transcription" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            dropped.append((scalar_text(part.get("content_type")) or "object") if isinstance(part, dict) else type(part).__name__)
    return "\n".join(t for t in texts if t.strip()), dropped


def epoch_iso(value):
    """Epoch seconds -> UTC ISO to the second; anything else as it is, for `validated_turns` to
    parse or to record as a bad timestamp (an epoch past year 9999 comes back as it is too)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, timezone.utc).replace(microsecond=0).isoformat()
        except (OverflowError, OSError, ValueError):
            return value
    return value
