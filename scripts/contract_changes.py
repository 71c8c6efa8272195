"""Which units a change of the scoring contract moved, and by which named rule.

    .venv/bin/python scripts/contract_changes.py                    # the stored file
    .venv/bin/python scripts/contract_changes.py records.jsonl ...  # any records files
    .venv/bin/python scripts/contract_changes.py --write-old tests/data/records_bdb6a1e.jsonl.gz

The records file `tests/data/records_bdb6a1e.jsonl.gz` (gzip: 1.7 MB of JSONL) holds the
repository's records (the test and demo corpora, the worked example, records made from the
few-shot match and grade exemplars, and boundary probes) as the code at commit bdb6a1e,
before contract 3, built and scored them. This script recomputes each record of that file
(and of any records file named on the command line) with the current code, as
`radmatch-audit recompute` does, compares every unit with its stored version and names the
rule of `RULES` that explains each difference (docs/scoring.md, "Contract changes"):

contract 3 (2026-12-02)
1. an SPU unit whose findings are all normal is no longer actionable;
2. `position` values (device tip-to-landmark distances) are never a major error;
3. an omitted reference value is major only when it carries a quantity;
4. each clinical threshold has a side (>= or >), which the reasoning names.
contract 4 (2026-12-05)
5. an actionable INC unit counts once per distinct status-inverted finding.

Each rule is a predicate on one changed unit. A difference that no rule explains is
printed and the exit status is 1; `tests/scripts/test_contract_changes.py` runs the same check. The
stored file was written at schema version 2: reading it migrates it (each unit's
`actionable_errors` becomes 1 when it is actionable, as under the contract that scored it)
and every difference is explained again, so rules 1-4 count what they counted when
contract 3 was made.

Records written before contract 3 cannot hold `position` (the category did not exist),
so rule 2 moves none of them. Its effect is measured on the current few-shot exemplars
instead: each is scored as is and with its `position` values labelled `other`, the
category tip distances had before.

`--write-old` rebuilds the stored file: it takes the package, tests and exemplars of
`--rev` from git (`git archive`, the working tree is not touched) into a temporary
folder and runs this script's `--emit` there, under that code.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RECORDS = REPO / "tests" / "data" / "records_bdb6a1e.jsonl.gz"
DEFAULT_REV = "bdb6a1e"


# --------------------------------------------------------------------------- the records


def grading_stage(rows: list[tuple[str, str]], per_row: list[list[dict]]) -> Any:
    """A stored grading stage in the format of the code this runs under: keyed `grades`
    (since issue 26) or, at bdb6a1e, `errors_per_match` aligned with `pairs`."""
    from radmatch_audit.core.schemas import GradingStage

    if "grades" in GradingStage.model_fields:
        return GradingStage.model_validate({
            "pairs": rows,
            "grades": [{"pred_id": p, "gt_id": g, "errors": e} for (p, g), e in zip(rows, per_row)],
        })
    return GradingStage(pairs=rows, errors_per_match=per_row)


def _fewshot_records(fewshots: Path) -> list[Any]:
    """Records from the match and grade exemplars: their findings, rows and grades."""
    from radmatch_audit.core.records import Record, Stages
    from radmatch_audit.core.schemas import Finding, GradingStage, MatchingAnswer

    def findings(items: list[dict]) -> list[Finding]:
        out = []
        for item in items:
            data = {k: v for k, v in item.items() if k != "finding_id"}
            out.append(Finding(id=item["finding_id"], evidence=[], **data))
        return out

    def graded(output: dict, rows: list[tuple[str, str]]) -> GradingStage:
        if "errors_per_match" in output:  # positional answers (before issue 26)
            per_row = output["errors_per_match"]
        else:  # keyed answers: {pred_id, gt_id, errors}
            by_key = {(g["pred_id"], g["gt_id"]): g["errors"] for g in output["grades"]}
            per_row = [by_key.get(key, []) for key in rows]
        return grading_stage(rows, per_row)

    records = []
    for path in sorted(fewshots.glob("*/match.json")) + sorted(fewshots.glob("*/grade.json")):
        modality, stage = path.parent.name, path.stem
        for n, exemplar in enumerate(json.loads(path.read_text("utf-8"))["exemplars"]):
            given, answer = exemplar["input"], exemplar["output"]
            if stage == "match":
                gt, pred = findings(given["gt_findings"]), findings(given["pred_findings"])
                matching = MatchingAnswer.model_validate(
                    {k: answer[k] for k in ("matches", "unmatched_pred", "unmatched_gt")}
                )
                grading = GradingStage()
            else:
                gt = findings([p["gt_finding"] for p in given["pairs"]])
                pred = findings([p["pred_finding"] for p in given["pairs"]])
                rows = [(p.id, g.id) for p, g in zip(pred, gt)]
                matching = MatchingAnswer.model_validate(
                    {
                        "matches": [
                            {"pred_id": p, "gt_id": g, "match_scope": "direct", "reasoning": "exemplar"}
                            for p, g in rows
                        ],
                        "unmatched_pred": [],
                        "unmatched_gt": [],
                    }
                )
                grading = graded(answer, rows)
            records.append(
                Record(
                    pair_id=f"fewshot-{modality}-{stage}-{n}",
                    reference="reference",
                    candidate="candidate",
                    stages=Stages(
                        reference_findings=gt,
                        candidate_findings=pred,
                        matching=matching,
                        grading=grading,
                    ),
                )
            )
    return records


def repository_records(fewshots: Path = REPO / "fewshots") -> list[Any]:
    """Every record the repository builds for its tests and demos, plus the exemplars'.

    Uses only what both the current code and the code at bdb6a1e provide (the tests'
    builders and fixtures must be importable), so `--emit` can run under either.
    """
    import random

    import dashboard_fixtures as fx
    from builders import fig3_record

    from radmatch_audit.testing.synthetic import PROFILES

    records = [fig3_record(), *fx.demo_records(), *fx.synthetic_corpus(60, seed=3)]
    for make in PROFILES.values():
        rnd = random.Random(0)
        records += [make(rnd, i) for i in range(40)]
    records += _fewshot_records(fewshots)
    return records


def probe_records() -> list[Any]:
    """Pairs made to sit on each rule's boundary (pair ids `probe-...`), not repository data:
    values exactly at every threshold in mm, cm, fractions and percent; omitted values with
    and without a quantity; SPU units of normal and abnormal findings at every tier."""
    from radmatch_audit.core.records import Record, Stages
    from radmatch_audit.core.schemas import Finding, MatchingAnswer, Measurement
    from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS

    def finding(id_: str, status: str = "abnormal", tier: str = "notable", values=()) -> Finding:
        return Finding(
            id=id_, text=f"finding {id_}.", clinical_status=status, clinical_significance=tier,
            comparison=None, evidence=[], measurements=[Measurement(**v) for v in values],
        )

    def pair(pair_id: str, gt: list, pred: list, rows=()) -> Record:
        matched = {(p, g) for p, g in rows}
        return Record(
            pair_id=f"probe-{pair_id}", reference="reference", candidate="candidate",
            stages=Stages(
                reference_findings=gt, candidate_findings=pred,
                matching=MatchingAnswer.model_validate({
                    "matches": [{"pred_id": p, "gt_id": g, "match_scope": "direct",
                                 "reasoning": "probe"} for p, g in rows],
                    "unmatched_pred": [f.id for f in pred if all(f.id != p for p, _ in matched)],
                    "unmatched_gt": [f.id for f in gt if all(f.id != g for _, g in matched)],
                }),
                grading=grading_stage(list(rows), [[] for _ in rows]),
            ),
        )

    out = []
    for quantity, spec in CLINICAL_THRESHOLDS.items():
        for t in spec.thresholds:
            if spec.unit == "mm":
                forms = [(t, "mm", 0.5), (t / 10, "cm", 0.05)]
                category = "size"
            else:
                forms = [(t, None, 0.01), (t * 100, "%", 1.0)]
                category = "ratio"
            for value, unit, step in forms:
                for other in (value - step, value + step):
                    def v(x: float, unit=unit, category=category, quantity=quantity) -> dict:
                        return {"value": round(x, 6), "unit": unit, "category": category,
                                "quantity": quantity}
                    out.append(pair(
                        f"threshold-{quantity}-{t:g}-{unit}-{other:g}",
                        [finding("gt_1", values=[v(value)])], [finding("p_1", values=[v(other)])],
                        [("p_1", "gt_1")],
                    ))
    size = {"value": 12.0, "unit": "mm", "category": "size"}
    aorta = {**size, "value": 56.0, "quantity": "ascending_aorta_diameter"}
    for name, values in (("no-quantity", [size]), ("quantity", [aorta])):
        out.append(pair(
            f"omitted-{name}", [finding("gt_1", values=values)], [finding("p_1")], [("p_1", "gt_1")]
        ))
    for tier in ("critical", "urgent", "notable", "routine"):
        for status in ("normal", "abnormal"):
            out.append(pair(f"spu-{status}-{tier}", [], [finding("p_1", status, tier)]))
        out.append(pair(  # mixed: one normal and one abnormal SPU of the tier
            f"spu-mixed-{tier}", [], [finding("p_1", "normal", tier), finding("p_2", "abnormal", tier)]
        ))
    return out


def emit(out: Any, fewshots: Path) -> None:
    """Write every repository record, scored by the code this runs under, as JSONL."""
    import radmatch_audit
    from radmatch_audit.read.recompute import score_record

    package = Path(radmatch_audit.__file__).resolve()
    if fewshots.resolve().parent not in package.parents:
        raise SystemExit(f"--emit runs the package at {package}, not the one beside {fewshots}")
    for record in repository_records(fewshots) + probe_records():
        out.write(score_record(record).to_json() + "\n")


def write_old(path: Path, rev: str) -> int:
    """Build and score the records with the code of `rev`, into `path`."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", rev, "inference", "tests", "fewshots"],
        check=True,
        capture_output=True,
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env_path = f"{tmp}/inference:{tmp}/tests"
        result = subprocess.run(
            [sys.executable, __file__, "--emit", "--fewshots", f"{tmp}/fewshots"],
            env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin", "HOME": tmp},
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp,
        )
    data = result.stdout.encode("utf-8")
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
    print(f"wrote {result.stdout.count(chr(10))} records scored at {rev} to {path}")
    return 0


