"""The red-team set's expectations, checked against audit records (redteam/README.md).

A red-team pair states what a correct judge must do as a list of expectations, each a
JSON object with a `kind` and its parameters. `check_record` tells, from one record
alone, which expectations hold. Pure: no judge, no I/O but `load_pairs`; the reasons
it gives name finding ids and the pair file's own patterns, never report text.

Kinds (every pattern is a case-insensitive regular expression):

* `scored`: the record has scores (the judge did not fail it).
* `finding` / `no_finding`: a finding on `side` (reference, candidate or either)
  exists / none exists, filtered by `pattern` (searched in `field`: text, evidence or
  any, the default), `status`, `tier` (one or a list), `min_tier` (that tier or more
  urgent) and `measurement_category` (it has a measurement of that category).
* `unit` / `no_unit`: an evaluation unit exists / none exists, filtered by `outcome`
  and `unit_kind` (one or a list), `tier`, `min_tier`, `gt` and `pred` (a pattern that
  one of the unit's reference / candidate findings matches, in text or evidence).
* `score`: `path` (dotted, into `scores`, e.g. `outcomes.spu`) compared by `op`
  (== != >= <= > <) with `value`. A null score never holds: `significant_errors` is
  null unless the error adjudication is current, and the reason says its state.
* `no_evidence_from_section`: no finding on `side` quotes text that occurs in its
  report only inside a section whose header matches `section` (e.g. HISTORY).
* `attributed`: every finding on `side` has evidence found in its report.
* `flag`: one of the record's `flags` matches `pattern` (e.g. that the pipeline
  neutralised the served model's control strings in a report, JUDGE rule 17).
"""

from __future__ import annotations

import json
import operator
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from radmatch_audit.core.records import Record
from radmatch_audit.core.schemas import Finding
from radmatch_audit.scoring.results import OUTCOMES, SIGNIFICANCE_TIERS
from radmatch_audit.core.vocabulary import MODALITIES, check_choice

KINDS = ("scored", "finding", "no_finding", "unit", "no_unit", "score",
         "no_evidence_from_section", "attributed", "flag")
SIDES = ("reference", "candidate", "either")
OPS = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
       ">": operator.gt, "<": operator.lt}
_FINDING_KEYS = {"side", "pattern", "field", "status", "tier", "min_tier", "measurement_category"}
_UNIT_KEYS = {"outcome", "unit_kind", "tier", "min_tier", "gt", "pred"}
_PARAMS = {
    "scored": set(), "finding": _FINDING_KEYS, "no_finding": _FINDING_KEYS,
    "unit": _UNIT_KEYS, "no_unit": _UNIT_KEYS, "score": {"path", "op", "value"},
    "no_evidence_from_section": {"side", "section"}, "attributed": {"side"}, "flag": {"pattern"},
}
_REQUIRED = {"finding": {"side"}, "no_finding": {"side"}, "score": {"path", "op", "value"},
             "no_evidence_from_section": {"side", "section"}, "attributed": {"side"},
             "flag": {"pattern"}}
PAIR_KEYS = {"pair_id", "attack", "behaviour", "modality", "indication", "reference",
             "candidate", "expect"}
# a section header at the start of a line: "HISTORY:", "CLINICAL HISTORY:", "FINDINGS:"
SECTION_HEADER = re.compile(r"^[ \t]*([A-Z][A-Za-z /]{1,40}):", re.MULTILINE)


@dataclass(frozen=True)
class Outcome:
    """One expectation checked: whether it holds, and why, in words without report text."""

    ok: bool
    why: str


@dataclass(frozen=True)
class PairResult:
    pair_id: str
    behaviour: str
    status: str  # "pass", "fail" or "judge-failed"
    why: str


