"""`python -m radmatch_audit.cli` (cli.__main__) runs the command line and exits with its code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from radmatch_audit.cli.app import COMMANDS


def test_importing_the_main_module_runs_the_command_line_and_exits_with_its_code(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["radmatch-audit", "summary", "missing.jsonl"])
    monkeypatch.delitem(sys.modules, "radmatch_audit.cli.__main__", raising=False)
    with pytest.raises(SystemExit) as stop:
        import radmatch_audit.cli.__main__  # noqa: F401
    assert stop.value.code == 2
    assert capsys.readouterr().err.startswith("radmatch-audit: error: cannot read missing.jsonl")


def test_python_dash_m_lists_every_command():
    done = subprocess.run([sys.executable, "-m", "radmatch_audit.cli", "--help"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("usage: radmatch-audit")
    for name in COMMANDS:
        assert name in done.stdout
