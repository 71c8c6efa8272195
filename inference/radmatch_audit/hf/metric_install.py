"""Put the metric script where evaluate.load("radmatch") finds it (`radmatch-audit install-metric`).

Offline, evaluate 0.4.6 resolves a bare name in its modules cache, under
`evaluate_modules/metrics/evaluate-metric--radmatch/<64 hex>/radmatch.py` (the newest
folder wins). The hash is the script's sha256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from radmatch_audit.files.paths import install_command

METRIC_NAME = "radmatch"


def script_path() -> str:
    """The metric script: `radmatch_audit/radmatch_metric.py` in a wheel, the checkout's otherwise.

    A string, as `evaluate.load` needs: ``evaluate.load(radmatch_audit.hf.metric.script_path())``
    loads the installed metric.
    """
    package = Path(__file__).resolve().parents[1]  # radmatch_audit/, above hf/
    for candidate in (package / "radmatch_metric.py", package.parents[1] / "radmatch_metric.py"):
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        "radmatch_metric.py is neither in the installed package nor in a checkout next to "
        f"it; reinstall RadMatch: {install_command('metric')}"
    )


def modules_cache_default() -> Path:
    """evaluate's modules cache: $HF_MODULES_CACHE, else $HF_HOME/modules (as evaluate reads it)."""
    try:
        from evaluate import config
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"the metric needs evaluate: {install_command('metric')}") from exc
    return Path(config.HF_MODULES_CACHE)


def install_metric(modules_cache: Path | None = None) -> Path:
    """Place the metric script where evaluate resolves a bare `evaluate.load("radmatch")`.

    Offline, evaluate looks for `<modules cache>/evaluate_modules/metrics/
    evaluate-metric--radmatch/<64 hex>/radmatch.py` (the newest one wins). The hash is
    the script's sha256; earlier installs in that folder are removed. Returns the path.
    """
    data = Path(script_path()).read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    root = Path(modules_cache).expanduser() if modules_cache else modules_cache_default()
    home = root / "evaluate_modules" / "metrics" / f"evaluate-metric--{METRIC_NAME}"
    home.mkdir(parents=True, exist_ok=True)
    for folder in (root, root / "evaluate_modules", home.parent, home):
        (folder / "__init__.py").touch(exist_ok=True)
    for old in home.iterdir():
        if old.is_dir() and len(old.name) == 64 and old.name != digest:
            shutil.rmtree(old, ignore_errors=True)
    target_dir = home / digest
    target_dir.mkdir(exist_ok=True)
    (target_dir / "__init__.py").touch(exist_ok=True)
    target = target_dir / f"{METRIC_NAME}.py"
    fd, tmp = tempfile.mkstemp(dir=target_dir, suffix=".tmp")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, target)  # also refreshes the mtime evaluate sorts by
    return target