# --------------------------------------------------------------------------- the set


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def validate_expectation(exp: Any) -> None:
    """Raise ValueError, saying what is wrong, unless `exp` is a well-formed expectation."""
    if not isinstance(exp, dict) or exp.get("kind") not in KINDS:
        raise ValueError(f"an expectation must be an object whose kind is one of {list(KINDS)}")
    kind = exp["kind"]
    params = set(exp) - {"kind", "note"}
    if params - _PARAMS[kind]:
        raise ValueError(f"{kind}: unknown parameter(s) {sorted(params - _PARAMS[kind])}")
    if _REQUIRED.get(kind, set()) - params:
        raise ValueError(f"{kind}: missing parameter(s) {sorted(_REQUIRED[kind] - params)}")
    if "side" in exp:
        check_choice(exp["side"], SIDES, f"{kind}: side")
    check_choice(exp.get("field", "any"), ("text", "evidence", "any"), f"{kind}: field")
    check_choice(exp.get("status", "normal"), ("normal", "abnormal"), f"{kind}: status")
    for tier in _as_list(exp.get("tier", [])) + _as_list(exp.get("min_tier", [])):
        if tier not in SIGNIFICANCE_TIERS:
            raise ValueError(f"{kind}: {tier!r} is not a tier {list(SIGNIFICANCE_TIERS)}")
    for outcome in _as_list(exp.get("outcome", [])):
        if outcome not in OUTCOMES:
            raise ValueError(f"{kind}: {outcome!r} is not an outcome {list(OUTCOMES)}")
    for unit_kind in _as_list(exp.get("unit_kind", [])):
        if unit_kind not in ("matched", "mis", "spu", "generic"):
            raise ValueError(f"{kind}: {unit_kind!r} is not a unit kind")
    for key in ("pattern", "gt", "pred", "section"):
        if key in exp:
            try:
                re.compile(exp[key])
            except (re.error, TypeError) as exc:
                raise ValueError(f"{kind}: {key} is not a regular expression: {exc}") from None
    if kind == "score":
        if exp["op"] not in OPS or not isinstance(exp["value"], (int, float)):
            raise ValueError(f"score: op must be one of {list(OPS)} and value a number")


def validate_pair(pair: Any) -> None:
    """Raise ValueError unless `pair` is a well-formed red-team pair."""
    if not isinstance(pair, dict):
        raise ValueError("a pair must be a JSON object")
    missing, unknown = PAIR_KEYS - set(pair), set(pair) - PAIR_KEYS - {"study_id"}
    if missing or unknown:
        raise ValueError(f"missing key(s) {sorted(missing)}, unknown key(s) {sorted(unknown)}")
    for key in ("pair_id", "attack", "behaviour", "reference", "candidate"):
        if not isinstance(pair[key], str) or not pair[key].strip():
            raise ValueError(f"{key} must be a non-empty string")
    if pair["indication"] is not None and not isinstance(pair["indication"], str):
        raise ValueError("indication must be a string or null")
    check_choice(pair["modality"], MODALITIES, "modality")
    if not isinstance(pair["expect"], list) or not pair["expect"]:
        raise ValueError("expect must be a non-empty list")
    for i, exp in enumerate(pair["expect"]):
        try:
            validate_expectation(exp)
        except ValueError as exc:
            raise ValueError(f"expect[{i}]: {exc}") from None
        if exp["kind"] == "no_evidence_from_section":
            sides = ("reference", "candidate") if exp["side"] == "either" else (exp["side"],)
            if not any(section_spans(pair[s], exp["section"]) for s in sides):
                raise ValueError(f"expect[{i}]: no section {exp['section']!r} in the {exp['side']}")


def load_pairs(path: Union[str, Path]) -> list[dict[str, Any]]:
    """The red-team pairs of a JSONL file, each validated; ValueError names the line."""
    pairs, seen = [], set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                pair = json.loads(line)
                validate_pair(pair)
            except ValueError as exc:
                raise ValueError(f"{path}: line {number}: {exc}") from None
            if pair["pair_id"] in seen:
                raise ValueError(f"{path}: line {number}: pair_id {pair['pair_id']!r} repeats")
            seen.add(pair["pair_id"])
            pairs.append(pair)
    return pairs


# --------------------------------------------------------------------------- checking


def section_spans(report: str, section: str) -> list[tuple[int, int]]:
    """(start, end) of each section whose header matches `section`, up to the next header."""
    headers = list(SECTION_HEADER.finditer(report))
    wanted = re.compile(section, re.IGNORECASE)
    return [
        (h.start(), headers[i + 1].start() if i + 1 < len(headers) else len(report))
        for i, h in enumerate(headers) if wanted.fullmatch(h.group(1).strip())
    ]


def _search(pattern: str, finding: Finding, field: str = "any") -> bool:
    texts = ([finding.text] if field in ("text", "any") else []) + (
        list(finding.evidence) if field in ("evidence", "any") else [])
    return any(re.search(pattern, t, re.IGNORECASE) for t in texts)


