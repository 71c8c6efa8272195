"""Deterministic repair of the judge's matching answer (docs/scoring.md section 2).

The record keeps the answer as the judge gave it; every change made here is
written, as a short sentence, into the record's `repairs`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache

from radmatch_audit.core.schemas import MatchingAnswer, MatchRow
from radmatch_audit.scoring.results import UnitRow

_ID = re.compile(r"(.*?)(\d+)")
SCOPE_STRENGTH = {"direct": 3, "aggregate": 2, "generic": 1}


@lru_cache(maxsize=8192)
def id_key(finding_id: str) -> tuple[str, int, str]:
    """Natural sort key: gt_2 before gt_10."""
    match = _ID.fullmatch(finding_id)
    if match:
        return (match.group(1), int(match.group(2)), "")
    return (finding_id, -1, finding_id)


def row_key(row: UnitRow | MatchRow) -> tuple:
    """Canonical row order: by pred id, then gt id, each in natural order."""
    return (id_key(row.pred_id), id_key(row.gt_id))


@dataclass(slots=True)
class RepairedMatching:
    rows: list[UnitRow]
    unmatched_pred: list[str]
    unmatched_gt: list[str]
    repairs: list[str] = field(default_factory=list)


def repair_matching(
    matching: MatchingAnswer, pred_ids: list[str], gt_ids: list[str]
) -> RepairedMatching:
    """Apply repair rules 1-3 and return canonical (sorted) rows and unmatched lists."""
    repairs: list[str] = []
    pred_set, gt_set = set(pred_ids), set(gt_ids)

    # Rule 1: drop rows with unknown ids; collapse duplicates keeping the strongest scope.
    # Rows are taken in canonical order, so repairs and rows never depend on answer order.
    scopes: dict[tuple[str, str], list[str]] = {}
    for row in sorted(matching.matches, key=row_key):
        pred_id, gt_id = row.pred_id, row.gt_id
        if pred_id not in pred_set or gt_id not in gt_set:
            unknown = [i for i, ids in ((pred_id, pred_set), (gt_id, gt_set)) if i not in ids]
            repairs.append(f"dropped row {pred_id}-{gt_id}: unknown id {', '.join(unknown)}")
            continue
        given = scopes.get((pred_id, gt_id))
        if given is None:
            scopes[(pred_id, gt_id)] = [row.match_scope]
        else:
            given.append(row.match_scope)
    best: dict[tuple[str, str], str] = {}  # in canonical row order, as `scopes`
    for pair, given in scopes.items():
        if len(given) == 1:
            best[pair] = given[0]
            continue
        best[pair] = max(given, key=SCOPE_STRENGTH.__getitem__)
        listed = ", ".join(sorted(given, key=SCOPE_STRENGTH.__getitem__, reverse=True))
        repairs.append(
            f"collapsed {len(given)} rows {pair[0]}-{pair[1]} ({listed}) into {best[pair]}"
        )

    # Rule 3: scopes follow cardinality, counted over all surviving rows.
    pred_count: dict[str, int] = {}
    gt_count: dict[str, int] = {}
    for pred_id, gt_id in best:
        pred_count[pred_id] = pred_count.get(pred_id, 0) + 1
        gt_count[gt_id] = gt_count.get(gt_id, 0) + 1
    rows: list[UnitRow] = []
    released: set[str] = set()  # ids freed by a dropped 1:1 generic row
    for (pred_id, gt_id), scope in best.items():
        one_to_one = pred_count[pred_id] == 1 and gt_count[gt_id] == 1
        if one_to_one:
            if scope == "generic":
                repairs.append(
                    f"dropped 1:1 generic row {pred_id}-{gt_id}: generic is never 1:1, "
                    "both findings are unmatched"
                )
                released.update((pred_id, gt_id))
                continue
            if scope == "aggregate":
                repairs.append(f"row {pred_id}-{gt_id} is 1:1: aggregate -> direct")
                scope = "direct"
        elif scope == "direct":
            repairs.append(f"row {pred_id}-{gt_id} is in a 1:N or N:1 binding: direct -> aggregate")
            scope = "aggregate"
        rows.append(UnitRow(pred_id, gt_id, scope))

    # Rule 2: unmatched lists are whatever no row covers.
    unmatched_pred = _reconcile(
        "pred", matching.unmatched_pred, pred_ids, {r.pred_id for r in rows}, released, repairs
    )
    unmatched_gt = _reconcile(
        "gt", matching.unmatched_gt, gt_ids, {r.gt_id for r in rows}, released, repairs
    )
    return RepairedMatching(rows, unmatched_pred, unmatched_gt, repairs)


def _reconcile(
    side: str,
    listed: list[str],
    all_ids: list[str],
    in_rows: set[str],
    released: set[str],
    repairs: list[str],
) -> list[str]:
    listed_set = set(listed)
    for finding_id in sorted(listed_set.difference(all_ids), key=id_key):
        repairs.append(f"removed unknown id {finding_id} from unmatched_{side}")
    for finding_id in sorted(listed_set & in_rows, key=id_key):  # rule 2
        repairs.append(f"removed {finding_id} from unmatched_{side}: it is in a match row")
    if len(listed_set) != len(listed):
        duplicates = sorted((i for i, n in Counter(listed).items() if n > 1), key=id_key)
        for finding_id in duplicates:
            repairs.append(f"removed duplicate {finding_id} from unmatched_{side}")
    unmatched = []
    for finding_id in sorted(all_ids, key=id_key):
        if finding_id in in_rows:
            continue
        if finding_id not in listed_set and finding_id not in released:
            repairs.append(f"{finding_id} is in no row and not in unmatched_{side}: now unmatched")
        unmatched.append(finding_id)
    return unmatched
