"""The study indication, read from a report's own indication section (docs/judge.md rule 14).

The paper asks a judge to copy this section verbatim; copying is not judgement, so
code does it: exactly, at no cost, and one judge call shorter for every pair.

The section starts at the first line that opens with an indication header (any
letter case, then a colon) and ends at the first of: the next section header (one
of SECTIONS: at the start of a line in any case, or anywhere in capitals), a blank
line after its text, or the end of the report. Its lines are joined by single spaces.
"""

from __future__ import annotations

import re
from typing import Optional

INDICATION_NAMES = (
    "indication", "indications", "clinical history", "clinical information", "history",
    "reason for exam", "reason for examination", "comment", "clinical details",
    "clinical context",
)
# What can follow an indication in a radiology report. The indication names are here
# too: a report with both HISTORY: and INDICATION: keeps the first.
SECTIONS = INDICATION_NAMES + (
    "findings", "impression", "impressions", "technique", "comparison", "comparisons",
    "exam", "examination", "procedure", "conclusion", "conclusions", "recommendation",
    "recommendations", "opinion", "result", "results", "report", "views", "view",
    "contrast", "dose", "notification", "study", "summary", "addendum", "diagnosis",
)


def _alternatives(names: tuple[str, ...]) -> str:
    longest_first = sorted(names, key=len, reverse=True)  # "reason for examination" before "reason for exam"
    return "|".join(re.escape(n).replace(r"\ ", r"\s+") for n in longest_first)


INDICATION_HEADER = re.compile(
    rf"^[ \t]*(?:{_alternatives(INDICATION_NAMES)})[ \t]*:", re.IGNORECASE | re.MULTILINE)
_NEXT_AT_LINE_START = re.compile(
    rf"^[ \t]*(?:{_alternatives(SECTIONS)})[ \t]*(?::|$)", re.IGNORECASE | re.MULTILINE)
_NEXT_IN_CAPITALS = re.compile(
    rf"(?<![A-Za-z])(?:{_alternatives(tuple(name.upper() for name in SECTIONS))})[ \t]*:")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")


def read_indication(report: str) -> Optional[str]:
    """The text of the report's indication section, or None when it has none (or it is empty)."""
    header = INDICATION_HEADER.search(report)
    if header is None:
        return None
    rest = report[header.end():]
    first_text = len(rest) - len(rest.lstrip())  # a header alone on its line: text below it
    ends = [len(rest)]
    for pattern in (_NEXT_AT_LINE_START, _NEXT_IN_CAPITALS, _BLANK_LINE):
        found = pattern.search(rest, first_text)
        if found is not None:
            ends.append(found.start())
    return " ".join(rest[:min(ends)].split()) or None


def cap_indication(indication: str, max_chars: Optional[int]) -> tuple[str, bool]:
    """The indication cut at a word boundary to `max_chars` (None: no cap), and whether it was cut."""
    if max_chars is None or len(indication) <= max_chars:
        return indication, False
    cut = indication[:max_chars]
    space = cut.rfind(" ")
    return (cut[:space] if space > max_chars // 2 else cut).rstrip(), True