# --------------------------------------------------------------------------- the rules


class Unexplained(Exception):
    """A difference between the stored and the recomputed scores that no rule explains."""


@dataclass
class Change:
    """One unit as stored (`old`) and as the current code scores it (`new`)."""

    old: Any
    new: Any
    gt: dict[str, Any]
    pred: dict[str, Any]

    @cached_property
    def error_rules(self) -> set[int]:
        """The rules that explain how the unit's errors changed; raises Unexplained."""
        if self.old.errors == self.new.errors:
            return set()
        return _explain_errors(self.old, self.new, self.gt, self.pred)


def unaddressed_negative(c: Change) -> bool:
    """Rule 1: the same SPU unit, of normal findings only, is no longer actionable."""
    return (
        c.old.outcome == c.new.outcome == "SPU" and c.old.actionable and not c.new.actionable
        and all(c.pred[i].clinical_status == "normal" for i in c.new.pred_ids)
    )


def inverted_findings(unit: Any) -> int:
    """Distinct findings of one side or the other over the unit's status errors (the larger)."""
    status = [e for e in unit.errors if e.dimension == "status"]
    return max(len({e.pred_id for e in status}), len({e.gt_id for e in status}))


def extra_count(unit: Any) -> int:
    """What a unit adds to `actionable_errors` beyond its actionable flag (0 before contract 4)."""
    return unit.actionable_errors - int(unit.actionable)


