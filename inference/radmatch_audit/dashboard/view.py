"""The dashboard's view model: records -> the data the page shows, as plain JSON values.

Nothing here knows HTML: `dashboard.build` embeds this data in the page, whose script
renders it.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from radmatch_audit.core.control_strings import restore_markers
from radmatch_audit.core.records import Record
from radmatch_audit.core.schemas import unit_key
from radmatch_audit.judges.judge_notice import is_embedded_small
from radmatch_audit.read.reading import RecordsRead, read_file
from radmatch_audit.scoring.results import SUBSETS, as_dict, vocabularies
from radmatch_audit.scoring.score import (
    QuoteFinder,
    is_unaddressed_negative,
    normalise_text,
    normalise_with_positions,
    unit_subsets,
)

PathLike = str | Path
_JUDGE_MAPS = ("prompt_version", "exemplars_used")  # stage -> value

# a unit's subsets as bit flags, in SUBSETS order: what the page's subset filter tests
SUBSET_BITS = {name: 1 << i for i, name in enumerate(SUBSETS)}
_ID_RE = re.compile(r"(?<![\w])((?:gt|p)_\d+)(?![\w])")
# a sentence: up to a full stop, question or exclamation mark followed by white space
# (so "4.5 cm" stays whole), or up to a line break
_SENTENCE = re.compile(r"[^\n]+?(?:[.!?](?=\s|$)|(?=\n)|$)")


def page_data(records_path: PathLike, compare_path: PathLike | None = None) -> dict[str, Any]:
    """What the page shows of `records_path`: the corpus summary, which judges answered,
    one view per pair (`pair_view`), the lines that could not be read and, with
    `compare_path` (records of the same pairs from another system or judge), the compare
    block (`compare["summary_b"]` is that file's summary)."""
    from radmatch_audit.read.corpus import summarize  # the corpus aggregation owns the numbers

    read = read_file(records_path)  # a bad line is skipped and listed, as `summary` does
    bad = _bad_lines(read)
    latest = read.latest()
    pairs = [pair_view(r) for r in latest]
    compare = None
    if compare_path is not None:
        other = read_file(compare_path)
        bad += [f"{Path(compare_path).name}: {line}" for line in _bad_lines(other)]
        other_latest = other.latest()
        compare = _compare_block(pairs, other_latest, summarize(other.records).to_dict())
        compare["label_a"], compare["label_b"] = _labels(records_path, compare_path)
        compare["judges_b"] = judges_of(other_latest)
        compare["stats"] = _paired_stats(latest, other_latest)
    return {
        "source": Path(records_path).name,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "summary": summarize(read.records).to_dict(),
        "judges": judges_of(latest),
        "pairs": pairs,
        "compare": compare,
        "bad_lines": bad,
        # the page takes every enum from here, never from a list of its own
        "vocabulary": {**vocabularies(), "subset_bits": SUBSET_BITS},
    }


def pair_view(record: Record) -> dict[str, Any]:
    """What the page needs of one record: table fields plus the pair's detail."""
    reference = unicodedata.normalize("NFC", record.reference)
    candidate = unicodedata.normalize("NFC", record.candidate)
    stages = record.stages
    scores = record.scores
    gt = list(stages.reference_findings or [])
    pred = list(stages.candidate_findings or [])

    units = _ordered_units(scores.units if scores else [], gt, pred)
    unit_of = {fid: u["index"] for u in units for fid in u["gt_ids"] + u["pred_ids"]}
    repairs = list(record.repairs)
    repair_ids = [(r, set(_ID_RE.findall(r))) for r in repairs]
    reasons = _row_reasons(record)
    for unit in units:
        ids = set(unit["gt_ids"]) | set(unit["pred_ids"])
        unit["repairs"] = [r for r, mentioned in repair_ids if ids & mentioned]
        keys = (f"{row['pred_id']}|{row['gt_id']}" for row in unit["rows"])
        unit["reasons"] = {k: reasons[k] for k in keys if k in reasons}

    findings = []
    spans: dict[str, list[list[Any]]] = {"reference": [], "candidate": []}
    unquoted: dict[str, list[list[int]]] = {"reference": [], "candidate": []}
    extracted = {"reference": stages.reference_findings is not None,
                 "candidate": stages.candidate_findings is not None}
    for side, side_findings, text in (("reference", gt, reference), ("candidate", pred, candidate)):
        claimed: set[tuple[int, int]] = set()
        # "located" is the scoring core's attribution test, on the text it was scored on
        attributed = QuoteFinder(getattr(record, side)).attributes
        for f in side_findings:
            located = locate_evidence(text, f.evidence, claimed)
            spans[side].extend([s, e, f.id] for s, e in located)
            findings.append(
                {
                    "id": f.id,
                    "side": side,
                    "text": f.text,
                    "status": f.clinical_status,
                    "significance": f.clinical_significance,
                    "comparison": f.comparison,
                    "measurements": [m.model_dump(mode="json") for m in f.measurements],
                    "evidence": list(f.evidence),
                    "located": attributed(f.evidence),
                    "unit": unit_of.get(f.id),
                }
            )
        if extracted[side]:  # only where the findings of that report were extracted
            unquoted[side] = unquoted_sentences(text, spans[side])

    view: dict[str, Any] = {
        "id": record.pair_id,
        "study": record.study_id,
        "modality": record.modality,
        "error": record.error,
        # stage, cause, attempts, elapsed_s: why the pair has no scores
        "failure": record.failure.model_dump(mode="json") if record.failure is not None else None,
        "scored": scores is not None,
        "ae": scores.actionable_errors if scores else None,
        # the error adjudication's count (None unless it stands) and its state
        "se": scores.significant_errors if scores else None,
        "adjudication": scores.adjudication if scores else None,
        "outcomes": dict(scores.outcomes) if scores else None,
        "safety": (
            {tier: as_dict(ratio) for tier, ratio in scores.safety.items()}
            if scores
            else None
        ),
        "attribution": as_dict(scores.attribution) if scores else None,
        # one [outcome, tier, subset bits] per unit: what the table filters on
        "sig": [[u["outcome"], u["tier"], u["subset_bits"]] for u in units],
        "detail": {
            "reference": reference,
            "candidate": candidate,
            "indication": record.indication,
            "findings": findings,
            "spans": spans,
            "unquoted": unquoted,
            "units": units,
            "repairs": repairs,
            "adjudication": adjudication_view(record, units),
            "flags": list(record.flags) + _bidi_flag(record),
            # prompt_version and exemplars_used stay stage -> value maps: the page lists them
            "judge": {
                str(k): v if k in _JUDGE_MAPS and isinstance(v, dict) else _scalar(v)
                for k, v in record.judge.model_dump().items()
            },
        },
    }
    return view


def adjudication_view(record: Record, units: list[dict[str, Any]]) -> dict[str, Any]:
    """The pair's error adjudication for the page: its state, its failure, the errors it
    listed that no unit holds; each unit it answered gains its `adjudication_reasoning`.

    The reasoning is shown only while the adjudication stands ("current"): a stale answer
    was given about other units and is not attached to these."""
    stage = record.stages.adjudication
    state = record.scores.adjudication if record.scores else None
    view: dict[str, Any] = {"state": state, "error": stage.error if stage else None, "unlisted": []}
    if state != "current" or stage is None or stage.answer is None:
        return view
    number_of = {shown.key(): n for n, shown in enumerate(stage.units, 1)}
    reasoning = {entry.unit: entry.reasoning for entry in stage.answer.units}
    for unit in units:
        key = unit_key(unit["outcome"], unit["gt_ids"], unit["pred_ids"])
        if key in number_of:
            unit["adjudication_reasoning"] = reasoning.get(number_of[key], "")
    view["unlisted"] = [error.description for error in stage.answer.unlisted]
    return view


_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f]")
BIDI_FLAG = ("bidirectional control characters in the text, shown as marks such as "
             "\u27e8U+202E\u27e9: the text reads differently from its drawn order")