def _tiers(exp: dict[str, Any]) -> Optional[set[str]]:
    tiers: Optional[set[str]] = set(_as_list(exp["tier"])) if "tier" in exp else None
    if "min_tier" in exp:
        upto = set(SIGNIFICANCE_TIERS[: SIGNIFICANCE_TIERS.index(exp["min_tier"]) + 1])
        tiers = upto if tiers is None else tiers & upto
    return tiers


def _findings(record: Record, side: str) -> list[Finding]:
    stages = record.stages
    ref, cand = stages.reference_findings or [], stages.candidate_findings or []
    return {"reference": ref, "candidate": cand, "either": ref + cand}[side]


def _finding_hits(record: Record, exp: dict[str, Any]) -> list[str]:
    tiers = _tiers(exp)
    return [
        f.id for f in _findings(record, exp["side"])
        if ("pattern" not in exp or _search(exp["pattern"], f, exp.get("field", "any")))
        and exp.get("status", f.clinical_status) == f.clinical_status
        and (tiers is None or f.clinical_significance in tiers)
        and ("measurement_category" not in exp
             or any(m.category == exp["measurement_category"] for m in f.measurements))
    ]


def _unit_hits(record: Record, exp: dict[str, Any]) -> list[str]:
    tiers = _tiers(exp)
    by_id = {f.id: f for f in _findings(record, "either")}
    hits = []
    for unit in record.scores.units:
        if "outcome" in exp and unit.outcome not in _as_list(exp["outcome"]):
            continue
        if "unit_kind" in exp and unit.kind not in _as_list(exp["unit_kind"]):
            continue
        if tiers is not None and unit.tier not in tiers:
            continue
        if "gt" in exp and not any(_search(exp["gt"], by_id[i]) for i in unit.gt_ids if i in by_id):
            continue
        if "pred" in exp and not any(_search(exp["pred"], by_id[i]) for i in unit.pred_ids if i in by_id):
            continue
        hits.append("+".join(unit.gt_ids + unit.pred_ids) + f" ({unit.outcome or unit.kind}, {unit.tier})")
    return hits


def _resolve(scores: Any, path: str) -> Any:
    value = scores
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


def _why_null(record: Record, path: str) -> str:
    """Why an adjudicated count is null: the adjudication's state (off, failed, stale, invalid)."""
    if path == "significant_errors" and record.scores.adjudication != "current":
        return f" (the error adjudication is {record.scores.adjudication})"
    return ""


def describe(exp: dict[str, Any]) -> str:
    """An expectation in words, from its parameters (the pair file's text, no report text)."""
    kind = exp["kind"]
    if kind == "scored":
        return "the record is scored"
    if kind == "score":
        return f"scores.{exp['path']} {exp['op']} {exp['value']}"
    if kind == "attributed":
        return f"every {exp['side']} finding quotes its report"
    if kind == "no_evidence_from_section":
        return f"no {exp['side']} evidence only from section /{exp['section']}/"
    if kind == "flag":
        return f"a record flag /{exp['pattern']}/"
    keys = ("outcome", "unit_kind", "pattern", "field", "status", "tier", "min_tier",
            "measurement_category", "gt", "pred")
    what = ", ".join(f"{k}={'|'.join(map(str, _as_list(exp[k])))}" for k in keys if k in exp)
    if kind in ("finding", "no_finding"):
        head = ("a " if kind == "finding" else "no ") + f"{exp['side']} finding"
    else:
        head = "a unit" if kind == "unit" else "no unit"
    return f"{head} [{what}]" if what else head


