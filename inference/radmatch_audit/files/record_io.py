"""Records as JSON lines: a streaming reader, and a writer that never loses a line.

Reading streams (memory stays flat in the number of records). The writer creates
its file owner-only (0600: records hold report text), flushes every line, and can
resume a file an interrupted run left: complete records are kept, a torn last line
is dropped. A run that writes a file anew or resumes it holds an exclusive lock on it
(`flock`) until it ends, so that a second run on the same file is refused, never mixed in.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional, TextIO, Union

from pydantic import BaseModel, ConfigDict, ValidationError

from radmatch_audit.core import records as _records
from radmatch_audit.core.migrations import UnknownSchemaVersion
from radmatch_audit.core.records import Record, migrate

PRIVATE_FILE_MODE = 0o600
# a write that fails for want of room: the disk, a quota, a file size limit
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


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


TOO_DEEP = "the line is nested too deeply to be a record"
LONE_SURROGATE = "it holds a lone surrogate escape (\\ud800 to \\udfff), which is not text"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def loads(raw: str) -> Any:
    """`json.loads`, with a line nested too deeply for Python a ValueError like any bad line."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None


def parse_record(line: Union[str, dict[str, Any]], *, ignore_scores: bool = False) -> Record:
    """Validate one record (a JSON line or a dict), migrating older schema versions.

    With `ignore_scores` the stored scores are not read and the record comes back
    unscored: what recompute does, since it re-derives them. A ValueError names what
    is wrong: a field (NaN and infinity are refused), a lone surrogate (text no file
    can hold), a line nested too deeply.
    """
    try:
        record = _parse_record(line, ignore_scores)
    except RecursionError:
        raise ValueError(TOO_DEEP) from None
    if isinstance(line, str) and _SURROGATE_ESCAPE.search(line):
        try:  # escaped pairs are text; a lone half cannot be written back as UTF-8
            json.dumps(json.loads(line), ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(LONE_SURROGATE) from None
    return record


def _parse_record(line: Union[str, dict[str, Any]], ignore_scores: bool) -> Record:
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


def same_file(a: Union[str, Path], b: Union[str, Path]) -> bool:
    """True when `a` and `b` are one file: the same device and inode when both exist (a
    hard link, a symbolic link, another spelling of the path), else the same resolved path."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return Path(a).resolve() == Path(b).resolve()


def is_regular_or_new(path: Union[str, Path]) -> bool:
    """True for a regular file or a path that does not exist yet (not a device or FIFO)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        return True


def open_private(path: Union[str, Path], mode: str, buffering: int = -1) -> TextIO:
    """Open a text file for writing ("w" or "a"), created owner-only (0600).

    Only a regular file is made owner-only: an output that is a device (/dev/null) or a
    FIFO is written as it is, never chmodded (that would change it for the whole machine).
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode == "a" else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    if mode == "w" and stat.S_ISREG(os.fstat(fd).st_mode):
        os.fchmod(fd, PRIVATE_FILE_MODE)  # an existing file is rewritten private too
    return os.fdopen(fd, mode, buffering=buffering, encoding="utf-8")


def pair_fingerprint(reference: Any, candidate: Any, indication: Any, modality: Any) -> bytes:
    """A digest of what a record was evaluated from: a changed input row has another."""
    text = json.dumps([reference or "", candidate or "", indication, modality], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def record_fingerprint(record: Record) -> bytes:
    return pair_fingerprint(record.reference, record.candidate, record.indication, record.modality)


@dataclass
class Resumed:
    """What `--resume` kept of a records file: line numbers of the kept records, the
    pairs they finish, how many records were of a changed input row (evaluated again)
    and which pairs the input no longer has (kept in the file, not counted)."""

    lines: dict[str, int]
    done: set[str]
    changed: int = 0
    not_in_input: set[str] = field(default_factory=set)


def kept_for_resume(path: Union[str, Path], inputs: Optional[dict[str, bytes]] = None) -> Resumed:
    """The records worth keeping, by pair_id, with the number of the line holding each.

    Scored records and records of bad input are kept (the last one of a pair_id
    wins); a pair whose judge failed is evaluated again; a torn last line or an
    unreadable one is dropped. With `inputs` (pair_id -> `pair_fingerprint` of its input
    row), a record whose reference, candidate, indication or modality differs from its
    row is dropped too (evaluated again), and a record of a pair not in `inputs` is kept
    but not done. Only ids, digests and line numbers are held, never records.

    Raises NewerRecords at a record of a newer format: dropping it would lose it.
    """
    kept: dict[str, int] = {}
    changed: set[str] = set()
    try:
        handle = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return Resumed(kept, set())
    with handle:
        for line_no, raw in enumerate(handle):
            if not raw.endswith("\n"):
                break  # torn by an interrupted write
            try:
                record = parse_record(raw, ignore_scores=False)
            except UnknownSchemaVersion as exc:
                if exc.newer:
                    raise NewerRecords(path, line_no + 1, exc) from None
                continue
            except (ValueError, ValidationError):
                continue
            pid = record.pair_id
            done = record.scores is not None or (record.failure and record.failure.stage == "input")
            if done and inputs is not None and pid in inputs and inputs[pid] != record_fingerprint(record):
                changed.add(pid)
                done = False
            if done:
                kept[pid] = line_no
                changed.discard(pid)
            else:
                kept.pop(pid, None)
    if inputs is None:
        return Resumed(kept, set(kept))
    return Resumed(kept, {p for p in kept if p in inputs}, len(changed), {p for p in kept if p not in inputs})


class RecordsWriteError(Exception):
    """Writing the records file failed (a full disk, a quota, a file size limit)."""

    def __init__(self, path: Path, exc: OSError) -> None:
        why = exc.strerror or type(exc).__name__
        fix = "make room" if exc.errno in WRITE_ERRNOS else "correct that"
        super().__init__(
            f"writing the records to {path} failed ({why}); the records written before "
            f"are complete: {fix} and run the same command with --resume to go on"
        )
        self.errno = exc.errno


class RecordsRefused(Exception):
    """The records file must not be written as asked; the message says why (one line)."""


class NewerRecords(RecordsRefused):
    """`--resume` met a record of a newer format, which it would drop."""

    def __init__(self, path: Union[str, Path], line_no: int, exc: UnknownSchemaVersion) -> None:
        super().__init__(
            f"{path}: line {line_no} holds a record of a newer format ({str(exc).split(' (')[0]}), "
            "which --resume would drop; resume it with the radmatch that wrote it, or name another -o file"
        )


class RecordsInUse(RecordsRefused):
    """Another run holds the records file's lock."""

    def __init__(self, path: Union[str, Path], pid: Optional[int]) -> None:
        run = f"another radmatch-audit run (pid {pid})" if pid else "another radmatch-audit run"
        super().__init__(f"{path} is being written by {run}; wait for it to end, or name another -o file")


def _lock_holder(fd: int) -> Optional[int]:
    """The process holding a `flock` on fd's file, from /proc/locks (Linux), or None."""
    st = os.fstat(fd)
    where = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    for line in lines:  # "1: FLOCK  ADVISORY  WRITE 4242 fd:01:131090 0 EOF"
        parts = line.split()
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, inode = parts[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == where:
                return int(parts[4])
        except ValueError:
            continue
    return None


def _open_locked(path: Path, *, truncate: bool) -> int:
    """A descriptor of regular file `path` (created 0600) holding an exclusive lock on
    it; the file is truncated only once the lock is ours.

    Raises RecordsInUse when another run holds the lock, or replaced the file meanwhile.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RecordsInUse(path, _lock_holder(fd)) from None
        if not _is_open_at(fd, path):  # a resuming run swapped the file in between
            raise RecordsInUse(path, None)
        if truncate:
            os.ftruncate(fd, 0)
            os.fchmod(fd, PRIVATE_FILE_MODE)  # an existing file is rewritten private too
        return fd
    except BaseException:
        os.close(fd)
        raise


def lock_problem(path: Union[str, Path]) -> Optional[str]:
    """Why `path` cannot be written now (another run holds its lock), or None; a look
    before the judge loads. The writer takes the lock itself."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None  # missing, or unreadable: opening it for writing says why
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return str(RecordsInUse(path, _lock_holder(fd)))
        return None
    finally:
        os.close(fd)  # and with it the lock, if it was taken


def _is_open_at(fd: int, path: Path) -> bool:
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def _keep_lines(path: Path, line_numbers: set[int]) -> int:
    """Rewrite `path` with only the given lines, atomically (a crash leaves it whole), and
    return a descriptor that holds the new file's lock. A symbolic link stays: its target
    is rewritten, through a temporary file in the target's own folder."""
    target = Path(os.path.realpath(path))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".resume-tmp")
    try:  # mkstemp creates it 0600
        fcntl.flock(fd, fcntl.LOCK_EX)  # locked before its name is the records file's
        with open(target, encoding="utf-8", errors="surrogateescape") as src, \
                os.fdopen(os.dup(fd), "w", encoding="utf-8", errors="surrogateescape") as dst:
            for line_no, raw in enumerate(src):
                if line_no in line_numbers:
                    dst.write(raw)
        os.replace(tmp, target)
    except BaseException:
        os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    return fd


class RecordWriter:
    """Write records to a JSONL file, one flushed line each, owner-only.

    `resume=True` keeps what `kept_for_resume` keeps (rewritten in place, atomically)
    and appends after it; `resumed.done` (also `done`) names the pairs it holds; with
    `inputs` (pair_id -> `pair_fingerprint`) records of changed rows are dropped. A device
    or FIFO is written as it is and keeps nothing. A failed write raises RecordsWriteError.

    Unless `append` (the metric's `records_path`), the writer holds an exclusive lock on
    a regular file from before it is emptied or rewritten until it is closed: another
    writer raises RecordsInUse. Resuming past a record of a newer format raises NewerRecords.
    """

    def __init__(self, path: Union[str, Path], *, append: bool = False, resume: bool = False,
                 inputs: Optional[dict[str, bytes]] = None) -> None:
        self.path = Path(path)
        self.resumed = Resumed({}, set())
        self._lock: Optional[int] = None
        try:
            if not append and is_regular_or_new(self.path):
                self._lock = self._locked(resume, inputs)
            self._handle = open_private(self.path, "a" if append or self._lock is not None else "w")
        except BaseException as exc:
            self._unlock()
            if isinstance(exc, OSError):  # a full disk, a folder that refuses writing
                raise RecordsWriteError(self.path, exc) from None
            raise
        self.done = self.resumed.done

    def _locked(self, resume: bool, inputs: Optional[dict[str, bytes]]) -> int:
        """The lock, taken before the file is emptied (a new run) or rewritten (resume)."""
        fd = _open_locked(self.path, truncate=not resume)
        if not resume:
            return fd
        try:
            self.resumed = kept_for_resume(self.path, inputs)
            kept = _keep_lines(self.path, set(self.resumed.lines.values()))
        finally:
            os.close(fd)  # the old file's lock: the new file's is held already
        return kept

    def _unlock(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def write(self, record: Record) -> None:
        try:
            self._handle.write(record.to_json() + "\n")
            self._handle.flush()
        except OSError as exc:
            raise RecordsWriteError(self.path, exc) from None

    def close(self) -> None:
        try:
            self._handle.close()
        except OSError as exc:
            raise RecordsWriteError(self.path, exc) from None
        finally:
            self._unlock()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