def _bidi_flag(record: Record) -> list[str]:
    """The flag for a pair whose text holds bidirectional controls (the page shows them)."""
    texts = [record.reference, record.candidate, record.indication or ""]
    return [BIDI_FLAG] if any(_BIDI.search(t) for t in texts) else []


def unquoted_sentences(text: str, spans: Iterable[Sequence[Any]]) -> list[list[int]]:
    """[start, end] of each sentence of `text` that no evidence span overlaps.

    Evidence quotes are verbatim substrings of the report, so a sentence no finding
    quotes is where extraction may have missed something. A sentence is cut at a full
    stop, question or exclamation mark followed by white space, or at a line break;
    a header ("FINDINGS:") or a piece without letters or digits is not counted.
    """
    covered = sorted((int(s[0]), int(s[1])) for s in spans)
    out = []
    for match in _SENTENCE.finditer(text):
        piece = match.group(0)
        start = match.start() + (len(piece) - len(piece.lstrip()))
        end = match.start() + len(piece.rstrip())
        sentence = text[start:end]
        if end <= start or not any(ch.isalnum() for ch in sentence) or sentence.endswith(":"):
            continue
        if not any(s < end and e > start for s, e in covered):
            out.append([start, end])
    return out


def judges_of(records: Iterable[Record]) -> list[dict[str, Any]]:
    """Which judges answered, as {backend, model, pairs, small}, most pairs first
    (pairs whose records name no judge are not counted).

    `small` marks the embedded small judge (radmatch_audit.judges.smollm): its scores only exercise
    the pipeline, and the page says so."""
    counts: dict[tuple[str, str], int] = {}
    for record in records:
        key = (record.judge.backend or "", record.judge.model or "")
        if key != ("", ""):  # a pair that failed before any judge answered names none
            counts[key] = counts.get(key, 0) + 1
    return [
        {"backend": backend, "model": model, "pairs": n,
         "small": is_embedded_small(model)}
        for (backend, model), n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]


