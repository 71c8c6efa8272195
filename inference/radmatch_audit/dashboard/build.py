"""Build the audit dashboard: one self-contained HTML page from a records file.

The page is static: the records it needs (`dashboard.view`) are embedded as JSON in a
non-executed `<script type="application/json">` block, and one inline script (allowed
by its SHA-256 hash in the page's Content-Security-Policy) renders everything with
`textContent`. Nothing is fetched when the page opens: report text is untrusted
input and must never become markup or reach the network.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

from radmatch_audit.dashboard.view import PathLike, page_data

_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")
_JSON_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def build_dashboard(
    records_path: PathLike,
    output_path: PathLike,
    *,
    compare_path: PathLike | None = None,
) -> dict[str, Any]:
    """Write the dashboard for `records_path` to `output_path`.

    With `compare_path` (records of the same pairs from another system or judge), the
    page also shows the per-pair difference in actionable errors (compared minus main).

    Lines that cannot be read are skipped (as `radmatch-audit summary` does) and listed on
    the page. Returns ``{"summary": <the corpus summary dict embedded, as
    radmatch_audit.read.corpus.summarize(...).to_dict()>, "compare_summary": <dict or None>,
    "n_pairs": int, "bad_lines": [str], "output": str, "bytes": int}``.
    """
    from radmatch_audit.files.record_io import open_private

    data = page_data(records_path, compare_path)
    page = render_page(data, title=f"RadMatch audit: {Path(records_path).name}")
    out = Path(output_path)
    with open_private(out, "w") as handle:  # owner-only: the page quotes the reports
        handle.write(page)
    return {
        "summary": data["summary"],
        "compare_summary": data["compare"]["summary_b"] if data["compare"] else None,
        "n_pairs": len(data["pairs"]),
        "bad_lines": data["bad_lines"],
        "output": str(out),
        "bytes": len(page.encode("utf-8")),
    }


def render_page(data: dict[str, Any], *, title: str) -> str:
    """Fill the template: inline style and script, CSP hashes, escaped JSON data."""
    style = _asset("style.css")
    script = _asset("app.js")
    csp = "; ".join(
        [
            "default-src 'none'",
            f"script-src '{_sha256(script)}'",
            f"style-src '{_sha256(style)}'",
            "img-src data:",
            "font-src 'none'",
            "connect-src 'none'",
            "media-src 'none'",
            "object-src 'none'",
            "frame-src 'none'",
            "worker-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )
    values = {
        "CSP": csp,  # ours entirely; holds no double quote
        "TITLE": html.escape(title, quote=True),
        "STYLE": style,
        "SCRIPT": script,
        "DATA": embed_json(data),
    }
    # one pass: substituted text is never rescanned for placeholders
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _asset("template.html"))


def embed_json(data: Any) -> str:
    """JSON safe inside `<script type="application/json">`: no `<`, `>`, `&`, U+2028/9."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _JSON_ESCAPES[m.group(0)], text)


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")
