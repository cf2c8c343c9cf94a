"""BEAM's scoring as its authors compute it: the rubric judge (one call per nugget, 0 / 0.5 / 1,
mean, a failed call counted 0) through the fake server, event ordering's normalized Kendall
tau-b over semantically aligned items (real MiniLM, no LLM), and abstention; and their section
of the report."""

from __future__ import annotations

import numpy as np
import pytest

from lychee_ray.evaluate.beam_scoring import abstains, align, answer_items, bucket_of, event_order_score, order_tau, rubric_score
from lychee_ray.evaluate.questions import QAItem
from lychee_ray.evaluate.stages import JudgeStage
from lychee_ray.llm.prompts import rubric_judge_messages
from lychee_ray.schemas import RubricGrade

from .support.generated import local_config, local_embedder  # noqa: F401  (fixture)

STEPS = ["set up the staging database", "migrate the billing tables", "switch the invoices service over", "retire the old cluster"]


def beam_item(category: str, prediction: str, rubric: list[str], qid: str = "q1") -> QAItem:
    return QAItem("beam-100K-1", qid, "In what order did I bring up the migration steps?", "", category, [], None,
                  benchmark="beam", rubric=rubric, prediction=prediction)


# ---------------------------------------------------------------------------- pure parts
def test_order_tau_is_kendall_tau_b_normalized_with_missing_items_ranked_last():
    assert order_tau(STEPS, STEPS) == 1.0
    assert order_tau(STEPS, list(reversed(STEPS))) == 0.0
    swapped = [STEPS[1], STEPS[0], *STEPS[2:]]
    assert 0.5 < order_tau(STEPS, swapped) < 1.0  # one discordant pair of six
    # a missing item ranks after every given one: a missing last step keeps the order perfect (as
    # the authors' tau does: it scores order, not recall), a missing middle one does not
    assert order_tau(STEPS, STEPS[:3]) == 1.0
    assert order_tau(STEPS, [STEPS[0], STEPS[2], STEPS[3]]) < 1.0
    assert order_tau(STEPS, []) == order_tau([], []) == 0.0


def test_alignment_maps_paraphrases_to_reference_items_one_to_one():
    vec = {"a": [1, 0, 0], "a'": [0.9, 0.1, 0], "b": [0, 1, 0], "c": [0, 0, 1], "x": [0.6, 0.6, 0.5]}
    unit = {k: np.array(v, float) / np.linalg.norm(v) for k, v in vec.items()}
    ref, system = ["a", "b", "c"], ["a'", "x", "a"]
    got = align(ref, system, np.stack([unit[r] for r in ref]), np.stack([unit[s] for s in system]))
    assert got == ["a", "x", "a"]  # a' takes a; x matches nothing well enough; a is already used, stays itself


def test_answer_items_rubric_score_abstention_and_bucket():
    assert answer_items("1. first\n- second\n\n* third\n  4) fourth") == ["first", "second", "third", "fourth"]
    assert rubric_score([1.0, 0.5, None, 0.0]) == pytest.approx(0.375) and rubric_score([]) is None
    assert abstains("I don't know: that was not mentioned.") and not abstains("It was on port 8080.")
    assert bucket_of("beam-100K-3") == "100K" and bucket_of("synth-0001") is None


def test_event_ordering_is_scored_with_real_minilm_and_paraphrases(local_embedder):
    said = "\n".join(["First we set up a staging database", "then we migrated the billing tables",
                      "after that the invoices service was switched over", "and finally the old cluster was retired"])
    assert event_order_score(STEPS, said, local_embedder.encode) == 1.0
    backwards = "\n".join(reversed(said.splitlines()))
    assert event_order_score(STEPS, backwards, local_embedder.encode) == 0.0


# ---------------------------------------------------------------------------- the judge stage
def test_the_rubric_judge_grades_each_nugget_and_counts_a_failed_call_as_zero(fake_openai):
    cfg = local_config("llm.backend=openai", f"llm.base_url={fake_openai.base_url}", "llm.model=fake-model",
                       "llm.api_key_env=LYCHEE_TEST_NO_KEY", "llm.max_retries=0", "judge.model=fake-judge", "evaluate.judge=true",
                       "llm.max_in_flight=1", "llm.repair_retries=0")  # one request at a time, no repair: a fault is the first nugget's
    rubric = ["the billing tables", "names the invoices service", "explains retiring hardware"]
    answer = "We migrated the billing tables and switched the invoices service."
    stage = JudgeStage(cfg)
    stage.setup()
    (item,) = stage.process_batch([beam_item("information_extraction", answer, rubric)])
    graded = [r for r in fake_openai.requests if r["schema_name"] == "RubricGrade"]
    assert len(graded) == 3  # one call per nugget
    assert item.rubric_grades == [1.0, 0.5, 0.0]  # every criterion word / some / none in the answer
    assert item.rubric_score == pytest.approx(0.5) and item.judge_label == "WRONG"
    fake_openai.reset()
    fake_openai.set_faults(schedule=["invalid"])  # the first nugget's call fails
    (failed,) = stage.process_batch([beam_item("information_extraction", answer, rubric, "q2")])
    assert failed.rubric_grades[0] is None and failed.rubric_grades[1:] == [0.5, 0.0]
    assert failed.rubric_score == pytest.approx(0.5 / 3)  # counted 0, still divided by all three
    assert failed.judge_label is None and any(e.startswith("judge:") for e in failed.llm_errors)
    stage.close()


def test_the_rubric_prompt_and_reply_schema():
    msgs = rubric_judge_messages("Which port?", "states port 8080", "Port 8080.")
    assert "0.5" in msgs[0]["content"] and msgs[-1]["content"].endswith("Answer to grade: Port 8080.")
    assert RubricGrade.model_json_schema()["properties"]["score"]["enum"] == [0, 0.5, 1]


# ---------------------------------------------------------------------------- the report
def test_the_report_has_beam_per_ability_and_bucket_and_says_the_rubric_needs_a_judge(tmp_path):
    import duckdb

    from lychee_ray.evaluate.answers import write_answer_part
    from lychee_ray.evaluate.beam_report import beam_lines

    items = []
    for i, (cat, recall, pred) in enumerate([("knowledge_update", 1.0, "Now 250 ms."), ("knowledge_update", 0.0, "300 ms."),
                                             ("event_ordering", 0.5, "a\nb"), ("abstention", None, "I do not know.")]):
        item = beam_item(cat, pred, [], qid=f"q{i}")
        item.evidence_recall = recall
        item.baselines = {"bm25": {"recall": 0.25}, "naive_rag": {"recall": 0.5}}
        item.order_tau = 0.75 if cat == "event_ordering" else None
        items.append(item)
    path = write_answer_part(items, str(tmp_path))
    con = duckdb.connect()
    con.execute(f"create view answers as select * from read_parquet('{path}')")
    text = "\n".join(beam_lines(con, has_judge=False, out=tmp_path))
    assert "| knowledge_update | 2 | 0.500 | 0.500 | 0.250 |" in text
    assert "| event_ordering | 1 | 0.500 |" in text and "0.750" in text  # its order tau
    assert "| 100K | 4 |" in text and "needs an LLM judge" in text
    assert "1 of 1 abstention answers decline" in text
    assert (tmp_path / "beam_recall_per_ability.png").stat().st_size > 5000