def locate_evidence(
    text: str, quotes: Iterable[str], claimed: set[tuple[int, int]] | None = None
) -> list[tuple[int, int]]:
    """Character spans of `text` where each quote occurs.

    Matching is the scoring core's attribution rule (`normalise_text`: NFC, collapsed
    whitespace, case folding; a quote of a control string the judge saw neutralised is
    looked for as the report has it, `restore_markers`); spans index the NFC form of
    `text`. A quote found more than once takes its first occurrence not already
    `claimed` by another finding (then records it there).
    """
    norm, index = _normalised_with_positions(text)
    found = []
    for quote in quotes:
        span = _first_span(norm, index, normalise_text(quote), claimed)
        restored = restore_markers(quote)
        if span is None and restored is not quote:
            span = _first_span(norm, index, normalise_text(restored), claimed)
        if span is not None:
            found.append(span)
            if claimed is not None:
                claimed.add(span)
    return found


def _first_span(
    norm: str, index: Sequence[int], q: str, claimed: set[tuple[int, int]] | None
) -> tuple[int, int] | None:
    """The span of the first occurrence of `q` in `norm` not `claimed`, else of the first."""
    if not q:
        return None
    first = None
    pos = norm.find(q)
    while pos != -1:
        span = (index[pos], index[pos + len(q) - 1] + 1)
        if first is None:
            first = span
        if claimed is None or span not in claimed:
            return span
        pos = norm.find(q, pos + 1)
    return first


# one report's normalised text serves the evidence of all its findings
_normalised_with_positions = lru_cache(maxsize=8)(normalise_with_positions)


def _bad_lines(read: RecordsRead) -> list[str]:
    return [f"line {item.line_no} skipped: {item.message}" for item in read.bad]


def _ordered_units(units: list[Any], gt: list[Any], pred: list[Any]) -> list[dict[str, Any]]:
    """Units as dicts in reading order (by first reference finding, then candidate)."""
    gt_pos = {f.id: i for i, f in enumerate(gt)}
    pred_pos = {f.id: i for i, f in enumerate(pred)}
    by_id = {f.id: f for f in gt + pred}
    big = 10**6

    def key(unit: Any) -> tuple[int, int, int]:
        g = min((gt_pos.get(i, big) for i in unit.gt_ids), default=big)
        p = min((pred_pos.get(i, big) for i in unit.pred_ids), default=big)
        return (unit.kind == "generic", g, p)

    out = []
    for n, unit in enumerate(sorted(units, key=key), 1):
        members = [by_id[i] for i in unit.gt_ids + unit.pred_ids if i in by_id]
        subsets = unit_subsets(unit, members) if members else ()
        bits = sum(SUBSET_BITS[name] for name in subsets)
        item = as_dict(unit)
        # an SPU of normal findings: shown as what it is, not as an error (scoring section 5)
        negative = all(i in by_id for i in unit.pred_ids) and is_unaddressed_negative(unit, by_id)
        item.update(index=n, subset_bits=bits, unaddressed_negative=negative)
        out.append(item)
    return out


def _row_reasons(record: Record) -> dict[str, str]:
    """The judge's matching reasoning per row as given, keyed 'pred_id|gt_id' (first wins)."""
    reasons: dict[str, str] = {}
    matching = record.stages.matching
    for row in matching.matches if matching is not None else []:
        reasons.setdefault(f"{row.pred_id}|{row.gt_id}", row.reasoning)
    return {k: v for k, v in reasons.items() if v}


def _compare_block(
    pairs: list[dict[str, Any]], other: list[Record], summary_b: dict[str, Any]
) -> dict[str, Any]:
    """Attach `ae_b`/`delta` to each pair; count where the compared file does better."""
    by_id = {r.pair_id: r for r in other}
    ids_a = {p["id"] for p in pairs}
    deltas = []
    for pair in pairs:
        rec = by_id.get(pair["id"])
        ae_b = rec.scores.actionable_errors if rec is not None and rec.scores else None
        pair["ae_b"] = ae_b
        pair["in_b"] = rec is not None
        pair["delta"] = ae_b - pair["ae"] if ae_b is not None and pair["ae"] is not None else None
        if pair["delta"] is not None:
            deltas.append(pair["delta"])
    return {
        "summary_b": summary_b,
        "n_common": sum(1 for p in pairs if p["in_b"]),
        "n_only_a": sum(1 for p in pairs if not p["in_b"]),
        "n_only_b": sum(1 for pid in by_id if pid not in ids_a),
        "n_compared": len(deltas),
        "fewer": sum(1 for d in deltas if d < 0),
        "more": sum(1 for d in deltas if d > 0),
        "same": sum(1 for d in deltas if d == 0),
        "mean_delta": sum(deltas) / len(deltas) if deltas else None,
    }


def _paired_stats(a: list[Record], b: list[Record]) -> dict[str, Any]:
    """`radmatch-audit compare`'s numbers (radmatch_audit.read.compare) for the page's compare panel."""
    from radmatch_audit.read.compare import compare_records

    return compare_records(a, b)


def _labels(a: PathLike, b: PathLike) -> tuple[str, str]:
    pa, pb = Path(a), Path(b)
    if pa.name != pb.name:
        return pa.name, pb.name
    return f"{pa.parent.name}/{pa.name}", f"{pb.parent.name}/{pb.name}"


def _scalar(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
