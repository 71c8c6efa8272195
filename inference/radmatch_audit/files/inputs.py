"""Pairs to evaluate from JSONL, CSV or a `datasets` dataset saved on disk.

Column names are configurable; defaults: reference, candidate, indication, study_id,
modality, pair_id. A file that cannot hold pairs at all (unreadable, a CSV or dataset
without the reference or candidate column, JSON lines none of whose first rows has one,
CSV content in a JSON lines file) raises `InputError` at the first row, and
`check_input` raises it before anything is loaded.
A row that cannot become a pair (bad JSON, bad UTF-8, a missing or non-text value) is
yielded as a `RowProblem` naming the row, with the row's own pair_id when it has one,
so that the run goes on and the row still gets a record.
"""

from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, Union

from radmatch_audit.files.paths import install_command
from radmatch_audit.core.records import PairInput

DEFAULT_COLUMNS = {
    "reference": "reference",
    "candidate": "candidate",
    "indication": "indication",
    "study_id": "study_id",
    "modality": "modality",
    "pair_id": "pair_id",
}
REQUIRED = ("reference", "candidate")
# JSON lines read ahead for the whole-file checks: the columns, and CSV under a .jsonl name
HEAD_LINES = 20


class InputError(ValueError):
    """The input file as a whole cannot be read as pairs."""


@dataclass
class RowProblem:
    row: str  # "line 3", "row 7"
    message: str
    pair_id: Optional[str] = None
    inputs: dict[str, Any] = field(default_factory=dict)  # the row's readable text values


# the longest CSV field read (characters): far beyond any report (Python's default, 131,072,
# is not), still a bound on what one bad row can make the reader hold
CSV_FIELD_LIMIT = 1 << 26


def _has_bad_bytes(value: str) -> bool:
    """True when `value` holds bytes that were not UTF-8 (decoded with surrogateescape)."""
    return any("\udc80" <= ch <= "\udcff" for ch in value)


def _text_problem(column: str, value: str) -> Optional[str]:
    """Why `value` is not text that a records file can hold, or None."""
    if value.isascii() or not _SURROGATE.search(value):
        return None
    if _has_bad_bytes(value):
        return f"column '{column}' is not valid UTF-8 text"
    return f"column '{column}' holds a lone surrogate escape (\\ud800 to \\udfff), which is not text"


_SURROGATE = re.compile("[\ud800-\udfff]")


def _pair_from_row(row: dict[str, Any], columns: dict[str, str], where: str) -> Union[PairInput, RowProblem]:
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, column in columns.items():
        value = row.get(column)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and name in ("pair_id", "study_id"):
            value = str(value)
        if value is not None and not isinstance(value, str):
            problems.append(f"column '{column}' must be text, got {type(value).__name__}")
            continue
        problem = None if value is None else _text_problem(column, value)
        if problem:
            problems.append(problem)
            continue
        if value == "" and name not in REQUIRED:
            value = None
        values[name] = value
    for name in REQUIRED:
        if name in values and values[name] is None:
            problems.append(f"column '{columns[name]}' is missing")
    if not problems:
        pair = PairInput(**values)
        try:
            pair.check(values.get("pair_id") or where)
            return pair
        except ValueError as exc:
            problems.append(str(exc).split(": ", 1)[1])
    known = {k: v for k, v in values.items() if v is not None and k != "pair_id"}
    return RowProblem(where, "; ".join(problems), values.get("pair_id"), known)


def read_pairs(
    source: Union[str, Path], *, columns: Optional[dict[str, str]] = None, split: Optional[str] = None
) -> Iterator[tuple[str, Union[PairInput, RowProblem]]]:
    """Yield (where, pair or problem) from a .jsonl/.json lines file, a .csv, or a datasets folder.

    Raises InputError at the first `next()` when the file as a whole is unusable.
    """
    cols = {**DEFAULT_COLUMNS, **(columns or {})}
    path = Path(source)
    if not path.exists():
        raise InputError(f"cannot read {source}: no such file or directory")
    if path.is_dir():
        yield from _read_dataset(path, cols, split)
    elif path.suffix.lower() == ".csv":
        yield from _read_csv(path, cols)
    else:
        yield from _read_jsonl(path, cols)


def check_input(
    source: Union[str, Path], *, columns: Optional[dict[str, str]] = None, split: Optional[str] = None
) -> None:
    """Raise InputError when the file as a whole cannot hold pairs (missing, wrong
    columns, CSV in a .jsonl): call it before loading a judge. Reads only the start."""
    next(iter(read_pairs(source, columns=columns, split=split)), None)


