"""The clinical threshold table of docs/scoring.md section 4 step 6, read once from package data.

It lives outside `radmatch_audit.scoring` because the answer schemas need its quantity names
(a closed vocabulary) and the scoring core imports the schemas.

>>> CLINICAL_THRESHOLDS["ascending_aorta_diameter"].thresholds
(40.0, 55.0)
>>> CLINICAL_THRESHOLDS["solid_nodule_diameter"].sides
('>=', '>')
>>> CLINICAL_THRESHOLDS["ascending_aorta_diameter"].meanings
('dilated', 'surgical repair threshold')
>>> CLINICAL_THRESHOLDS["cardiothoracic_ratio"].is_above(0.50, 0.50)
False
>>> CLINICAL_THRESHOLDS["lymph_node_short_axis"].is_above(10.0, 10.0)
True
>>> QUANTITIES[0]
'cardiothoracic_ratio'
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

TABLE_FILE = "clinical_thresholds.csv"
# Which side a value equal to the threshold lies on (docs/scoring.md section 4 step 6):
# ">=": at the threshold is above it (a 6 mm nodule is in Fleischner's 6-8 mm group);
# ">": at the threshold is below it (a cardiothoracic ratio of 0.50 is not cardiomegaly).
SIDES = (">=", ">")


@dataclass(frozen=True)
class ClinicalQuantity:
    """One row of the table: values of this quantity are compared in `unit` (mm or fraction)."""

    quantity: str
    category: str  # "size" or "ratio": the measurement category the quantity belongs to
    unit: str  # "mm" for sizes, "fraction" for ratios
    thresholds: tuple[float, ...]
    sides: tuple[str, ...]  # one of SIDES per threshold, in threshold order
    meaning: str

    @property
    def meanings(self) -> tuple[str, ...]:
        """What crossing each threshold means, in threshold order.

        The meaning column gives one ';'-separated part per threshold ("dilated;
        surgical repair threshold"), or one text for them all.
        """
        parts = tuple(part.strip() for part in self.meaning.split(";"))
        if len(parts) == len(self.thresholds):
            return parts
        return (self.meaning,) * len(self.thresholds)

    def is_above(self, value: float, threshold: float) -> bool:
        """Whether `value` (in this quantity's unit) lies above `threshold`, by its side."""
        side = self.sides[self.thresholds.index(threshold)]
        return value >= threshold if side == ">=" else value > threshold


def _load() -> dict[str, ClinicalQuantity]:
    return parse_table(resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8"))


def parse_table(text: str) -> dict[str, ClinicalQuantity]:
    """The table from the CSV text of TABLE_FILE; a bad row is a ValueError naming its line."""
    table = {}
    for line_no, row in enumerate(csv.DictReader(text.splitlines()), 2):
        values = [float(t) for t in row["thresholds"].split()]
        sides = row["sides"].split()
        if len(sides) != len(values) or not set(sides) <= set(SIDES):
            raise ValueError(
                f"{TABLE_FILE} line {line_no}: give one side ({' or '.join(SIDES)}) "
                f"per threshold; got {row['sides']!r} for {row['thresholds']!r}"
            )
        ordered = sorted(zip(values, sides))
        table[row["quantity"]] = ClinicalQuantity(
            quantity=row["quantity"],
            category=row["category"],
            unit=row["unit"],
            thresholds=tuple(t for t, _ in ordered),
            sides=tuple(s for _, s in ordered),
            meaning=row["meaning"],
        )
    return table


CLINICAL_THRESHOLDS: dict[str, ClinicalQuantity] = _load()
QUANTITIES: tuple[str, ...] = tuple(CLINICAL_THRESHOLDS)
