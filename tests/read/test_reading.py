"""read/reading.py: one reader of records files: a record stored without scores is scored,
a line that is not a record is set aside by number, and a pair's last record wins."""

from __future__ import annotations

import io

from builders import fig3_record

from radmatch_audit.core.records import JudgeInfo
from radmatch_audit.read.reading import RecordReader, judge_label, read_file


def line(rec, **update) -> str:
    return rec.model_copy(update=update).to_json() + "\n"


def test_the_last_record_of_a_pair_wins_in_the_place_of_the_last(tmp_path):
    first, other = fig3_record("a"), fig3_record("b")
    again = first.model_copy(update={"candidate": "candidate text, run again"})
    path = tmp_path / "records.jsonl"
    path.write_text(line(first) + line(other) + "\n" + line(again), encoding="utf-8")
    read = read_file(path)
    assert [r.pair_id for r in read.records] == ["a", "b", "a"] and read.bad == []
    assert [(r.pair_id, r.candidate) for r in read.latest()] == [
        ("b", other.candidate), ("a", "candidate text, run again")]


def test_a_record_without_scores_is_scored_and_bad_lines_are_named_not_fatal():
    unscored = fig3_record("unscored")  # stages only, as a recompute or an old writer leaves it
    broken = fig3_record("broken")
    broken = broken.model_copy(update={"stages": broken.stages.model_copy(update={"matching": None})})
    text = line(unscored) + "{not json\n" + line(broken) + '{"pair_id": "x"}\n' + line(fig3_record("last"))
    reader = RecordReader(io.StringIO(text))
    records = list(reader)
    assert [r.pair_id for r in records] == ["unscored", "last"]
    assert records[0].scores.actionable_errors == 2
    assert [bad.line_no for bad in reader.bad] == [2, 3, 4]
    assert "pair 'broken': stage matching is missing" in reader.bad[1].message
    assert "reference" in reader.bad[2].message  # the missing field is named


def test_judge_label_names_the_judge_and_the_weights_it_loaded():
    judge = JudgeInfo(backend="openai", model="medgemma", loaded_model="/models/medgemma-27b")
    assert judge_label(judge) == "openai/medgemma"
    assert judge_label(judge, weights=True) == "openai/medgemma (/models/medgemma-27b)"
    assert judge_label(JudgeInfo()) is None
