"""Install hints built from pip's direct_url.json: what pip recorded is not trusted."""

from __future__ import annotations

import json
import shlex

import pytest

from radmatch_audit.files import paths


class _Recorded:
    """A distribution whose direct_url.json holds `recorded`."""

    def __init__(self, recorded: dict) -> None:
        self.text = json.dumps(recorded)

    def read_text(self, name: str) -> str:
        return self.text if name == "direct_url.json" else ""


def hint(monkeypatch, recorded: dict, extra: str = "local") -> str:
    monkeypatch.setattr(paths, "_checkout_dir", lambda: None)  # installed, not a checkout
    monkeypatch.setattr(paths, "distribution", lambda name: _Recorded(recorded))
    return paths.install_command(extra)


def requirement(command: str) -> str:
    """The one argument the shell passes to `pip install`."""
    words = shlex.split(command)
    assert words[:2] == ["pip", "install"] and len(words) == 3, words
    return words[2]


def test_a_vcs_install_prints_a_pip_line_without_the_token_pinned_to_its_commit(monkeypatch):
    command = hint(monkeypatch, {
        "url": "https://alice:ghp_SECRETTOKEN@github.com/lab/radmatch.git",
        "vcs_info": {"vcs": "git", "commit_id": "0123abcd" * 5, "requested_revision": "main"},
    })
    assert "SECRETTOKEN" not in command and "alice" not in command
    assert requirement(command) == (
        "radmatch-audit[local] @ git+https://github.com/lab/radmatch.git@" + "0123abcd" * 5
    )


def test_ssh_s_conventional_git_user_is_kept_and_a_subdirectory_is_named(monkeypatch):
    command = hint(monkeypatch, {
        "url": "ssh://git@gitlab.example.org/lab/radmatch.git", "subdirectory": "pkg",
        "vcs_info": {"vcs": "git", "commit_id": "f" * 40},
    }, extra="metric")
    assert requirement(command) == (
        "radmatch-audit[metric] @ git+ssh://git@gitlab.example.org/lab/radmatch.git@"
        + "f" * 40 + "#subdirectory=pkg"
    )


def test_terminal_escape_sequences_are_never_printed(monkeypatch):
    command = hint(monkeypatch, {
        "url": "https://github.com/lab/rad\x1b]0;pwned\x07match\x1b[2J.git",
        "vcs_info": {"vcs": "git", "commit_id": "abc123"},
    })
    assert not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in command), repr(command)
    assert "github.com/lab/rad" in command


def test_a_file_url_is_percent_decoded_and_shell_quoted(monkeypatch):
    command = hint(monkeypatch, {"url": "file:///home/ana/my%20code/it%27s%20radmatch",
                                 "dir_info": {"editable": True}})
    assert requirement(command) == "/home/ana/my code/it's radmatch[local]"


@pytest.mark.parametrize("url", ["file:///srv/x;rm -rf ~", "file:///srv/$(touch%20pwned)"])
def test_shell_syntax_in_a_recorded_path_stays_one_quoted_argument(monkeypatch, url):
    command = hint(monkeypatch, {"url": url, "dir_info": {}})
    assert requirement(command).endswith("[local]") and requirement(command).startswith("/srv/")


def test_an_archive_url_loses_its_credentials(monkeypatch):
    command = hint(monkeypatch, {"url": "https://u:p4ss@files.example.org/radmatch-1.0.tar.gz",
                                 "archive_info": {}})
    assert requirement(command) == "radmatch-audit[local] @ https://files.example.org/radmatch-1.0.tar.gz"


def test_a_checkout_is_named_by_its_path_quoted(monkeypatch, tmp_path):
    checkout = tmp_path / "two words"
    monkeypatch.setattr(paths, "_checkout_dir", lambda: checkout)
    assert requirement(paths.install_command("judge")) == f"{checkout}[judge]"