def each_inverted_finding(c: Change) -> bool:
    """Rule 5: an actionable unit that counted once now counts each inverted finding."""
    return (
        extra_count(c.old) == 0 and c.new.actionable
        and c.new.actionable_errors == inverted_findings(c.new) > 1
    )


def outcome_or_flag_moved(old: Any, new: Any) -> bool:
    return (old.outcome, old.actionable) != (new.outcome, new.actionable)


def count_moved(old: Any, new: Any) -> bool:
    return extra_count(old) != extra_count(new)


@dataclass(frozen=True)
class Rule:
    number: int
    contract: str  # the dated entry of docs/scoring.md "Contract changes" that made it
    name: str
    explains: Callable[[Change], bool]
    moved: Callable[[Any, Any], bool] = outcome_or_flag_moved  # what it can move in a unit


RULES = (
    Rule(1, "2026-12-02", "SPU of normal findings not actionable", unaddressed_negative),
    Rule(2, "2026-12-02", "position never major", lambda c: 2 in c.error_rules),
    Rule(3, "2026-12-02", "omitted value minor without a quantity", lambda c: 3 in c.error_rules),
    Rule(4, "2026-12-02", "threshold side (>= or >)", lambda c: 4 in c.error_rules),
    Rule(5, "2026-12-05", "INC counts each inverted finding", each_inverted_finding, count_moved),
)
BY_NUMBER = {rule.number: rule for rule in RULES}