def _check_jsonl_head(path: Path, cols: dict[str, str]) -> None:
    """Refuse a JSON lines file whose first lines are CSV, or whose first objects have
    none of them the reference or candidate column: every row would fail alike."""
    head: list[str] = []
    with open(path, "rb") as handle:
        for raw in handle:
            if raw.strip():
                head.append(raw.decode("utf-8", errors="replace").strip())
            if len(head) >= HEAD_LINES:
                break
    objects = []
    for line in head:
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(row, dict):
            objects.append(row)
    if not objects:
        header = _csv_header(head)
        if header:  # column names are shown; a first line of report text is not
            shown = ", ".join(map(repr, header)) if all(map(_COLUMN_NAME.match, header)) else None
            raise InputError(
                f"{path} looks like CSV, not JSON lines: its first line has {len(header)} "
                f"comma-separated fields{f' ({shown})' if shown else ''} and none of its first "
                f"lines is a JSON object; name it .csv to read it as CSV"
            )
        return
    keys = list(dict.fromkeys(key for row in objects for key in row))
    _require_columns(path, keys, cols, where=f" in its first {len(objects)} JSON lines")


_COLUMN_NAME = re.compile(r"[A-Za-z_][\w.-]{0,39}$")


def _csv_header(lines: list[str]) -> Optional[list[str]]:
    """The first line's fields when it reads as a CSV header (two or more named fields)."""
    if not lines or lines[0][:1] in "{[":
        return None
    header = next(csv.reader(lines[:1]))
    return header if len(header) >= 2 and all(field.strip() for field in header) else None


def _read_jsonl(path: Path, cols: dict[str, str]) -> Iterator[tuple[str, Union[PairInput, RowProblem]]]:
    _check_jsonl_head(path, cols)
    with open(path, "rb") as handle:
        for i, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            where = f"line {i}"
            line = raw.decode("utf-8", errors="surrogateescape")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield where, RowProblem(where, f"invalid JSON ({exc.msg} at column {exc.colno})")
                continue
            except RecursionError:
                yield where, RowProblem(where, "the line is nested too deeply to be a pair")
                continue
            if not isinstance(row, dict):
                yield where, RowProblem(where, f"a line must be a JSON object, got {type(row).__name__}")
                continue
            yield where, _pair_from_row(row, cols, where)


def _read_csv(path: Path, cols: dict[str, str]) -> Iterator[tuple[str, Union[PairInput, RowProblem]]]:
    csv.field_size_limit(CSV_FIELD_LIMIT)  # (the module's limit is process-wide)
    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as handle:
        reader = csv.DictReader(handle)
        try:
            _require_columns(path, reader.fieldnames or [], cols)
            for row in reader:
                where = f"line {reader.line_num}"
                yield where, _pair_from_row(row, cols, where)
        except csv.Error as exc:  # a field past the limit, a NUL: the reader cannot go on
            raise InputError(
                f"{path}: the row at line {reader.line_num + 1} cannot be read as CSV ({exc}; "
                f"a field may hold at most {csv.field_size_limit():,} characters)"
            ) from None


def _require_columns(path: Path, present: list[str], cols: dict[str, str], where: str = "") -> None:
    missing = [cols[name] for name in REQUIRED if cols[name] not in present]
    if missing:
        flags = " and ".join(f"--{name}-column NAME" for name in REQUIRED if cols[name] in missing)
        raise InputError(
            f"{path} has no column {', '.join(repr(m) for m in missing)} (columns found{where}: "
            f"{', '.join(map(repr, present)) or 'none'}); name the right ones with {flags}"
        )


def _read_dataset(path: Path, cols: dict[str, str], split: Optional[str]):
    try:
        import datasets
    except ImportError:
        raise InputError(
            f"{path} is a folder, read as a saved dataset, which needs `datasets`: "
            f"{install_command('metric')}"
        ) from None
    try:
        data = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError) as exc:
        raise InputError(f"{path} is a folder but not a saved `datasets` dataset ({exc})") from None
    if isinstance(data, datasets.DatasetDict):
        if split is None:
            if len(data) != 1:
                raise InputError(f"{path} has splits {list(data)}; choose one with --split")
            split = next(iter(data))
        if split not in data:
            raise InputError(f"{path} has no split {split!r}; its splits: {list(data)}")
        data = data[split]
    _require_columns(path, list(data.column_names), cols)
    for i, row in enumerate(data):
        where = f"row {i}"
        yield where, _pair_from_row(row, cols, where)
