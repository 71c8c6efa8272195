"""Pairs to evaluate from JSONL, CSV or a `datasets` dataset saved on disk.

Column names are configurable; defaults: reference, candidate, indication, study_id,
modality, pair_id. A row that cannot become a pair is returned as a RowProblem naming
the row and the problem, so the run goes on and nothing is lost.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from radmatch.pipeline import PairInput

DEFAULT_COLUMNS = {
    "reference": "reference",
    "candidate": "candidate",
    "indication": "indication",
    "study_id": "study_id",
    "modality": "modality",
    "pair_id": "pair_id",
}


@dataclass
class RowProblem:
    row: str  # "line 3", "row 7"
    message: str


def _pair_from_row(row: dict[str, Any], columns: dict[str, str], where: str) -> Union[PairInput, RowProblem]:
    values: dict[str, Any] = {}
    for field, column in columns.items():
        value = row.get(column)
        if value is not None and not isinstance(value, str):
            if field in ("pair_id", "study_id") and isinstance(value, (int, float)):
                value = str(value)
            else:
                return RowProblem(where, f"column '{column}' must be text, got {type(value).__name__}")
        if value == "" and field not in ("reference", "candidate"):
            value = None
        values[field] = value
    for field in ("reference", "candidate"):
        if values[field] is None:
            return RowProblem(where, f"column '{columns[field]}' is missing")
    pair = PairInput(**values)
    try:
        pair.check(0)
    except ValueError as exc:
        return RowProblem(where, str(exc).split(": ", 1)[1])
    return pair


def read_pairs(
    source: Union[str, Path], *, columns: Optional[dict[str, str]] = None, split: Optional[str] = None
) -> Iterator[tuple[str, Union[PairInput, RowProblem]]]:
    """Yield (where, pair or problem) from a .jsonl/.json lines file, a .csv, or a datasets folder."""
    cols = {**DEFAULT_COLUMNS, **(columns or {})}
    path = Path(source)
    if path.is_dir():
        yield from _read_dataset(path, cols, split)
    elif path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as handle:
            for i, row in enumerate(csv.DictReader(handle), 2):  # line 1 is the header
                yield f"line {i}", _pair_from_row(row, cols, f"line {i}")
    else:
        with open(path, encoding="utf-8") as handle:
            for i, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                where = f"line {i}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield where, RowProblem(where, f"invalid JSON: {exc.msg}")
                    continue
                if not isinstance(row, dict):
                    yield where, RowProblem(where, "a line must be a JSON object")
                    continue
                yield where, _pair_from_row(row, cols, where)


def _read_dataset(path: Path, cols: dict[str, str], split: Optional[str]):
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("reading a saved dataset needs `datasets`: pip install 'radmatch[metric]'") from exc
    data = datasets.load_from_disk(str(path))
    if isinstance(data, datasets.DatasetDict):
        if split is None:
            if len(data) != 1:
                raise ValueError(f"{path} has splits {list(data)}; choose one with --split")
            split = next(iter(data))
        data = data[split]
    for i, row in enumerate(data):
        where = f"row {i}"
        yield where, _pair_from_row(row, cols, where)
