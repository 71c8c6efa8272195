"""The audit dashboard: one offline, self-contained HTML page from a records file.

    radmatch-audit dashboard RECORDS.jsonl -o report.html [--compare OTHER.jsonl]

`build_dashboard` writes the page (`view.py` gives its data, `build.py` renders it); the command is `radmatch_audit.cli.dashboard`.
"""

from radmatch_audit.dashboard.build import build_dashboard, embed_json
from radmatch_audit.dashboard.view import locate_evidence

__all__ = [
    "build_dashboard",
    "embed_json",
    "locate_evidence",
]
