"""The audit record (RECORDS.md) and its streaming JSONL reader and writer.

A record is one JSON object per line. Reading streams: memory stays constant in the
number of records. `schema_version` is checked; old versions go through `MIGRATIONS`
(a forward-only list, empty while version 1 is the only one).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TextIO, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from radmatch.schemas import Finding, GradingStage, MatchingAnswer
from radmatch.scoring.results import Scores

SCHEMA_VERSION = 1

# version N -> function turning a version-N dict into a version-(N+1) dict
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


class UnknownSchemaVersion(ValueError):
    pass


class Stages(BaseModel):
    """Stage answers as given by the judge. A stage that did not run is absent (None)."""

    model_config = ConfigDict(extra="allow")

    indication: Optional[str] = None
    reference_findings: Optional[list[Finding]] = None
    candidate_findings: Optional[list[Finding]] = None
    matching: Optional[MatchingAnswer] = None
    grading: Optional[GradingStage] = None


class Record(BaseModel):
    """One evaluated pair: inputs, stage answers, repairs, scores."""

    model_config = ConfigDict(extra="allow")

    schema_version: int = SCHEMA_VERSION
    pair_id: str
    study_id: Optional[str] = None
    modality: Optional[str] = None
    reference: str
    candidate: str
    indication: Optional[str] = None
    stages: Stages = Field(default_factory=Stages)
    repairs: list[str] = Field(default_factory=list)
    judge: dict[str, Any] = Field(default_factory=dict)
    timings_s: dict[str, float] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    error: Optional[str] = None
    scores: Optional[Scores] = None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_json(self) -> str:
        # a stage that did not run is absent; "indication": null means "no indication"
        absent = {k for k in _OPTIONAL_STAGES if getattr(self.stages, k) is None}
        return self.model_dump_json(exclude={"stages": absent} if absent else None)


_OPTIONAL_STAGES = ("reference_findings", "candidate_findings", "matching", "grading")


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a record dict up to SCHEMA_VERSION, or raise UnknownSchemaVersion."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise UnknownSchemaVersion(
            f"schema_version {version!r} is not supported by this radmatch "
            f"(it reads versions 1 to {SCHEMA_VERSION}); upgrade radmatch to read it"
        )
    while version < SCHEMA_VERSION:
        data = MIGRATIONS[version](data)
        version += 1
        data["schema_version"] = version
    return data


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
            if record.schema_version == SCHEMA_VERSION:
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


class RecordWriter:
    """Append records to a JSONL file, one flushed line each (safe to tail or resume)."""

    def __init__(self, path: Union[str, Path], *, append: bool = False) -> None:
        self.path = Path(path)
        self._handle = open(self.path, "a" if append else "w", encoding="utf-8")

    def write(self, record: Record) -> None:
        self._handle.write(record.to_json() + "\n")
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
