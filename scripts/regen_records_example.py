"""Rewrite the example records of docs/records.md (sections 6 and 7) from a real run.

The document's Python blocks run as written, in one session, against the repository's
test judge server (radmatch_audit.testing.fake_server.StubServer: toy answers, real
pipeline, real HTTP); each printed record replaces the JSON block that follows
"The line it prints". tests/docs/test_docs_blocks.py checks the document against the same
run (timings aside), so run this after a change to prompts, exemplars or records:

    .venv/bin/python scripts/regen_records_example.py
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "records.md"
WIDTH = 96  # a container that fits on its line within this width stays on one line
# A Python block that prints a record, then the JSON block that shows it.
EXAMPLE = re.compile(
    r"(?P<code>^```python\n(?P<python>.*?)^```\n)(?P<between>.*?)(?P<json>^```json\n.*?^```\n)",
    re.DOTALL | re.MULTILINE,
)


def layout(value: Any, indent: int = 0, lead: int = 0) -> str:
    """JSON with two-space indents; a container that fits on its line stays on one line.
    `lead`: the characters before the value on its line (indent and key)."""
    flat = json.dumps(value, ensure_ascii=False)
    if not isinstance(value, (dict, list)) or not value or lead + len(flat) + 1 <= WIDTH:
        return flat
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            head = f"{pad}{json.dumps(key)}: "
            items.append(head + layout(item, indent + 2, len(head)))
    else:
        items = [pad + layout(item, indent + 2, len(pad)) for item in value]
    return "{[" [isinstance(value, list)] + "\n" + ",\n".join(items) + "\n" + " " * indent + "}]"[isinstance(value, list)]


def printed_records(text: str) -> list[dict[str, Any]]:
    """Run the document's Python blocks in one session; the JSON lines they print."""
    code = "\n".join(m.group("python") for m in EXAMPLE.finditer(text))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(DOC), "exec"), {"__name__": "__docs__"})  # noqa: S102 - our own doc
    return [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    records = iter(printed_records(text))

    def replace(match: re.Match) -> str:
        shown = "```json\n" + layout(next(records)) + "\n```\n"
        return match.group("code") + match.group("between") + shown

    DOC.write_text(EXAMPLE.sub(replace, text), encoding="utf-8")
    print(f"rewrote the example records of {DOC}")


if __name__ == "__main__":
    main()