def outcome_or_count_moved(old: Any, new: Any) -> bool:
    return outcome_or_flag_moved(old, new) or count_moved(old, new)


# --------------------------------------------------------------------------- explaining changes


def _key(unit: Any) -> tuple:
    return (unit.kind, tuple(unit.gt_ids), tuple(unit.pred_ids))


def _sided(reasoning: str) -> str:
    """An old threshold note with the current table's sides put in ('crosses 55 mm' ->
    'crosses >= 55 mm'): what rule 4 changes in a crossing's text alone."""
    from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS

    head, sep, crossed = reasoning.partition(" crosses ")
    if not sep:
        return reasoning
    quantity = head.rsplit(": ", 1)[-1]
    spec = CLINICAL_THRESHOLDS.get(quantity)
    if spec is None:
        return reasoning
    for t, side in zip(spec.thresholds, spec.sides):
        crossed = re.sub(rf"(^| and ){re.escape(f'{t:g}')}(?= mm \(| \()", rf"\g<1>{side} {t:g}", crossed)
    return head + sep + crossed


def _at_a_threshold(measurements: Iterable[Any], others: Iterable[Any]) -> bool:
    """Whether a value, in its quantity's unit after steps 1-2, equals one of its thresholds."""
    from radmatch_audit.scoring.comparators import normalise
    from radmatch_audit.core.thresholds import CLINICAL_THRESHOLDS

    ref, cand = normalise(list(measurements), list(others))
    for value in ref + cand:
        spec = CLINICAL_THRESHOLDS.get(value.quantity) if value.quantity else None
        if spec is None or value.category != spec.category:
            continue
        if spec.unit == "mm":
            x = value.value if value.unit == "mm" else None
        else:
            x = value.value if value.unit is None else value.value / 100 if value.unit == "pct" else None
        if x is not None and round(x, 6) in spec.thresholds:
            return True
    return False


def _measurements(ids: list[str], findings: dict[str, Any]) -> list[Any]:
    return [m for i in ids for m in findings[i].measurements if not m.prior]


def explain_unit(
    old: Any, new: Any, gt: dict[str, Any], pred: dict[str, Any], stale: bool = False
) -> set[int]:
    """The rules that explain how `new` differs from `old` (empty when they are equal).

    Raises Unexplained when a part of the difference is left that no rule explains.
    `stale`: the pair's adjudication went stale, which empties each unit's count."""
    if old == new:
        return set()
    if (old.rows, old.tier) != (new.rows, new.tier):
        raise Unexplained(f"unit {_key(new)}: rows or tier changed")
    change = Change(old, new, gt, pred)
    rules = {rule.number for rule in RULES if rule.explains(change)}
    left = _left_unexplained(change, rules, stale)
    if left:
        raise Unexplained(f"unit {_key(new)}: {left}")
    return rules


def _left_unexplained(c: Change, rules: set[int], stale: bool) -> str | None:
    """The first part of a unit's change that the rules found do not cover, or None."""
    old, new = c.old, c.new
    if old.errors != new.errors and not c.error_rules:
        return "its errors changed"
    if old.errors == new.errors and old.outcome != new.outcome:
        return "outcome changed with the same errors"
    if old.outcome == new.outcome and old.actionable != new.actionable and 1 not in rules:
        return "actionable changed with the same outcome"
    if extra_count(old) != extra_count(new) and 5 not in rules:
        return f"actionable_errors {old.actionable_errors} -> {new.actionable_errors}"
    if old.significant_errors != new.significant_errors and not (stale and new.significant_errors is None):
        return "significant_errors changed while the adjudication stands"
    return None


