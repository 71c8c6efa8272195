"""The read side of records: one reader for summary, compare, the dashboard and agreement.

Each non-blank line of a records file is a record or a bad line (`BadLine`: its number,
why, the line). A record stored without scores is scored from its stages (the scoring
core's `ensure_scored`); one that cannot be scored is a bad line too. When a pair_id
occurs more than once, the per-pair views keep its last record, in the place of the last.

    reader = RecordReader(path)          # streams: memory stays flat
    summary.extend(reader); reader.bad
    read = read_file(path)               # the whole file: records, bad lines, views
    read.latest(), read.judges()

Reading never stops at a bad line: the caller decides what a bad line means (the CLI
names each on stderr, the dashboard lists them on its page).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, TextIO, Union

from radmatch_audit.files.record_io import BadLine, iter_lines
from radmatch_audit.core.records import JudgeInfo, Record
from radmatch_audit.scoring import ensure_scored

Source = Union[str, Path, TextIO, Iterable[str]]


def scored_lines(source: Source) -> Iterator[Union[Record, BadLine]]:
    """Each non-blank line as a scored Record or a BadLine, streaming."""
    for line_no, item in iter_lines(source):
        if isinstance(item, BadLine):
            yield item
            continue
        try:
            yield ensure_scored(item)
        except ValueError as exc:  # a record without the stages its scores need
            yield BadLine(line_no, str(exc), "")


class RecordReader:
    """The records of a file, streamed; the lines that are not records are set aside in `bad`."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.bad: list[BadLine] = []

    def __iter__(self) -> Iterator[Record]:
        for item in scored_lines(self.source):
            if isinstance(item, BadLine):
                self.bad.append(item)
            else:
                yield item


@dataclass
class RecordsRead:
    """A whole records file: its records in file order and its bad lines."""

    records: list[Record] = field(default_factory=list)
    bad: list[BadLine] = field(default_factory=list)

    def latest(self) -> list[Record]:
        """One record per pair_id, the last one, in the place of the last."""
        return list(last_by_pair(self.records).values())

    def judges(self, *, weights: bool = False) -> set[str]:
        """Which judges answered any record (see `judge_label`)."""
        return judges_of(self.records, weights=weights)


def read_file(source: Source) -> RecordsRead:
    reader = RecordReader(source)
    records = list(reader)
    return RecordsRead(records, reader.bad)


def last_by_pair(records: Iterable[Record]) -> dict[str, Record]:
    """pair_id -> its last record, ordered by where each pair's last record stands."""
    latest: dict[str, Record] = {}
    for record in records:
        latest.pop(record.pair_id, None)
        latest[record.pair_id] = record
    return latest


def judge_label(judge: JudgeInfo, *, weights: bool = False) -> str | None:
    """"backend/model" of the judge that answered (None when the record names none);
    with `weights`, the weights the server said it loaded when they are not the model's name."""
    if not (judge.backend or judge.model):
        return None  # a pair that failed before any judge answered names none
    loaded = judge.loaded_model if weights else None
    shown = f" ({loaded})" if loaded and loaded != judge.model else ""
    return f"{judge.backend or '?'}/{judge.model or '?'}{shown}"


def judges_of(records: Iterable[Record], *, weights: bool = False) -> set[str]:
    return {label for record in records if (label := judge_label(record.judge, weights=weights))}
