"""The old names of the modules that moved into folders on 2026-12-05, kept importable.

`import radmatch_audit.metric` (as the metric script copied into users' `evaluate`
caches does) gives `radmatch_audit.hf.metric` itself, the one module, not a copy.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "radmatch_audit.cache": "radmatch_audit.run.cache",
    "radmatch_audit.calls": "radmatch_audit.run.calls",
    "radmatch_audit.compare": "radmatch_audit.read.compare",
    "radmatch_audit.config": "radmatch_audit.judges.config",
    "radmatch_audit.control_strings": "radmatch_audit.core.control_strings",
    "radmatch_audit.corpus": "radmatch_audit.read.corpus",
    "radmatch_audit.extras": "radmatch_audit.hf.extras",
    "radmatch_audit.gate": "radmatch_audit.run.gate",
    "radmatch_audit.indication": "radmatch_audit.stages.indication",
    "radmatch_audit.inputs": "radmatch_audit.files.inputs",
    "radmatch_audit.judge_notice": "radmatch_audit.judges.judge_notice",
    "radmatch_audit.loop": "radmatch_audit.run.loop",
    "radmatch_audit.methods": "radmatch_audit.run.methods",
    "radmatch_audit.metric": "radmatch_audit.hf.metric",
    "radmatch_audit.metric_install": "radmatch_audit.hf.metric_install",
    "radmatch_audit.migrations": "radmatch_audit.core.migrations",
    "radmatch_audit.paths": "radmatch_audit.files.paths",
    "radmatch_audit.pipeline": "radmatch_audit.run.pipeline",
    "radmatch_audit.progress": "radmatch_audit.run.progress",
    "radmatch_audit.reading": "radmatch_audit.read.reading",
    "radmatch_audit.recompute": "radmatch_audit.read.recompute",
    "radmatch_audit.record_io": "radmatch_audit.files.record_io",
    "radmatch_audit.records": "radmatch_audit.core.records",
    "radmatch_audit.redteam": "radmatch_audit.read.redteam",
    "radmatch_audit.resampling": "radmatch_audit.read.resampling",
    "radmatch_audit.reward": "radmatch_audit.hf.reward",
    "radmatch_audit.schemas": "radmatch_audit.core.schemas",
    "radmatch_audit.scores": "radmatch_audit.core.scores",
    "radmatch_audit.smollm": "radmatch_audit.judges.smollm",
    "radmatch_audit.thresholds": "radmatch_audit.core.thresholds",
    "radmatch_audit.vocabulary": "radmatch_audit.core.vocabulary",
    "radmatch_audit.warmup": "radmatch_audit.run.warmup",
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and loads it as the module now in its folder."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module) -> None:
        return None  # the module now in its folder is already executed


def install() -> None:
    if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldNames())