def _explain_errors(old: Any, new: Any, gt: dict[str, Any], pred: dict[str, Any]) -> set[int]:
    """The rules (2, 3, 4) that turn the old measurement errors into the new ones."""
    def pooled(unit: Any) -> list[Any]:
        return [e for e in unit.errors if e.source == "deterministic" and e.dimension == "measurement"]

    def rest(unit: Any) -> list[Any]:
        return [e for e in unit.errors if e not in pooled(unit)]

    if rest(old) != rest(new):
        raise Unexplained(f"unit {_key(new)}: an error other than a measurement error changed")
    old_left = Counter((e.severity, _sided(e.reasoning)) for e in pooled(old))
    new_left = Counter((e.severity, e.reasoning) for e in pooled(new))
    rules: set[int] = set()
    crossings = any(" crosses " in e.reasoning for e in pooled(old))
    if crossings and old_left != Counter((e.severity, e.reasoning) for e in pooled(old)):
        rules.add(4)  # the same crossing, its text now naming the side
    gone, came = old_left - new_left, new_left - old_left
    reference = _measurements(new.gt_ids, gt)
    # rule 3: an omitted value without a quantity turns minor; one with a quantity names it
    for (severity, text), n in list(gone.items()):
        if (
            severity == "major" and text.endswith(" omitted") and came[("minor", text)] >= n
            and any(m.quantity is None for m in reference)
        ):
            came[("minor", text)] -= n
            del gone[(severity, text)]
            rules.add(3)
    came += Counter()  # drop zero counts
    for (severity, text), n in list(gone.items()):
        named = [k for k in came if k[0] == severity and k[1].startswith(text + ": ")]
        if severity == "major" and text.endswith(" omitted") and named:
            came[named[0]] -= n
            del gone[(severity, text)]
            rules.add(3)
    came += Counter()
    if gone or came:
        candidate = _measurements(new.pred_ids, pred)
        if any(m.category == "position" for m in reference + candidate):
            rules.add(2)  # a tip distance, compared as `position` now (never major)
        elif _at_a_threshold(reference, candidate):
            rules.add(4)  # a value exactly at a threshold changed sides (and may pair otherwise)
        else:
            raise Unexplained(
                f"unit {_key(new)}: measurement errors changed: "
                f"{sorted(gone.elements())} -> {sorted(came.elements())}"
            )
    return rules


STALE = "adjudication is stale"  # the start of the repair line a stale adjudication adds


def explain_record(old: Any, new: Any) -> dict[tuple, set[int]]:
    """Changed units of one record -> the rules that explain each; raises Unexplained."""
    if (old.scores is None) != (new.scores is None):
        raise Unexplained(f"pair {old.pair_id!r}: scored in one version only")
    if old.scores is None:
        return {}
    stale = old.scores.adjudication == "current" and new.scores.adjudication == "stale"
    if old.repairs != [r for r in new.repairs if not (stale and r.startswith(STALE))]:
        raise Unexplained(f"pair {old.pair_id!r}: repairs changed")
    old_units, new_units = old.scores.units, new.scores.units
    if [_key(u) for u in old_units] != [_key(u) for u in new_units]:
        raise Unexplained(f"pair {old.pair_id!r}: the units changed")
    gt = {f.id: f for f in new.stages.reference_findings}
    pred = {f.id: f for f in new.stages.candidate_findings}
    changed = {}
    for a, b in zip(old_units, new_units):
        try:
            rules = explain_unit(a, b, gt, pred, stale)
        except Unexplained as exc:
            raise Unexplained(f"pair {old.pair_id!r}: {exc}") from None
        if rules:
            changed[_key(b)] = rules
    if not changed and old.scores != new.scores:
        raise Unexplained(f"pair {old.pair_id!r}: scores changed with every unit the same")
    return changed


def read_text(path: Path) -> str:
    """A records file's text, gunzipped when its name ends in .gz."""
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")


def jsonl_lines(text: str) -> list[str]:
    """JSONL lines: cut at newlines only (a record may hold U+2028, which splitlines cuts)."""
    return [line + "\n" for line in text.split("\n") if line.strip()]


def recompute_file(path: Path) -> tuple[list[Any], list[Any]]:
    """(the records as stored, the same records after `radmatch-audit recompute`)."""
    from radmatch_audit.read.corpus import CorpusSummary
    from radmatch_audit.read.recompute import recompute_lines
    from radmatch_audit.files.record_io import parse_record

    lines = jsonl_lines(read_text(path))
    out = StringIO()
    bad = recompute_lines(lines, out.write, CorpusSummary())
    if bad:
        raise SystemExit(f"{path}: {len(bad)} lines could not be recomputed: {bad[0].message}")
    return [parse_record(line) for line in lines], [
        parse_record(line) for line in jsonl_lines(out.getvalue())
    ]


@dataclass
class Tally:
    """What one rule (or, under number 0, all of them) moved in a records file."""

    units: int = 0  # units it explains a change of
    moved: int = 0  # of those, units whose outcome or actionable flag (rule 5: count) moved
    delta: int = 0  # the change in actionable_errors, summed over those units
    pairs: set = field(default_factory=set)  # pairs whose actionable_errors those units moved


