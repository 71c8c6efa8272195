"""Records as JSON lines: a streaming reader, and a writer that never loses a line.

Reading streams (memory stays flat in the number of records). The writer creates
its file owner-only (0600: records hold report text), flushes every line, and can
resume a file an interrupted run left: complete records are kept, a torn last line
is dropped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, TextIO, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from radmatch import records as _records
from radmatch.records import Record, migrate

PRIVATE_FILE_MODE = 0o600


class _SkippedScores(BaseModel):
    """Stored scores read by recompute: an object is stepped over, never built."""

    model_config = ConfigDict(extra="ignore")


class _RecordToRescore(Record):
    """A record whose stored scores are about to be re-derived, so are not read.

    Validating the stored scores would cost as much as the rest of the record; here
    an object in their place is skipped unbuilt (anything else takes the slow path
    of `parse_record`), and the result is turned back into a plain `Record`.
    """

    scores: Optional[_SkippedScores] = None

    def as_record(self) -> Record:
        fields = {**self.__dict__, **(self.__pydantic_extra__ or {}), "scores": None}
        return Record.model_construct(self.model_fields_set - {"scores"}, **fields)


def parse_record(line: Union[str, dict[str, Any]], *, ignore_scores: bool = False) -> Record:
    """Validate one record (a JSON line or a dict), migrating older schema versions.

    With `ignore_scores` the stored scores are not read and the record comes back
    unscored: what recompute does, since it re-derives them.
    """
    if isinstance(line, str):
        try:  # fast path: the current version, validated straight from JSON
            model = _RecordToRescore if ignore_scores else Record
            record = model.model_validate_json(line)
            if record.schema_version == _records.SCHEMA_VERSION:
                return record.as_record() if isinstance(record, _RecordToRescore) else record
        except ValidationError:
            pass  # re-parsed below, so that a version error wins over field errors
        data = json.loads(line)
    else:
        data = line
    if not isinstance(data, dict):
        raise ValueError("a record must be a JSON object")
    if ignore_scores:
        data = {key: value for key, value in data.items() if key != "scores"}
    return Record.model_validate(migrate(data))


@dataclass
class BadLine:
    """A line that could not be read as a record: where and why."""

    line_no: int
    message: str
    raw: str


def describe_error(exc: Exception) -> str:
    """One short message naming the field at fault."""
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:3]:
            field = ".".join(str(p) for p in err["loc"]) or "(record)"
            parts.append(f"field '{field}': {err['msg']}")
        more = len(exc.errors()) - 3
        return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON: {exc.msg} at column {exc.colno}"
    return str(exc)


def iter_lines(source: Union[str, Path, TextIO]) -> Iterator[tuple[int, Union[Record, BadLine]]]:
    """Yield (line_no, Record or BadLine) for each non-blank line, streaming."""
    handle = open(source, encoding="utf-8") if isinstance(source, (str, Path)) else source
    try:
        for line_no, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                yield line_no, parse_record(raw)
            except (ValueError, ValidationError) as exc:
                yield line_no, BadLine(line_no, describe_error(exc), raw)
    finally:
        if handle is not source:
            handle.close()


def read_records(source: Union[str, Path, TextIO]) -> Iterator[Record]:
    """Yield the records of a JSONL file; raise ValueError on the first bad line."""
    for line_no, item in iter_lines(source):
        if isinstance(item, BadLine):
            raise ValueError(f"line {line_no}: {item.message}")
        yield item


def open_private(path: Union[str, Path], mode: str) -> TextIO:
    """Open a text file for writing ("w" or "a"), created owner-only (0600)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    if mode == "w":
        os.fchmod(fd, PRIVATE_FILE_MODE)  # an existing file is rewritten private too
    return os.fdopen(fd, mode, encoding="utf-8")


def kept_for_resume(path: Union[str, Path]) -> dict[str, int]:
    """pair_id -> number of the line holding its record, for each record worth keeping.

    Scored records and records of bad input are kept (the last one of a pair_id
    wins); a pair whose judge failed is evaluated again; a torn last line or an
    unreadable one is dropped. Only ids and line numbers are held, never records.
    """
    kept: dict[str, int] = {}
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return kept
    with handle:
        for line_no, raw in enumerate(handle):
            if not raw.endswith("\n"):
                break  # torn by an interrupted write
            try:
                record = parse_record(raw, ignore_scores=False)
            except (ValueError, ValidationError):
                continue
            if record.scores is not None or (record.failure and record.failure.stage == "input"):
                kept[record.pair_id] = line_no
            else:
                kept.pop(record.pair_id, None)
    return kept


def _keep_lines(path: Path, line_numbers: set[int]) -> None:
    """Rewrite `path` with only the given lines, atomically (a crash leaves it whole)."""
    tmp = path.with_name(path.name + ".resume-tmp")
    with open(path, encoding="utf-8", errors="surrogateescape") as src, open_private(tmp, "w") as dst:
        for line_no, raw in enumerate(src):
            if line_no in line_numbers:
                dst.write(raw)
    os.replace(tmp, path)


class RecordWriter:
    """Write records to a JSONL file, one flushed line each, owner-only.

    `resume=True` keeps what `kept_for_resume` keeps (rewritten in place, atomically)
    and appends after it; `done` names the pairs it holds.
    """

    def __init__(self, path: Union[str, Path], *, append: bool = False, resume: bool = False) -> None:
        self.path = Path(path)
        self.done: set[str] = set()
        if resume and self.path.exists():
            kept = kept_for_resume(self.path)
            _keep_lines(self.path, set(kept.values()))
            self.done = set(kept)
        self._handle = open_private(self.path, "a" if append or resume else "w")

    def write(self, record: Record) -> None:
        self._handle.write(record.to_json() + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
