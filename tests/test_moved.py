"""_moved.py: the modules' names from before the folders still import, each as the module
now in its folder (the one object, not a copy)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

import radmatch_audit
from radmatch_audit import _moved


def test_every_old_name_points_at_a_module_of_the_package_and_shadows_none():
    package = Path(radmatch_audit.__file__).parent
    for old, new in _moved.MOVED.items():
        assert importlib.util.find_spec(new) is not None, f"{old} -> {new}: no such module"
        short = old.removeprefix("radmatch_audit.")
        assert "." not in short and not (package / f"{short}.py").exists() and not (package / short).is_dir()


@pytest.mark.parametrize("old, new", [("radmatch_audit.calls", "radmatch_audit.run.calls"),
                                      ("radmatch_audit.reading", "radmatch_audit.read.reading"),
                                      ("radmatch_audit.scores", "radmatch_audit.core.scores")])
def test_an_old_name_imports_the_same_module_object(old, new):
    module = importlib.import_module(old)
    assert module is importlib.import_module(new) and sys.modules[old] is module
    assert module.__name__ == new  # one module, known by its new name


def test_from_an_old_name_imports_its_names_and_an_unknown_name_is_still_missing():
    from radmatch_audit.methods import make_method

    from radmatch_audit.run.methods import make_method as made_here

    assert make_method is made_here
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("radmatch_audit.no_such_module")


def test_install_adds_one_finder_however_often_it_runs():
    _moved.install()
    _moved.install()
    assert sum(isinstance(finder, _moved._OldNames) for finder in sys.meta_path) == 1