def tally(old: list[Any], new: list[Any]) -> tuple[dict[int, Tally], list[str]]:
    """(rule number -> Tally, 0 -> all rules together; the unexplained differences)."""
    tallies = {rule.number: Tally() for rule in RULES} | {0: Tally()}
    problems = []
    for a, b in zip(old, new):
        try:
            explained = explain_record(a, b)
        except Unexplained as exc:
            problems.append(str(exc))
            continue
        before = {_key(u): u for u in a.scores.units} if a.scores else {}
        after = {_key(u): u for u in b.scores.units} if b.scores else {}
        deltas: dict[int, int] = Counter()
        for key, rules in explained.items():
            x, y = before[key], after[key]
            for number in (*rules, 0):  # a unit several rules explain counts under each
                moved = BY_NUMBER[number].moved if number else outcome_or_count_moved
                tallies[number].units += 1
                tallies[number].moved += moved(x, y)
                tallies[number].delta += y.actionable_errors - x.actionable_errors
                deltas[number] += y.actionable_errors - x.actionable_errors
        for number, delta in deltas.items():
            if delta:
                tallies[number].pairs.add(a.pair_id)
    return tallies, problems


def print_table(title: str, old: list[Any], tallies: dict[int, Tally]) -> None:
    """One line per rule; its mean is the file's mean actionable errors with only its units moved."""
    scored = [r.scores.actionable_errors for r in old if r.scores is not None]
    units = sum(len(r.scores.units) for r in old if r.scores)
    n = max(len(scored), 1)
    before = sum(scored) / n
    print(f"{title}: {len(old)} records ({len(scored)} scored, {units} units)")
    print(f"  {'rule':<42} {'contract':<10} {'units changed':>13} {'outcome/actionable moved':>24} "
          f"{'pairs moved':>11}  mean actionable errors")
    rows = [(f"{r.number} {r.name}", r.contract, tallies[r.number]) for r in RULES]
    for name, contract, t in rows + [("all rules", "", tallies[0])]:
        print(f"  {name:<42} {contract:<10} {t.units:>13} {t.moved:>24} {len(t.pairs):>11}  "
              f"{before:.3f} -> {before + t.delta / n:.3f}")


def position_changes(fewshots: Path = REPO / "fewshots") -> tuple[int, int, int]:
    """Rule 2 on the current exemplars: (records with position values, units that differ
    from the same record with those values labelled `other`, units whose outcome differs)."""
    from radmatch_audit.read.recompute import score_record

    records = with_positions = units = outcomes = 0
    for record in _fewshot_records(fewshots):
        records += 1
        as_other = record.model_copy(deep=True)
        stages = as_other.stages
        found = False
        for finding in stages.reference_findings + stages.candidate_findings:
            for m in finding.measurements:
                if m.category == "position":
                    m.category, found = "other", True
        if not found:
            continue
        with_positions += 1
        now, before = score_record(record).scores, score_record(as_other).scores
        for a, b in zip(before.units, now.units):
            units += a != b
            outcomes += (a.outcome, a.actionable) != (b.outcome, b.actionable)
    return with_positions, units, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="*", type=Path, default=[DEFAULT_RECORDS])
    parser.add_argument("--write-old", type=Path, metavar="PATH", help="rebuild the old records")
    parser.add_argument("--rev", default=DEFAULT_REV, help="the commit before the change")
    parser.add_argument("--emit", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fewshots", type=Path, default=REPO / "fewshots", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.emit:
        emit(sys.stdout, args.fewshots)
        return 0
    if args.write_old:
        return write_old(args.write_old, args.rev)
    sys.path.insert(0, str(REPO / "tests"))
    problems: list[str] = []
    for path in args.records:
        old, new = recompute_file(path)
        for title, probes in (("", False), (", boundary probes (probe-*)", True)):
            chosen = [(a, b) for a, b in zip(old, new) if a.pair_id.startswith("probe-") is probes]
            if probes and not chosen:
                continue
            tallies, unexplained = tally([a for a, _ in chosen], [b for _, b in chosen])
            problems += unexplained
            print_table(path.name + title, [a for a, _ in chosen], tallies)
    with_positions, position_units, position_moved = position_changes()
    print(
        f"rule 2 on the current exemplars: {with_positions} records with position values; "
        f"{position_units} units differ from scoring them as `other`, "
        f"{position_moved} in outcome or actionable flag"
    )
    for problem in problems:
        print("UNEXPLAINED:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
