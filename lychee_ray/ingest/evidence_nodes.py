"""Stage 4, organize: the evidence nodes derived from record metadata, with no LLM, and the vectors
of records and node names.

Node kinds (DESIGN.md):
- entity: a normalized name; aliases collected from the encoder's resolution states are merged
  into the name they refer to ("Liz" -> "Elizabeth");
- topic; entity_topic: an (entity, topic) pair that co-occurs in a record;
- time: a day bucket (YYYY-MM-DD) and a month bucket (YYYY-MM) per normalized record time;
- event_frame: a session plus a local window of turns, grouping what was said together.

Every record links to its nodes through `record_nodes` edges. Records and the names of the
`organize.vector_node_kinds` nodes (entity, topic, entity_topic) are then embedded with the same
model as turns, in one batched call per stage batch; a name the actor embedded for an earlier
conversation is taken from its cache. Time and event-frame nodes get no vector: retrieval finds
them by date and by name.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter, defaultdict
from datetime import date, timedelta

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.config_sections import OrganizeConfig
from lychee_ray.embedding import Embedder, VectorCache
from lychee_ray.names import display_form, normalize_name
from lychee_ray.runtime.stage import (
    PASS_THROUGH,
    Resources,
    Stage,
    add_seconds,
    mark_failed,
)
from lychee_ray.schemas import Conversation
from lychee_ray.store.stored_state import StoredState
from lychee_ray.tables import Node, Record

MAX_DAY_SPAN = 14  # longer ranges get month nodes only: a day node per day would flood the index
MAX_MONTH_SPAN = 24


def node_id(conversation_id: str, kind: str, key: str) -> str:
    return hashlib.sha1(f"{conversation_id}|{kind}|{key}".encode()).hexdigest()[:20]


def _days(start: date, end: date) -> list[date]:
    if end < start or (end - start).days > MAX_DAY_SPAN:
        return [start] if (end - start).days > MAX_DAY_SPAN else []
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _months(start: date, end: date) -> list[str]:
    out, y, m = [], start.year, start.month
    while (y, m) <= (end.year, end.month) and len(out) < MAX_MONTH_SPAN:
        out.append(f"{y:04d}-{m:02d}")
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    return out


def time_keys(rec: Record) -> list[str]:
    if not rec.time_start:
        return []
    try:
        start = date.fromisoformat(rec.time_start[:10])
        end = date.fromisoformat(rec.time_end[:10]) if rec.time_end else start
    except ValueError:
        return []
    keys = _months(start, max(start, end))
    if rec.time_granularity in ("day", "week"):
        keys += [d.isoformat() for d in _days(start, max(start, end))]
    return keys


def build_nodes(conv: Conversation, cfg: OrganizeConfig) -> tuple[list[Node], list[tuple[str, str]]]:
    """Nodes and record->node edges for one conversation (pure: reads records, writes nothing)."""
    cid = conv.conversation_id
    canonical = {normalize_name(alias): name for alias, name in conv.entity_aliases.items()}
    turn_pos = _turn_positions(conv)
    members: dict[tuple[str, str], list[str]] = defaultdict(list)
    display: dict[tuple[str, str], Counter] = defaultdict(Counter)

    def link(kind: str, key: str, shown: str, rid: str):
        members[(kind, key)].append(rid)
        display[(kind, key)][shown] += 1

    for rec in conv.records:
        ents: dict[str, str] = {}  # key -> display form, first mention wins
        for e in rec.entities:
            name = canonical.get(normalize_name(e), e)  # an alias ("Tess") counts as its entity
            if key := normalize_name(name):
                ents.setdefault(key, display_form(name))
                link("entity", key, e.strip(), rec.record_id)
        topics: dict[str, str] = {}
        for t in rec.topics:
            if key := normalize_name(t):
                topics.setdefault(key, display_form(t))
        for key, shown in topics.items():
            link("topic", key, shown, rec.record_id)
        for e, e_shown in ents.items():
            for t, t_shown in topics.items():
                link("entity_topic", f"{e}|{t}", f"{e_shown} / {t_shown}", rec.record_id)
        for key in time_keys(rec):
            link("time", key, key, rec.record_id)
        for frame in _frames(rec, turn_pos, cfg.event_frame_turns):
            link("event_frame", frame, frame, rec.record_id)
    return _materialize(cid, members, display, cfg)


def _turn_positions(conv: Conversation) -> dict[str, tuple[str, int]]:
    """turn_id -> (session_id, position within the session)."""
    pos, counter = {}, Counter()
    for t in conv.turns:
        pos[t.turn_id] = (t.session_id, counter[t.session_id])
        counter[t.session_id] += 1
    return pos


def _frames(rec: Record, turn_pos: dict, window: int) -> list[str]:
    frames = []
    for tid in rec.source_turn_ids:
        if tid in turn_pos:
            session, k = turn_pos[tid]
            lo = (k // window) * window
            frames.append(f"{session} turns {lo + 1}-{lo + window}")
    return list(dict.fromkeys(frames))


def _materialize(cid, members, display, cfg: OrganizeConfig):
    topic_rank = sorted((k for k in members if k[0] == "topic"), key=lambda k: (-len(members[k]), k[1]))
    keep_topics = set(topic_rank[: cfg.max_topic_nodes])
    nodes, edges = [], []
    for (kind, key), rids in sorted(members.items()):
        if kind == "topic" and (kind, key) not in keep_topics:
            continue
        if kind == "entity" and len(set(rids)) < cfg.min_entity_records:
            continue
        nid = node_id(cid, kind, key)
        name = display[(kind, key)].most_common(1)[0][0]
        unique = list(dict.fromkeys(rids))
        nodes.append(Node(node_id=nid, kind=kind, name=name, n_records=len(unique)))
        edges.extend((rid, nid) for rid in unique)
    return nodes, edges


def _record_vectors(records: list[Record], stored: dict[str, np.ndarray], fresh: list[Record], vecs: np.ndarray) -> np.ndarray:
    """[n_records, d] in record order: stored vectors by id, the just-embedded ones for the rest."""
    new = {r.record_id: v for r, v in zip(fresh, vecs)}
    if not records:
        return np.zeros((0, vecs.shape[1]), dtype=np.float32)
    return np.stack([new[r.record_id] if r.record_id in new else stored[r.record_id] for r in records]).astype(np.float32, copy=False)


class OrganizeStage(Stage[Conversation]):
    """Builds nodes per conversation, then embeds the batch's record texts and the names of its
    vector-kind nodes (`organize.vector_node_kinds`) in one call to one model (loaded once per
    actor). Names this actor embedded before come from its `VectorCache`; repeats within the
    batch are embedded once (`Embedder.encode`). Time and event-frame nodes get no vector."""

    name = "organize"

    def __init__(self, cfg: LycheeConfig, embedder: Embedder | None = None):
        self.cfg, self.emb_cfg = cfg.organize, cfg.embedding
        emb = cfg.embedding
        # batch_size None: one work batch per call (ingest.batch_turns, `Pipeline.batching`)
        self.resources = Resources(num_cpus=1, num_gpus=emb.num_gpus_per_actor, num_actors=emb.num_actors, batch_size=None)
        self.embedder = embedder  # a loaded model to share (the ablation grid's); else loaded in setup()
        self.vector_kinds = frozenset(self.cfg.vector_node_kinds)
        self.name_vectors = VectorCache(self.cfg.name_cache_entries)

    def setup(self) -> None:
        self.embedder = self.embedder or Embedder(self.emb_cfg)

    def process(self, conv: Conversation) -> None:
        conv.nodes, conv.record_nodes = build_nodes(conv, self.cfg)

    def process_batch(self, convs):
        convs = super().process_batch(convs)
        live = [c for c in convs if c.status not in PASS_THROUGH]
        start = time.perf_counter()
        try:
            self._embed(live)
        except Exception as exc:
            for c in live:
                mark_failed(c, self.name, exc)
            return convs
        # the batch's one encode call, shared out by each conversation's texts (as embed does)
        seconds, sizes = time.perf_counter() - start, [len(c.records) + len(c.nodes) for c in live]
        for c, size in zip(live, sizes):
            add_seconds(c, self.name, seconds * size / max(1, sum(sizes)))
        return convs

    def _embed(self, live: list[Conversation]) -> None:
        names = [n.name for c in live for n in c.nodes if n.kind in self.vector_kinds]
        cached, missing = self.name_vectors.split(names)
        # a grown conversation's reused records keep their stored vectors
        stored = [c.prior.record_embeddings if isinstance(c.prior, StoredState) else {} for c in live]
        fresh = [[r for r in c.records if r.record_id not in old] for c, old in zip(live, stored)]
        groups = self.embedder.encode_groups([[r.text for r in recs] for recs in fresh] + [missing])
        self.name_vectors.add(missing, groups[-1])
        by_name = {**cached, **dict(zip(missing, groups[-1]))}
        for c, old, recs, rec_vecs in zip(live, stored, fresh, groups[:-1]):
            c.record_embeddings = rec_vecs if not old else _record_vectors(c.records, old, recs, rec_vecs)
            c.node_embeddings = self._node_vectors(c.nodes, by_name)
        self._count(live, fresh, names, cached, missing)

    def _node_vectors(self, nodes: list[Node], by_name: dict[str, np.ndarray]) -> np.ndarray:
        """[n_nodes, d]; a NaN row for a node of a kind without a vector: the store writes a
        NULL embedding for it (`store.rows`), which vector search skips."""
        mat = np.full((len(nodes), self.embedder.dim), np.nan, dtype=np.float32)
        for i, node in enumerate(nodes):
            if node.kind in self.vector_kinds:
                mat[i] = by_name[node.name]
        return mat

    def _count(self, live, fresh, names, cached, missing) -> None:
        """texts_asked = texts_embedded + texts_from_cache + texts_deduplicated (stage stats);
        `fresh`: each conversation's records that needed a vector (not reused from the store)."""
        records = [r.text for recs in fresh for r in recs]
        embedded = len(set(records) | set(missing))
        from_cache = sum(name in cached for name in names)
        self.stat_update("texts_asked", len(records) + len(names))
        self.stat_update("texts_embedded", embedded)
        self.stat_update("texts_from_cache", from_cache)
        self.stat_update("texts_deduplicated", len(records) + len(names) - embedded - from_cache)
        self.stat_update("record_texts", len(records))
        self.stat_update("node_names", len(names))
        self.stat_update("nodes_without_vector", sum(len(c.nodes) for c in live) - len(names))
