"""BEAM's scoring, as its authors compute it (src/evaluation in their repository), beside evidence
recall:

- the rubric score: an LLM judge grades each rubric nugget 0 / 0.5 / 1 (one call per nugget,
  `llm.prompts.rubric_judge_messages`); a question's score is the mean over its nuggets, and a
  nugget whose judge call failed counts 0, so every question asked is counted;
- event ordering: the answer is split into its lines, each line aligned to a reference item by
  embedding cosine (>= 0.65, first match, one-to-one: the authors' semantic alignment, on the same
  all-MiniLM-L6-v2 they use), an item missing from either side ranked last, and Kendall's tau-b
  (scipy) between the two rankings, normalized to [0, 1] as (tau + 1) / 2. It needs no LLM, so the
  rules backend reports it too;
- abstention: the rubric judge with an LLM; offline, whether the answer says it does not know.

Pure functions over vectors and strings, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import kendalltau

ALIGN_THRESHOLD = 0.65  # the authors' semantic alignment threshold
BEAM_ABILITIES = ("abstention", "contradiction_resolution", "event_ordering", "information_extraction", "instruction_following",
                  "knowledge_update", "multi_session_reasoning", "preference_following", "summarization", "temporal_reasoning")
_ABSTAINS = re.compile(r"\b(?:do(?:es)? not know|don't know|not (?:mentioned|stated|provided|specified|available)|"
                       r"no (?:information|record|mention)|cannot (?:answer|tell|determine)|can't (?:answer|tell)|"
                       r"not enough information|unknown)\b", re.IGNORECASE)


def rubric_score(grades: Sequence[float | None]) -> float | None:
    """Mean of the nugget grades, a failed grade (None) counted 0; None without nuggets."""
    if not grades:
        return None
    return sum(g or 0.0 for g in grades) / len(grades)


def answer_items(prediction: str) -> list[str]:
    """An answer as the list it gives: its non-empty lines, list markers stripped."""
    lines = (re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip() for line in (prediction or "").splitlines())
    return [line for line in lines if line]


def align(reference: Sequence[str], system: Sequence[str], ref_vecs: np.ndarray, sys_vecs: np.ndarray,
          threshold: float = ALIGN_THRESHOLD) -> list[str]:
    """Each system item replaced by the reference item it matches (cosine >= threshold, best
    match, each reference item used once, first come first served); unmatched items stay."""
    used: set[int] = set()
    out = []
    for text, vec in zip(system, sys_vecs):
        sims = ref_vecs @ vec if len(ref_vecs) else np.zeros(0)
        best = int(np.argmax(sims)) if len(sims) else -1
        if best >= 0 and sims[best] >= threshold and best not in used:
            used.add(best)
            out.append(reference[best])
        else:
            out.append(text)
    return out


def order_tau(reference: Sequence[str], system: Sequence[str]) -> float:
    """Normalized Kendall tau-b between the reference order and the (aligned) system order over
    the union of their items; an item one side lacks is ranked after all of its items. 0 when
    tau is undefined (e.g. one side empty)."""
    union = list(dict.fromkeys([*reference, *system]))
    if len(union) < 2:
        return 0.0
    last = len(union) + 1

    def ranks(seq: Sequence[str]) -> list[int]:
        r = {item: i + 1 for i, item in enumerate(seq)}
        return [r.get(u, last) for u in union]

    tau = kendalltau(ranks(reference), ranks(system), variant="b").statistic
    return 0.0 if tau is None or math.isnan(tau) else (float(tau) + 1.0) / 2.0


def event_order_score(reference: Sequence[str], prediction: str, embed: Callable[[list[str]], np.ndarray]) -> float:
    """`order_tau` of the answer's lines aligned to the reference items."""
    items = answer_items(prediction)
    if not reference or not items:
        return 0.0
    vecs = embed([*reference, *items])
    return order_tau(list(reference), align(reference, items, vecs[: len(reference)], vecs[len(reference):]))


def abstains(prediction: str) -> bool:
    """Whether an answer declines for lack of information (the offline abstention check)."""
    return bool(_ABSTAINS.search(prediction or ""))


def bucket_of(conversation_id: str) -> str | None:
    """The BEAM bucket a conversation id names (`beam-<bucket>-<n>`, io/readers/beam.py)."""
    parts = conversation_id.split("-")
    return parts[1] if len(parts) >= 3 and parts[0] == "beam" else None
