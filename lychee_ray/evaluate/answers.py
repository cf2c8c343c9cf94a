"""The answers table: one row per question, committed under `<out>/answers/` as Parquet parts.

A part is named by a hash of its question ids and written atomically through pyarrow.fs (a path
or any URI). `answered_ids` reads the committed parts back, which is what lets a killed evaluation
resume without re-asking anything; the ablation grid writes the same rows.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lychee_ray.evaluate.questions import QAItem
from lychee_ray.io.fs import (
    delete_quietly,
    is_part_name,
    is_temp_name,
    join_path,
    list_files,
    resolve_uri,
    write_atomic,
)
from lychee_ray.runtime.stage import unpack

ANSWERS = "answers"  # the folder of answer parts under --out


# --------------------------------------------------------------------------------------------
# Answers table
# --------------------------------------------------------------------------------------------
ANSWERS_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("conversation_id", pa.string()),
        ("benchmark", pa.string()),
        ("category", pa.string()),
        ("question", pa.string()),
        ("gold", pa.string()),
        ("prediction", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("llm_errors", pa.list_(pa.string())),
        ("retrieved_record_ids", pa.list_(pa.string())),
        ("retrieved_turn_ids", pa.list_(pa.string())),
        ("evidence_turn_ids", pa.list_(pa.string())),
        ("context_tokens", pa.int64()),
        ("plan", pa.string()),
        ("judge_label", pa.string()),  # a BEAM question's: CORRECT when every rubric nugget was fully met
        ("answer_fallback", pa.bool_()),
        ("f1", pa.float64()),
        ("bleu1", pa.float64()),
        ("evidence_recall", pa.float64()),
        ("recall_curve", pa.list_(pa.float64())),
        ("naive_rag_recall", pa.float64()),
        ("naive_rag_curve", pa.list_(pa.float64())),
        ("naive_rag_f1", pa.float64()),
        ("bm25_recall", pa.float64()),
        ("bm25_curve", pa.list_(pa.float64())),
        ("bm25_f1", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("plan_prompt_tokens", pa.int64()),
        ("answer_prompt_tokens", pa.int64()),
        ("judge_prompt_tokens", pa.int64()),
        ("judge_completion_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("llm_calls", pa.int64()),
        # the ablation grid only (null elsewhere): o200k estimates of what an LLM would be sent
        # under the rules backend, and how much of a full-context reference did not fit
        ("difficulty", pa.string()),
        ("rubric_grades", pa.list_(pa.float64())),  # BEAM: each nugget's grade 0 / 0.5 / 1 (null: the judge call failed)
        ("rubric_score", pa.float64()),  # BEAM: their mean, a failed one counted 0 (the authors' score)
        ("order_tau", pa.float64()),  # BEAM event ordering: normalized Kendall tau-b (no LLM needed)
        ("est_prompt_tokens", pa.int64()),
        ("est_completion_tokens", pa.int64()),
        ("dropped_turns", pa.int64()),
        ("dropped_tokens", pa.int64()),
    ]
)


def answer_row(item: QAItem) -> dict:
    plan, answer, judge = item.plan_usage, item.answer_usage, item.judge_usage
    row = {
        "question_id": item.question_id,
        "conversation_id": item.conversation_id,
        "benchmark": item.benchmark,
        "category": item.category,
        "question": item.question,
        "gold": item.gold,
        "prediction": item.prediction,
        "status": item.status,
        "error": item.error,
        "llm_errors": item.llm_errors,
        "retrieved_record_ids": item.retrieved_record_ids,
        "retrieved_turn_ids": item.retrieved_turn_ids,
        "evidence_turn_ids": item.evidence_turn_ids,
        "context_tokens": item.context_tokens,
        "plan": item.plan_json,
        "judge_label": item.judge_label,
        "answer_fallback": item.answer_fallback,
        "f1": item.f1,
        "bleu1": item.bleu1,
        "evidence_recall": item.evidence_recall,
        "recall_curve": item.recall_curve,
        "prompt_tokens": plan.prompt_tokens + answer.prompt_tokens,
        "completion_tokens": plan.completion_tokens + answer.completion_tokens,
        "plan_prompt_tokens": plan.prompt_tokens,
        "answer_prompt_tokens": answer.prompt_tokens,
        "judge_prompt_tokens": judge.prompt_tokens,
        "judge_completion_tokens": judge.completion_tokens,
        "cached_tokens": plan.cached_tokens + answer.cached_tokens,  # prompt tokens the server's prefix cache served
        "llm_calls": plan.calls + answer.calls,
        "difficulty": item.difficulty,
        "rubric_grades": item.rubric_grades or None,
        "rubric_score": item.rubric_score,
        "order_tau": item.order_tau,
        "est_prompt_tokens": item.est_prompt_tokens,
        "est_completion_tokens": item.est_completion_tokens,
        "dropped_turns": item.dropped_turns,
        "dropped_tokens": item.dropped_tokens,
    }
    for name in ("naive_rag", "bm25"):
        b = item.baselines.get(name, {})
        row[f"{name}_recall"] = b.get("recall")
        row[f"{name}_curve"] = b.get("recall_curve")
        row[f"{name}_f1"] = b.get("f1")
    return row


def write_answer_part(items: list[QAItem], out_dir: str) -> str:
    """Commit answers as answers/part-<hash>.parquet under `out_dir` (a path or any pyarrow.fs
    URI): temp file then rename, so a kill never leaves half a part. Returns the part's path."""
    table = pa.Table.from_pylist([answer_row(i) for i in items], schema=ANSWERS_SCHEMA)
    part = hashlib.sha1("|".join(sorted(i.question_id for i in items)).encode()).hexdigest()[:16]
    fs, base = resolve_uri(out_dir)
    folder = join_path(base, ANSWERS)
    fs.create_dir(folder, recursive=True)
    path = join_path(folder, f"part-{part}.parquet")
    write_atomic(fs, path, lambda sink: pq.write_table(table, sink))
    return path


def write_answers(batch, out_dir: str):
    """The evaluate job's answers writer (a Ray Data task): one part per batch."""
    items: list[QAItem] = unpack(batch)
    write_answer_part(items, out_dir)
    return {"question_id": np.array([i.question_id for i in items], dtype=object), "status": np.array([i.status for i in items], dtype=object)}


def answered_ids(out_dir: str) -> set[str]:
    """Question ids in the committed answer parts; deletes the temp files of a killed run."""
    fs, base = resolve_uri(out_dir)
    ids: set[str] = set()
    for info in list_files(fs, join_path(base, ANSWERS)):
        if is_temp_name(info.base_name):
            delete_quietly(fs, info.path)
        elif is_part_name(info.base_name):
            ids.update(pq.read_table(info.path, columns=["question_id"], filesystem=fs).column("question_id").to_pylist())
    return ids
