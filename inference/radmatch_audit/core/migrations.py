"""The record formats' versions and migrations (docs/records.md): forward only, per kind.

A record's kind is its `record_type`: none for RadMatch's audit record, "baseline" for
a single-call baseline's. Each kind has its current `schema_version`, bumped on any
incompatible change, and a table of steps, version N to N+1, that `migrate` applies to
an older record's dict when it is read.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from radmatch_audit.core.vocabulary import SCORING_STAGES

SCHEMA_VERSION = 4
BASELINE_SCHEMA_VERSION = 1
BASELINE = "baseline"  # the `record_type` of a baseline record; an audit record has none


class UnknownSchemaVersion(ValueError):
    """A record this radmatch cannot read: `newer` when a later radmatch wrote it (a
    higher schema_version, or a record_type this one does not know)."""

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 documented `judge.prompt_version` as one string; version 2 keys it by stage."""
    judge = data.get("judge")
    if isinstance(judge, dict) and isinstance(judge.get("prompt_version"), str):
        version = judge["prompt_version"]
        data["judge"] = {**judge, "prompt_version": {stage: version for stage in SCORING_STAGES}}
    return data


def _keyed_grading(grading: Any, where: str) -> Any:
    if not isinstance(grading, dict) or "errors_per_match" not in grading:
        return grading
    pairs, answers = grading.get("pairs") or [], grading["errors_per_match"] or []
    if not isinstance(pairs, list) or not isinstance(answers, list) or len(pairs) != len(answers):
        raise ValueError(
            f"{where}: errors_per_match has {len(answers) if isinstance(answers, list) else '?'} "
            f"entries but pairs has {len(pairs) if isinstance(pairs, list) else '?'}; they must align"
        )
    keyed = {k: v for k, v in grading.items() if k != "errors_per_match"}
    keyed["grades"] = [
        {"pred_id": row[0], "gt_id": row[1], "errors": errors}
        for row, errors in zip(pairs, answers)
        if isinstance(row, (list, tuple)) and len(row) == 2
    ]
    if len(keyed["grades"]) != len(pairs):
        raise ValueError(f"{where}: every entry of pairs must be a [pred_id, gt_id] pair")
    return keyed


def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """Version 2 stored grading positionally (`errors_per_match[i]` belongs to `pairs[i]`);
    version 3 keys each entry by its row: `grades: [{pred_id, gt_id, errors}]`."""
    stages = data.get("stages")
    if isinstance(stages, dict) and "grading" in stages:
        data["stages"] = {**stages, "grading": _keyed_grading(stages["grading"], "stages.grading")}
    samples = data.get("samples")
    for i, sample in enumerate(samples if isinstance(samples, list) else []):  # else validation names it
        sample_stages = sample.get("stages") if isinstance(sample, dict) else None
        if isinstance(sample_stages, dict) and "grading" in sample_stages:
            sample["stages"] = {
                **sample_stages,
                "grading": _keyed_grading(sample_stages["grading"], f"samples.{i}.stages.grading"),
            }
    return data


def _unit_counts(scores: Any) -> None:
    units = scores.get("units") if isinstance(scores, dict) else None
    for unit in units if isinstance(units, list) else ():
        if isinstance(unit, dict) and "actionable_errors" not in unit:
            unit["actionable_errors"] = 1 if unit.get("actionable") is True else 0


def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """Version 4 adds the error adjudication (`stages.adjudication`, `scores.significant_errors`,
    absent before: not run) and what each unit adds to `actionable_errors` (under the
    contract a version-3 record was scored by, 1 for an actionable unit, else 0)."""
    _unit_counts(data.get("scores"))
    samples = data.get("samples")
    for sample in samples if isinstance(samples, list) else ():  # a malformed one: validation names it
        if isinstance(sample, dict):
            _unit_counts(sample.get("scores"))
    return data


# version N -> function turning a version-N dict into a version-(N+1) dict, per record_type
Migrations = dict[int, Callable[[dict[str, Any]], dict[str, Any]]]
MIGRATIONS: Migrations = {1: _v1_to_v2, 2: _v2_to_v3, 3: _v3_to_v4}
BASELINE_MIGRATIONS: Migrations = {}  # version 1 is the first
_FORMATS: dict[Optional[str], tuple[int, Migrations]] = {
    None: (SCHEMA_VERSION, MIGRATIONS),
    BASELINE: (BASELINE_SCHEMA_VERSION, BASELINE_MIGRATIONS),
}


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a record dict up to its kind's current version, or raise UnknownSchemaVersion."""
    kind = data.get("record_type")
    if kind is not None and not isinstance(kind, str):
        raise ValueError(f"field 'record_type' must be text, got {type(kind).__name__}")
    if kind not in _FORMATS:
        raise UnknownSchemaVersion(
            f"record_type {kind!r} is not known to this radmatch (it reads audit records, "
            f"without a record_type, and {BASELINE!r} records); upgrade radmatch to read it",
            newer=True,
        )
    current, steps = _FORMATS[kind]
    version = data.get("schema_version", current)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1 or version > current:
        raise UnknownSchemaVersion(
            f"schema_version {version!r} is not supported by this radmatch "
            f"(it reads versions 1 to {current}); upgrade radmatch to read it",
            newer=isinstance(version, int) and not isinstance(version, bool) and version > current,
        )
    while version < current:
        data = steps[version](data)
        version += 1
        data["schema_version"] = version
    return data
