"""benchmarks/beam_recall's report code on hand-made answers and the small synthetic store: the
per-ability means, questions without evidence counted apart, the targets, the memory ratios."""

from __future__ import annotations

from benchmarks import beam_recall
from lychee_ray.evaluate.answers import write_answer_part
from lychee_ray.evaluate.questions import QAItem

from .support.small_store import CONVS, make_cfg, store_dir  # noqa: F401  (fixture)


def item(qid: str, ability: str, ours: float | None, naive: float | None, bm25: float | None, status: str = "ok") -> QAItem:
    it = QAItem("c1", qid, f"invented question {qid}", "", ability, ["D1:1"] if ours is not None else [], None,
                benchmark="beam", status=status)
    it.evidence_recall = ours
    it.baselines = {"naive_rag": {"recall": naive}, "bm25": {"recall": bm25}}
    return it


ITEMS = [
    item("q1", "information_extraction", 1.0, 0.0, 0.5),
    item("q2", "information_extraction", 0.5, 1.0, 0.5),
    item("q3", "event_ordering", 0.25, 0.5, 0.75),
    item("q4", "abstention", None, None, None),
    item("q5", "abstention", None, None, None, status="error"),
]


def rows_from(tmp_path) -> dict[str, dict]:
    write_answer_part(ITEMS[:3], str(tmp_path / "eval"))
    write_answer_part(ITEMS[3:], str(tmp_path / "eval"))  # two parts, as the job writes them
    return {r["ability"]: r for r in beam_recall.ability_rows(beam_recall.answers_glob(tmp_path / "eval"))}


def test_recall_is_averaged_per_ability_over_questions_with_evidence_and_the_rest_are_counted_apart(tmp_path):
    rows = rows_from(tmp_path)
    ie = rows["information_extraction"]
    assert (ie["n"], ie["with_evidence"], ie["recall"], ie["naive_rag"], ie["bm25"]) == (2, 2, 0.75, 0.5, 0.5)
    ab = rows["abstention"]
    assert (ab["n"], ab["with_evidence"], ab["no_evidence"], ab["errors"], ab["recall"]) == (2, 0, 1, 1, None)
    overall = rows["all"]
    assert (overall["n"], overall["with_evidence"]) == (5, 3)
    assert abs(overall["recall"] - (1.0 + 0.5 + 0.25) / 3) < 1e-9
    macro = rows["mean of abilities"]  # abstention has no recall and is not in the macro mean
    assert abs(macro["recall"] - (0.75 + 0.25) / 2) < 1e-9 and abs(macro["bm25"] - (0.5 + 0.75) / 2) < 1e-9
    assert list(rows)[:3] == ["abstention", "event_ordering", "information_extraction"]  # BEAM's order, then the totals


def test_the_targets_name_the_abilities_below_bm25_and_the_overall_gap(tmp_path):
    lines = beam_recall.target_lines(list(rows_from(tmp_path).values()))
    # overall 0.583 vs BM25 0.583: +0.0 points, under the +15 target; event ordering 0.25 < 0.75
    assert "missed" in lines[0] and "+0.0 points" in lines[0]
    assert "event_ordering (0.250 < 0.750)" in lines[1] and "information_extraction" not in lines[1]


def test_memory_ratios_count_turns_passages_records_and_nodes_with_a_vector(store_dir):  # noqa: F811
    mem = beam_recall.memory_size(store_dir, make_cfg())
    convs = list(CONVS.values())
    turns = sum(len(c.turns) for c in convs)
    embedded = sum(len(c.turns) + len(c.passages) + len(c.records) + len(c.node_embeddings) for c in convs)
    assert mem["turns"] == turns and mem["records_per_turn"] == sum(len(c.records) for c in convs) / turns
    assert mem["embedded"] == embedded and mem["embedded_per_turn"] == embedded / turns


def test_the_report_holds_every_ability_row_and_the_chart_is_written(tmp_path, store_dir):  # noqa: F811
    rows = list(rows_from(tmp_path).values())
    png = beam_recall.chart(rows, tmp_path / "chart.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "\n".join(beam_recall.report_lines(rows, beam_recall.memory_size(store_dir, make_cfg()), {"ingest_s": 12.3}, 1500, "cmd", "note"))
    for ability in ("abstention", "event_ordering", "information_extraction", "all", "mean of abilities"):
        assert f"| {ability} |" in text
    assert "Ingest: 12 s; evaluate: not measured in this run" in text
