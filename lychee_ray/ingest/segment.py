"""Stage 2b, segment: the online semantic segmenter (pure numpy, no I/O, no LLM).

The math (`OnlineSegmenter`, `segment_exchanges`) works on arrays only; `SegmentStage` at the
end applies it to a Conversation.

It walks the exchanges x_1..x_T of one conversation in order and decides, before adding x_t to
the open segment S_k, whether to close S_k first:

    s_t = 1 - max(sim(e_t, c_k), sim(e_t, h_k))        surprise vs. centroid and last exchange
    d_t = max(0, Coh(S_k) - Coh(S_k ∪ {x_t}))           cohesion drop
    L_t = tokens(S_k ∪ {x_t}) / length_scale            length pressure
    N_t = |S_k| / turn_scale                            turn-count pressure
    p_t = sigmoid(b + w_s*phi(s_t) + w_c*d_t + w_l*L_t + w_n*N_t)

and cuts when p_t > delta, or when adding x_t would exceed the hard token cap.

Coh(S) is the mean pairwise cosine of S's (unit) embeddings. With the running sum v = Σ e_i,
Σ_{i<j} e_i·e_j = (|v|² − n)/2, so Coh(S) = (|v|² − n) / (n(n − 1)): adding an exchange updates
v in O(dim), with no pairwise recomputation. A one-exchange segment has no pairs; its cohesion
drop is defined as 0 (surprise alone speaks for the second exchange).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.config_sections import SegmenterConfig
from lychee_ray.io.exchanges import cap_exchanges
from lychee_ray.runtime.stage import Resources, Stage
from lychee_ray.schemas import Conversation, Segment
from lychee_ray.tokens import TokenCounter, token_counter


@dataclass(frozen=True)
class Boundary:
    start: int  # first exchange index of the segment
    end: int  # one past the last exchange index
    p: float  # p_t of the exchange that opened the next segment (1.0 at the end)
    reason: str  # threshold | token_cap | session | end


def cohesion(sum_vec: np.ndarray, n: int) -> float:
    """Mean pairwise cosine of n unit vectors whose sum is `sum_vec` (0 for n < 2)."""
    if n < 2:
        return 0.0
    return float((sum_vec @ sum_vec - n) / (n * (n - 1)))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x)) if x > -700 else 0.0


def surprise_feature(s: float, center: float) -> float:
    """phi(s): only surprise above the typical within-topic level counts, scaled to [0, 1]."""
    return max(0.0, s - center) / (1.0 - center)


class OnlineSegmenter:
    """Incremental state of the open segment S_k. Feed exchanges in order with `step`.

    The decision needs only two dot products per exchange, e·v (v = Σ_{i∈S_k} e_i) and e·h_k:
    sim(e, c_k) = e·v / |v|, and cohesion before and after adding e follows from the scalar |v|²
    and |v + e|² = |v|² + 2 e·v + 1 (unit vectors), with no pairwise recomputation. `step` takes
    an embedding and computes them from the running sum; `step_dots` takes them precomputed
    (`segment_exchanges` gets them for a whole conversation with a few BLAS calls). Both share
    one decision, so they cannot disagree."""

    def __init__(self, cfg: SegmenterConfig):
        self.cfg = cfg
        self._sum: np.ndarray | None = None  # v, only kept up to date by `step`
        self._last: np.ndarray | None = None  # h_k, only kept up to date by `step`
        self._sq = 0.0  # |v|²
        self._n = 0
        self._tokens = 0
        self._session = None

    def boundary_probability(self, e: np.ndarray, n_tokens: int, session_changed: bool) -> float:
        """p_t for adding exchange embedding `e` to the open segment (segment must be non-empty)."""
        return self._probability(float(e @ self._sum), float(e @ self._last), n_tokens, session_changed)

    def _probability(self, dot_sum: float, dot_last: float, n_tokens: int, session_changed: bool) -> float:
        cfg, n, sq = self.cfg, self._n, self._sq
        sim_centroid = dot_sum / math.sqrt(sq) if sq > 0 else 0.0
        s = 1.0 - max(sim_centroid, dot_last)
        # Coh(S) = (|v|² - n) / (n(n-1)); for n = 1 the drop is defined as 0 (module docstring)
        d = max(0.0, (sq - n) / (n * (n - 1)) - (sq + 2.0 * dot_sum + 1.0 - (n + 1)) / ((n + 1) * n)) if n >= 2 else 0.0
        logit = (
            cfg.bias
            + cfg.w_surprise * surprise_feature(s, cfg.surprise_center)
            + cfg.w_cohesion * d
            + cfg.w_length * (self._tokens + n_tokens) / cfg.length_scale_tokens
            + cfg.w_turns * n / cfg.turn_scale
        )
        if session_changed and cfg.session_policy == "feature":
            logit += cfg.w_session
        return sigmoid(logit)

    def step(self, e: np.ndarray, n_tokens: int, session) -> tuple[bool, float, str]:
        """Decide whether to cut before exchange embedding `e`, then add it. Returns (cut, p_t, reason)."""
        dots = (float(e @ self._sum), float(e @ self._last)) if self._n else (0.0, 0.0)
        cut, p, reason = self.step_dots(*dots, n_tokens, session)
        if self._n == 1:  # e opened a segment (the first one, or after a cut)
            self._sum = np.array(e, dtype=np.float64)  # a copy: updated in place below
        else:
            self._sum += e
        self._last = e
        return cut, p, reason

    def step_dots(self, dot_sum: float, dot_last: float, n_tokens: int, session) -> tuple[bool, float, str]:
        """`step` for an exchange given by e·v and e·h_k against the open segment."""
        cut, p, reason = False, 0.0, ""
        if self._n > 0:
            session_changed = session != self._session
            p = self._probability(dot_sum, dot_last, n_tokens, session_changed)
            if session_changed and self.cfg.session_policy == "boundary":
                cut, reason = True, "session"
            elif self._tokens + n_tokens > self.cfg.token_cap:
                cut, reason = True, "token_cap"
            elif p > self.cfg.delta and self._n >= self.cfg.min_exchanges:
                cut, reason = True, "threshold"
        if cut:
            self._sq, self._n, self._tokens, dot_sum = 0.0, 0, 0, 0.0
        self._sq += 2.0 * dot_sum + 1.0
        self._n += 1
        self._tokens += n_tokens
        self._session = session
        return cut, p, reason


# e_t · v for the segment opened at `start` comes from prefix sums, v = P[t] - P[start]; the
# e_t · P[start] terms are computed this many exchanges ahead in one matrix-vector product.
_LOOKAHEAD = 64


def segment_exchanges(
    embeddings: np.ndarray, n_tokens: list[int] | np.ndarray, sessions: list, cfg: SegmenterConfig
) -> tuple[list[Boundary], np.ndarray]:
    """Segment one conversation. `embeddings` [T, d] are unit-norm exchange embeddings.

    Returns the segments as Boundary(start, end) over exchange indexes, and p_t per exchange
    (p_0 = 0; the first exchange always opens a segment)."""
    T = len(embeddings)
    probs = [0.0] * T
    if T == 0:
        return [], np.zeros(0)
    # re-normalized in float64: the incremental cohesion takes |e|² = 1 exactly
    emb = np.asarray(embeddings, dtype=np.float64)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    prefix = np.zeros_like(emb)  # prefix[t] = e_0 + ... + e_{t-1}
    np.cumsum(emb[:-1], axis=0, out=prefix[1:])
    dot_prefix = np.einsum("ij,ij->i", emb, prefix).tolist()  # e_t · P[t]
    dot_last = [0.0] + np.einsum("ij,ij->i", emb[1:], emb[:-1]).tolist()  # e_t · e_{t-1}
    tokens = [int(x) for x in n_tokens]
    seg = OnlineSegmenter(cfg)
    bounds: list[Boundary] = []
    start, ahead_from, ahead = 0, 0, []  # ahead[i] = e_{ahead_from+i} · P[start]
    for t in range(T):
        if t - ahead_from >= len(ahead):
            ahead_from, ahead = t, (emb[t : t + _LOOKAHEAD] @ prefix[start]).tolist()
        cut, p, reason = seg.step_dots(dot_prefix[t] - ahead[t - ahead_from], dot_last[t], tokens[t], sessions[t])
        probs[t] = p
        if cut:
            bounds.append(Boundary(start, t, p, reason))
            start, ahead = t, []
    bounds.append(Boundary(start, T, 1.0, "end"))
    if cfg.merge_short_tails:
        bounds = merge_short_tails(bounds, tokens, sessions, cfg)
    return bounds, np.array(probs)


def merge_short_tails(bounds: list[Boundary], n_tokens: list[int], sessions: list, cfg: SegmenterConfig) -> list[Boundary]:
    """A segment shorter than min_exchanges that a session change (or the conversation's end)
    closes joins the previous segment when that one is of the same session and the token cap
    allows. min_exchanges then holds at session ends too: a threshold cut just before a session
    ends would otherwise leave a one-exchange segment (and one LLM call for it). Online, this
    holds a closed segment back for at most min_exchanges - 1 exchanges."""
    out: list[Boundary] = []
    for b in bounds:
        prev = out[-1] if out else None
        if (
            prev is not None
            and b.reason in ("session", "end")
            and b.end - b.start < cfg.min_exchanges
            and prev.reason == "threshold"
            and sessions[prev.end - 1] == sessions[b.start]  # the cut was inside a session
            and sum(n_tokens[prev.start : b.end]) <= cfg.token_cap
        ):
            out[-1] = Boundary(prev.start, b.end, b.p, b.reason)
        else:
            out.append(b)
    return out



def fixed_windows(T: int, size: int) -> list[Boundary]:
    """The fixed-window baseline: N exchanges per unit, ignoring content."""
    return [Boundary(s, min(s + size, T), 1.0, "window") for s in range(0, T, size)]


def exchange_embeddings(turn_embeddings: np.ndarray, exchanges: list[list[int]]) -> np.ndarray:
    """An exchange's embedding is the re-normalized mean of its turns' embeddings.

    This embeds every text once (turns) instead of twice (turns and exchanges)."""
    if not exchanges:
        return np.zeros((0, turn_embeddings.shape[1] if turn_embeddings is not None else 0), np.float32)
    out = np.stack([turn_embeddings[idx].mean(axis=0) for idx in exchanges])
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return (out / np.maximum(norms, 1e-12)).astype(np.float32)


# --------------------------------------------------------------------------------------------
# Pipeline stage (applies the math above to a Conversation; still no I/O)
# --------------------------------------------------------------------------------------------


class SegmentStage(Stage[Conversation]):
    """Cuts each conversation into the units the encoder calls the LLM on: semantic segments
    (encoder.mode=segment), single exchanges (eager) or fixed windows (window)."""

    name = "segment"
    resources = Resources(num_cpus=0.5, batch_size=8)  # stateless numpy: plain tasks

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg.segmenter
        self.mode = cfg.encoder.mode
        self.window = cfg.encoder.window_exchanges
        self.tokenizer = cfg.tokenizer_spec  # a spec for token_counter; None: o200k
        self._counter: TokenCounter | None = None

    @property
    def counter(self) -> TokenCounter:
        """What the token cap counts with, loaded once per worker (lazily: a plain spec travels
        to the Ray workers, never a tokenizer object)."""
        if self._counter is None:
            self._counter = token_counter(self.tokenizer)
        return self._counter

    def setup(self) -> None:
        self.counter  # a spec that cannot load fails here, before any conversation

    def process(self, conv) -> None:
        ex_tokens = capped_exchange_tokens(conv, self.cfg.token_cap, self.counter)
        T = len(conv.exchanges)
        if self.mode == "eager":
            bounds = [Boundary(b.start, b.end, 1.0, "eager") for b in fixed_windows(T, 1)]
        elif self.mode == "window":
            bounds = fixed_windows(T, self.window)
        else:
            emb = exchange_embeddings(conv.turn_embeddings, conv.exchanges)
            sessions = [conv.turns[ex[0]].session_id for ex in conv.exchanges]
            bounds, _ = segment_exchanges(emb, ex_tokens, sessions, self.cfg)
        conv.segments = segments_from_bounds(conv.exchanges, ex_tokens, bounds)


def capped_exchange_tokens(conv, token_cap: int, counter: TokenCounter | None = None) -> list[int]:
    """Split every exchange of `conv` over `token_cap` into runs of its turns that fit (an
    exchange over the cap would be a segment over it), then return tokens per exchange, counted
    by `counter` (the configured tokenizer; None: o200k).
    Every segmentation goes through here: the stage's and the ablation grid's matched windows."""
    turn_tokens = (counter or token_counter(None)).count_many([t.text for t in conv.turns])
    conv.exchanges = cap_exchanges(conv.exchanges, turn_tokens, token_cap)
    return [sum(turn_tokens[i] for i in ex) for ex in conv.exchanges]


def segments_from_bounds(exchanges: list[list[int]], ex_tokens: list[int], bounds: list[Boundary]) -> list[Segment]:
    """Segment objects for boundaries over exchange indexes (shared with the ablation grid,
    which builds its own call-matched windows)."""
    segments = []
    for k, b in enumerate(bounds):
        ex_idx = list(range(b.start, b.end))
        segments.append(
            Segment(
                segment_id=f"seg-{k:05d}",
                segment_idx=k,
                turn_idxs=[i for e in ex_idx for i in exchanges[e]],
                exchange_idxs=ex_idx,
                n_tokens=int(sum(ex_tokens[e] for e in ex_idx)),
                boundary_p=float(b.p),
                boundary_reason=b.reason,
            )
        )
    return segments
