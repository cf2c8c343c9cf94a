"""The questions to evaluate, and `QAItem`, the one object a question travels in through the
stages (plan, evidence, prediction, scores, token usage).

Questions come from the store's questions table or from a JSONL/Parquet file. Unanswerable ones
(a file line that is no question object, a repeated question id, an empty question, an unknown
conversation, no records) become error rows before any stage runs, so the rest of the batch is
evaluated and every question asked has its row.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

import pyarrow.parquet as pq

from lychee_ray.config import LycheeConfig
from lychee_ray.dates import as_date
from lychee_ray.llm.client import Usage
from lychee_ray.llm.prompts import BENCHMARKS, EvidenceItem
from lychee_ray.tables import Question

log = logging.getLogger(__name__)


LOCOMO_NAMES = ("multi_hop", "temporal", "open_domain", "single_hop", "adversarial")


@dataclass
class QAItem:
    """One question as it flows through the evaluation stages."""

    conversation_id: str
    question_id: str
    question: str
    gold: str
    category: str
    evidence_turn_ids: list[str]
    question_date: str | None
    benchmark: str = "generic"
    difficulty: str | None = None
    rubric: list[str] = field(default_factory=list)  # nuggets a rubric judge grades (BEAM)
    evidence_roles: list[str] = field(default_factory=list)  # parallel to evidence_turn_ids
    status: str = "ok"
    error: str | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # per stage name
    plan_json: str | None = None
    plan: object = None
    evidence: list[EvidenceItem] = field(default_factory=list)  # as the answer prompt shows them
    retrieved_record_ids: list[str] = field(default_factory=list)
    retrieved_turn_ids: list[str] = field(default_factory=list)
    context_tokens: int = 0
    recall_curve: list[float | None] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)  # name -> {"recall_curve", "turn_ids", "prediction"}
    prediction: str = ""
    judge_label: str | None = None
    answer_fallback: bool = False  # the answer call failed and the rules extractive answer stood in
    f1: float | None = None
    bleu1: float | None = None
    rubric_grades: list[float | None] = field(default_factory=list)  # per nugget; None: the judge call failed
    rubric_score: float | None = None  # mean over the nuggets, a failed one counted 0
    order_tau: float | None = None  # event ordering: normalized Kendall tau-b of the answer's order
    evidence_recall: float | None = None
    plan_usage: Usage = field(default_factory=Usage)
    answer_usage: Usage = field(default_factory=Usage)
    judge_usage: Usage = field(default_factory=Usage)
    # ablation only: o200k estimates of what an LLM would be sent, and a full-context cut
    est_prompt_tokens: int | None = None
    est_completion_tokens: int | None = None
    dropped_turns: int | None = None
    dropped_tokens: int | None = None
    llm_errors: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------
def as_id_list(value) -> list[str]:
    """Evidence turn ids as a list of strings. A questions file may give one id as a bare
    string ("D1:3"), or several joined by commas or semicolons: never split into characters."""
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.replace(";", ",").split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        return [str(value)]  # one id given as a number: iterating it would raise
    return [str(v) for v in value if v is not None]


def load_questions(store, cfg: LycheeConfig, questions_path: str | None) -> list[QAItem]:
    """Questions from the store (default) or a JSONL/Parquet file with the questions columns."""
    sources = dict(store.con.execute("select conversation_id, source from conversations").fetchall())
    if questions_path:
        placed = _read_question_file(questions_path)
    else:
        # question_date as DuckDB writes it ("2023-05-08 13:56:00"), the text the prompts have always shown
        table = store.con.execute("select * replace (cast(question_date as varchar) as question_date) from questions "
                                  "order by conversation_id, question_id").to_arrow_table()
        placed = [(None, q.as_dict()) for q in Question.from_arrow(table)]
    items = []
    for where, r in placed:
        if isinstance(r, UnreadableLine):
            items.append(unreadable_item(r))
            continue
        if where is not None:
            _check_date(r.get("question_date"), where)
        cat = str(r.get("category") or "unknown")
        if cat in LOCOMO_NAMES and cat not in cfg.evaluate.categories:
            continue
        source = sources.get(str(r.get("conversation_id")), "generic")
        items.append(
            QAItem(
                conversation_id=str(r.get("conversation_id")),
                question_id=str(r.get("question_id")),
                question=str(r.get("question") or ""),
                gold=str(r.get("answer") if r.get("answer") is not None else ""),
                category=cat,
                evidence_turn_ids=as_id_list(r.get("evidence_turn_ids")),
                question_date=r.get("question_date"),
                benchmark=source if source in BENCHMARKS else "generic",
                difficulty=r.get("difficulty"),
                rubric=[str(x) for x in r.get("rubric") or []],
                evidence_roles=[str(x) for x in r.get("evidence_roles") or []],
            )
        )
    mark_duplicate_ids(items, questions_path or "the store's questions table")
    if cfg.evaluate.max_questions:
        items = items[: cfg.evaluate.max_questions]
    mark_unanswerable(store, items, questions_path or "the store's questions table")
    return items


def by_conversation(items: list[QAItem]) -> list[QAItem]:
    """The questions with each conversation's together: conversations in order of first
    appearance, questions within one in their given order (a stable sort)."""
    first: dict[str, int] = {}
    for it in items:
        first.setdefault(it.conversation_id, len(first))
    return sorted(items, key=lambda it: first[it.conversation_id])


def conversation_groups(items: list[QAItem], size: int) -> list[list[QAItem]]:
    """The questions cut into batches of whole conversations: conversations are packed in order
    while the batch holds at most `size` questions, and a conversation with more than `size` is
    cut into consecutive pieces of `size`, each a batch of its own. A retrieve actor given such
    a batch works through whole conversations, so it loads each into its cache once."""
    groups: list[list[QAItem]] = []
    current: list[QAItem] = []
    for _, run in groupby(by_conversation(items), key=lambda it: it.conversation_id):
        run = list(run)
        if current and len(current) + len(run) > size:
            groups.append(current)
            current = []
        if len(run) > size:
            groups.extend(run[i : i + size] for i in range(0, len(run), size))
        else:
            current.extend(run)
    if current:
        groups.append(current)
    return groups


def unreadable_item(line: UnreadableLine) -> QAItem:
    return QAItem("", line.question_id, "", "", "unreadable", [], None, status="error", error=line.error)


def mark_duplicate_ids(items: list[QAItem], where: str) -> None:
    """The first question with an id is evaluated; a later one with the same id becomes an error
    row under `<id>#dup<k>`, so the answers table keeps one row per id and nothing is lost."""
    seen: dict[str, int] = {}
    for it in items:
        k = seen.get(it.question_id, 0)
        seen[it.question_id] = k + 1
        if k:
            it.error = f"question id {it.question_id!r} appears more than once; the first is evaluated, this copy #{k + 1} is not"
            it.question_id, it.status = f"{it.question_id}#dup{k + 1}", "error"
            log.warning("%s: %s; recorded as an error row", where, it.error)


def mark_unanswerable(store, items: list[QAItem], where: str) -> None:
    """Questions that cannot be answered become error rows (one log line each) before any stage
    runs, so the rest of the batch is evaluated: an empty question, a conversation the store
    does not hold, a conversation without records."""
    n_records = dict(store.con.execute("select conversation_id, count(*) from records group by 1").fetchall())
    known = set(store.conversation_ids())
    for it in items:
        if it.status != "ok":
            continue  # already an error row (unreadable line, duplicate id)
        if not it.question.strip():
            it.error = f"question {it.question_id} is empty"
        elif it.conversation_id not in known:
            it.error = f"question {it.question_id} names conversation {it.conversation_id!r}, which is not in the store"
        elif not n_records.get(it.conversation_id):
            it.error = f"question {it.question_id}: the store has no records for conversation {it.conversation_id!r}"
        else:
            continue
        it.status = "error"
        log.warning("%s: %s; recorded as an error row, the other questions go on", where, it.error)


def _read_question_file(path: str) -> list[tuple[str, dict | UnreadableLine]]:
    """Each row of a questions file with where it is ("file:line", or "file row N" in Parquet)."""
    if path.endswith(".parquet"):
        return [(f"{path} row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist(), start=1)]
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                rows.append((f"{path}:{lineno}", _question_row(line, path, lineno)))
    return rows


def _check_date(value, where: str) -> None:
    """A question_date given that is no date (empty included) is named: the rules planner reads
    the question as undated then, so its time window is lost. The question is still asked."""
    if value is not None and as_date(value) is None:
        log.warning("%s: question_date %s is not a date; the question is asked, but its date cannot be used", where, repr(value)[:200])


@dataclass
class UnreadableLine:
    """A questions-file line that holds no question: it becomes an error row of its own, under an
    id made of the file name and line number (stable across reruns, so a resume skips it)."""

    question_id: str
    error: str


def _question_row(line: str, path: str, lineno: int) -> dict | UnreadableLine:
    """One questions-file line as an object, or an `UnreadableLine` naming file, line and the
    problem: no JSON, too deep to parse, or a JSON value that is not an object (`42`)."""
    where = f"{path}:{lineno}"
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        problem = f"not valid JSON ({exc.msg})"
    except RecursionError:
        problem = "nested too deeply to parse"
    else:
        if isinstance(row, dict):
            return row
        problem = f"expected a JSON object with the questions columns, got {type(row).__name__}"
    log.error("%s: %s; recorded as an error row, the other questions go on", where, problem)
    return UnreadableLine(f"{Path(path).name}:line{lineno}", f"{where}: {problem}")
