"""The clinical threshold table of docs/scoring.md section 4 step 6, read once from package data.

It lives outside `radmatch.scoring` because the answer schemas need its quantity names
(a closed vocabulary) and the scoring core imports the schemas.

>>> CLINICAL_THRESHOLDS["ascending_aorta_diameter"].thresholds
(40.0, 55.0)
>>> CLINICAL_THRESHOLDS["ascending_aorta_diameter"].meanings
('dilated', 'surgical repair threshold')
>>> QUANTITIES[0]
'cardiothoracic_ratio'
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

TABLE_FILE = "clinical_thresholds.csv"


@dataclass(frozen=True)
class ClinicalQuantity:
    """One row of the table: values of this quantity are compared in `unit` (mm or fraction)."""

    quantity: str
    category: str  # "size" or "ratio": the measurement category the quantity belongs to
    unit: str  # "mm" for sizes, "fraction" for ratios
    thresholds: tuple[float, ...]
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


def _load() -> dict[str, ClinicalQuantity]:
    text = resources.files(__package__).joinpath(TABLE_FILE).read_text(encoding="utf-8")
    table = {}
    for row in csv.DictReader(text.splitlines()):
        table[row["quantity"]] = ClinicalQuantity(
            quantity=row["quantity"],
            category=row["category"],
            unit=row["unit"],
            thresholds=tuple(sorted(float(t) for t in row["thresholds"].split())),
            meaning=row["meaning"],
        )
    return table


CLINICAL_THRESHOLDS: dict[str, ClinicalQuantity] = _load()
QUANTITIES: tuple[str, ...] = tuple(CLINICAL_THRESHOLDS)
