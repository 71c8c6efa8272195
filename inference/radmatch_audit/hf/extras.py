"""What each optional part of RadMatch needs installed, checked before any work starts.

`pip install '.[metric]'` installs the metric and the server judge's client, not the
embedded judge: that one needs the `[local]` extra (torch, a CPU build, pinned there).
The check looks the modules up without importing them, so it costs nothing at load.
"""

from __future__ import annotations

from importlib.util import find_spec

from radmatch_audit.files.paths import install_command

# The embedded judge's imports (radmatch_audit.judges.local, radmatch_audit.judges.smollm).
LOCAL_JUDGE_MODULES = ("torch", "transformers", "outlines", "llguidance", "gguf")


class MissingExtraError(ImportError):
    """An optional dependency is absent; the message is one line with the pip line that fixes it."""


def missing_modules(modules: tuple[str, ...]) -> list[str]:
    missing = []
    for name in modules:
        try:
            if find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):  # a broken or blocked install counts as absent
            missing.append(name)
    return missing


def require_local_judge() -> None:
    """Raise MissingExtraError when the embedded judge's modules are not installed."""
    missing = missing_modules(LOCAL_JUDGE_MODULES)
    if missing:
        raise MissingExtraError(
            f"the embedded judge (used when no base_url is given) needs the [local] extra, "
            f"which is not installed (missing: {', '.join(missing)}): {install_command('local')}; "
            "or give base_url for a judge server"
        )
