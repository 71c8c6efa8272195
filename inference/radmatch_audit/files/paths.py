"""Where RadMatch keeps what it caches on the user's machine, and where it was installed
from (for the pip lines that error messages print)."""

from __future__ import annotations

import json
import os
import shlex
import unicodedata
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

CACHE_DIR_ENV = "RADMATCH_CACHE_DIR"


def cache_root() -> Path:
    """Models and judge answers live here: $RADMATCH_CACHE_DIR, else ~/.cache/radmatch."""
    root = os.environ.get(CACHE_DIR_ENV)
    return Path(root).expanduser() if root else Path.home() / ".cache" / "radmatch"


DISTRIBUTION = "radmatch-audit"  # not `radmatch`: on PyPI that name is the paper's own package
PLACEHOLDER = "/path/to/your/radmatch-audit/checkout"


def install_command(extra: str) -> str:
    """A pip line that installs `extra` of this RadMatch, from where it came.

    A bare `pip install radmatch` resolves to the paper authors' package, so the line
    names this checkout (or the URL pip recorded when it installed us: PEP 610's
    direct_url.json), never a package name. What pip recorded is not trusted: a URL's
    credentials and every control character (a terminal escape sequence) are dropped,
    a file URL is percent-decoded, and the requirement is shell-quoted.
    """
    return f"pip install {shlex.quote(_requirement(extra))}"


def _requirement(extra: str) -> str:
    """This checkout, else the source pip recorded, else a placeholder to fill in."""
    checkout = _checkout_dir()
    if checkout is not None:
        return f"{checkout}[{extra}]"
    try:
        recorded = json.loads(distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
    except (PackageNotFoundError, ValueError, OSError):
        recorded = {}
    url = recorded.get("url") if isinstance(recorded, dict) else None
    if not isinstance(url, str) or not url:
        return f"{PLACEHOLDER}[{extra}]"
    if url.startswith("file:"):
        return f"{_printable(unquote(urlsplit(url).path))}[{extra}]"
    vcs_info = recorded.get("vcs_info")
    named = f"{DISTRIBUTION}[{extra}] @ "
    if not isinstance(vcs_info, dict):
        return named + _public_url(url)  # an archive
    vcs, commit = vcs_info.get("vcs"), vcs_info.get("commit_id")
    vcs = vcs if isinstance(vcs, str) and vcs.isalpha() else "git"
    pinned = f"@{commit}" if isinstance(commit, str) and commit.isalnum() else ""
    subdirectory = recorded.get("subdirectory")
    where = f"#subdirectory={_printable(subdirectory)}" if isinstance(subdirectory, str) else ""
    return f"{named}{vcs}+{_public_url(url)}{pinned}{where}"


def checkout_file(relative: str) -> Path | None:
    """`relative` in the source checkout this package runs from, or None when it was
    installed (a wheel holds no checkout files such as redteam/)."""
    checkout = _checkout_dir()
    return None if checkout is None else checkout / relative


def _checkout_dir() -> Path | None:
    """The source checkout this package runs from, or None when it was installed."""
    checkout = Path(__file__).resolve().parents[3]  # <repo>/inference/radmatch_audit/files/paths.py
    if (checkout / "pyproject.toml").is_file() and (checkout / "inference").is_dir():
        return checkout
    return None


def _public_url(url: str) -> str:
    """`url` without credentials (ssh's conventional `git@` user is kept: PEP 610) or
    control characters."""
    parts = urlsplit(_printable(url))
    userinfo, at, host = parts.netloc.rpartition("@")
    if at and userinfo != "git":
        parts = parts._replace(netloc=host)
    return urlunsplit(parts)


def _printable(text: str) -> str:
    """`text` without control or format characters (an escape sequence loses its ESC)."""
    return "".join(c for c in text if unicodedata.category(c)[0] != "C")