def check_expectation(record: Record, exp: dict[str, Any]) -> Outcome:
    """Whether one expectation holds for a record."""
    kind, said = exp["kind"], describe(exp)
    if record.scores is None:
        return Outcome(False, f"{said}: the record has no scores ({record.error or 'not scored'})")
    if kind == "scored":
        return Outcome(True, said)
    if kind in ("finding", "no_finding"):
        hits = _finding_hits(record, exp)
        ok = bool(hits) if kind == "finding" else not hits
        return Outcome(ok, f"{said}: {'found ' + ', '.join(hits) if hits else 'none found'}")
    if kind in ("unit", "no_unit"):
        hits = _unit_hits(record, exp)
        ok = bool(hits) if kind == "unit" else not hits
        return Outcome(ok, f"{said}: {'found ' + ', '.join(hits) if hits else 'none found'}")
    if kind == "score":
        value = _resolve(record.scores, exp["path"])
        if not isinstance(value, (int, float)):
            return Outcome(False, f"{said}: scores has no number at {exp['path']}{_why_null(record, exp['path'])}")
        return Outcome(bool(OPS[exp["op"]](value, exp["value"])), f"{said}: it is {value}")
    if kind == "attributed":
        sides = ("reference", "candidate") if exp["side"] == "either" else (exp["side"],)
        short = [f"{s} {a.attributed}/{a.findings}"
                 for s in sides for a in [getattr(record.scores.attribution, s)]]
        ok = all(getattr(record.scores.attribution, s).attributed
                 == getattr(record.scores.attribution, s).findings for s in sides)
        return Outcome(ok, f"{said}: attributed {', '.join(short)}")
    if kind == "flag":  # flags are the pipeline's own words, never report text
        hits = [i for i, flag in enumerate(record.flags) if re.search(exp["pattern"], flag, re.IGNORECASE)]
        return Outcome(bool(hits), f"{said}: {'flag ' + ', '.join(map(str, hits)) if hits else f'none of {len(record.flags)} flag(s)'}")
    if kind == "no_evidence_from_section":
        bad = []
        sides = ("reference", "candidate") if exp["side"] == "either" else (exp["side"],)
        for side in sides:
            report = getattr(record, side)
            spans = section_spans(report, exp["section"])
            for finding in _findings(record, side):
                if any(_only_inside(report, quote, spans) for quote in finding.evidence):
                    bad.append(finding.id)
        return Outcome(not bad, f"{said}: {'quoted by ' + ', '.join(bad) if bad else 'none'}")
    raise ValueError(f"unknown expectation kind {kind!r}")


def _only_inside(report: str, quote: str, spans: list[tuple[int, int]]) -> bool:
    """The quote occurs in the report, and every occurrence lies inside one of the spans."""
    quote = quote.strip()
    if not quote or not spans:
        return False
    starts = [m.start() for m in re.finditer(re.escape(quote), report, re.IGNORECASE)]
    return bool(starts) and all(
        any(a <= s and s + len(quote) <= b for a, b in spans) for s in starts)


def check_record(record: Record, pair: dict[str, Any]) -> PairResult:
    """The pair's verdict: judge-failed when the record failed, else pass or fail with why."""
    if record.error is not None:
        return PairResult(pair["pair_id"], pair["behaviour"], "judge-failed", record.error)
    outcomes = [check_expectation(record, exp) for exp in pair["expect"]]
    failed = [o.why for o in outcomes if not o.ok]
    if failed:
        return PairResult(pair["pair_id"], pair["behaviour"], "fail", "; ".join(failed))
    return PairResult(pair["pair_id"], pair["behaviour"], "pass", f"{len(outcomes)} expectation(s) hold")


def check_records(records: Iterable[Record], pairs: list[dict[str, Any]]) -> tuple[list[PairResult], list[str]]:
    """A result per pair that has a record (set order), and the ids of pairs without one."""
    by_id = {record.pair_id: record for record in records}
    results = [check_record(by_id[p["pair_id"]], p) for p in pairs if p["pair_id"] in by_id]
    return results, [p["pair_id"] for p in pairs if p["pair_id"] not in by_id]


BEHAVIOUR_WIDTH = 60  # characters of a pair's behaviour shown in the table


def format_results(results: list[PairResult], missing: list[str]) -> str:
    """The table of `radmatch-audit redteam`: pair, behaviour, result and why, then the
    pass rate and the pairs of the set without a record."""
    rows = [("pair", "behaviour", "result", "why")]
    for r in results:
        behaviour = r.behaviour if len(r.behaviour) <= BEHAVIOUR_WIDTH else r.behaviour[: BEHAVIOUR_WIDTH - 3] + "..."
        rows.append((r.pair_id, behaviour, r.status, r.why))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:3])) + "  " + row[3] for row in rows]
    passed = sum(r.status == "pass" for r in results)
    failed_judge = sum(r.status == "judge-failed" for r in results)
    share = f" ({100 * passed / len(results):.0f} %)" if results else ""
    lines += ["", f"pass rate: {passed}/{len(results)}{share}; judge-failed: {failed_judge}"]
    if missing:
        lines.append(f"{len(missing)} pair(s) of the set have no record: {', '.join(missing)}")
    return "\n".join(lines)
