"""core/migrations.py: records of older versions migrate to the current one."""

import gzip
import json
from pathlib import Path

import pytest

from radmatch_audit.core.migrations import (
    BASELINE,
    BASELINE_SCHEMA_VERSION,
    UnknownSchemaVersion,
    migrate,
)
from radmatch_audit.core.records import SCHEMA_VERSION
from radmatch_audit.core.schemas import GradingStage
from radmatch_audit.files.record_io import parse_record
from radmatch_audit.read.recompute import score_record

OLD_RECORDS = Path(__file__).parents[1] / "data" / "records_bdb6a1e.jsonl.gz"  # written at bdb6a1e (v2)


def _old_lines():
    with gzip.open(OLD_RECORDS, "rt", encoding="utf-8") as handle:
        return [line for line in handle if line.strip()]


def test_version_2_records_migrate_to_keyed_grading_and_score_the_same_judge_errors():
    lines = _old_lines()
    graded = 0
    for line in lines:
        old = json.loads(line)
        assert old["schema_version"] == 2
        record = parse_record(line)
        assert record.schema_version == SCHEMA_VERSION >= 3  # migrated to the current version
        old_grading = (old.get("stages") or {}).get("grading")
        if old_grading is not None:
            grading = record.stages.grading
            assert grading.pairs == [tuple(p) for p in old_grading["pairs"]]
            for (p, g), errors in zip(old_grading["pairs"], old_grading["errors_per_match"]):
                kept = [e.model_dump() for e in grading.errors_for(p, g)]
                assert sorted(kept, key=json.dumps) == sorted(errors, key=json.dumps)
        if old["scores"] is None:
            assert score_record(record).scores is None
            continue
        # The scoring contract changed since bdb6a1e (deterministic comparators), but the
        # judge's grading errors must reach exactly the same rows as before the migration.
        rescored = json.loads(score_record(record).to_json())["scores"]
        judge_errors = lambda units: sorted(
            (e["pred_id"], e["gt_id"], e["dimension"], e["severity"])
            for u in units for e in u["errors"] if e["source"] == "judge"
        )
        assert judge_errors(old["scores"]["units"]) == judge_errors(
            rescored["units"]), old["pair_id"]
        graded += bool(judge_errors(old["scores"]["units"]))
    assert graded >= 5  # the file does exercise judge errors


def test_version_1_records_migrate_through_both_steps():
    old = next(json.loads(line) for line in _old_lines() if "grading" in (json.loads(line).get("stages") or {}))
    v1 = {**old, "schema_version": 1, "judge": {**old["judge"], "prompt_version": "v1-abc"}}
    record = parse_record(json.dumps(v1))
    assert record.schema_version == SCHEMA_VERSION
    assert set(record.judge.prompt_version.values()) == {"v1-abc"}
    assert record.stages.grading.pairs == [tuple(p) for p in old["stages"]["grading"]["pairs"]]
    assert score_record(record).scores == score_record(parse_record(json.dumps(old))).scores


def test_migration_keys_sampled_gradings_and_refuses_misaligned_ones():
    grading = {"pairs": [["p_1", "gt_1"]], "errors_per_match": [[
        {"dimension": "location", "severity": "minor", "reasoning": "r"}]]}
    data = {"schema_version": 2, "pair_id": "x", "reference": "r", "candidate": "c",
            "stages": {"grading": grading},
            "samples": [{"index": 1, "stages": {"grading": grading}}]}
    migrated = migrate(json.loads(json.dumps(data)))
    for stages in (migrated["stages"], migrated["samples"][0]["stages"]):
        assert stages["grading"] == {"pairs": [["p_1", "gt_1"]], "grades": [
            {"pred_id": "p_1", "gt_id": "gt_1", "errors": grading["errors_per_match"][0]}]}
    GradingStage.model_validate(migrated["stages"]["grading"])
    data["stages"]["grading"] = {"pairs": [["p_1", "gt_1"]], "errors_per_match": []}
    with pytest.raises(ValueError, match="stages.grading: errors_per_match has 0 entries but pairs has 1"):
        migrate(data)


def test_a_newer_version_or_an_unknown_kind_is_refused_as_newer():
    with pytest.raises(UnknownSchemaVersion) as newer:
        migrate({"schema_version": SCHEMA_VERSION + 1})
    assert newer.value.newer
    with pytest.raises(UnknownSchemaVersion) as unknown:
        migrate({"record_type": "verdict", "schema_version": 1})
    assert unknown.value.newer
    for version in (0, True, "4"):
        with pytest.raises(UnknownSchemaVersion) as bad:
            migrate({"schema_version": version})
        assert not bad.value.newer


def test_a_baseline_record_migrates_by_its_own_table():
    data = migrate({"record_type": BASELINE, "schema_version": BASELINE_SCHEMA_VERSION})
    assert data["schema_version"] == BASELINE_SCHEMA_VERSION
