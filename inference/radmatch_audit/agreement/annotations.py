"""What the loaders give `agreement`: radiologists' error counts per annotated pair.

An annotated pair is known by the `pair_id` of the records that score it: each
loader also writes the set's pairs (`pair_rows`) as `radmatch-audit evaluate` input with
those ids, so that a records file joins its annotations by `pair_id` alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Optional


class AnnotationError(ValueError):
    """An annotation file is missing, or not laid out as its set is distributed."""


@dataclass(frozen=True)
class Endpoint:
    """One radiologist-side quantity a metric is correlated with."""

    key: str
    label: str


@dataclass
class Case:
    """One annotated pair: its study, its radiologists' counts per endpoint, its rating."""

    pair_id: str
    study_id: str
    targets: dict[str, float] = field(default_factory=dict)  # endpoint key -> mean count
    rating: Optional[float] = None  # mean 1-5 quality rating (RadPref), higher is better


@dataclass
class AnnotationSet:
    """A benchmark's annotations, ready to join with records on `pair_id`."""

    name: str
    endpoints: list[Endpoint]
    cases: dict[str, Case]
    raters: int
    # pairs of pair_ids of one study the radiologists compared (RadPref: C1 against C2)
    comparisons: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the loader skipped, and why
    rows: list[dict[str, Any]] = field(default_factory=list, repr=False)  # evaluate input

    def pair_rows(self) -> Iterator[dict[str, Any]]:
        """The set's pairs as `radmatch-audit evaluate` JSONL rows (pair_id, study_id, ...)."""
        yield from self.rows


def require_columns(path: str, present: list[str], expected: list[str], what: str) -> None:
    """Fail naming the missing and the unexpected columns of a distributed file."""
    missing = [c for c in expected if c not in present]
    if missing:
        extra = [c for c in present if c not in expected]
        raise AnnotationError(
            f"{path} does not have the columns of {what}: missing {missing}"
            + (f", unexpected {extra}" if extra else "")
            + f"; expected {expected}. Pass the file as distributed, unmodified."
        )
