"""hf/extras.py: the check names each missing module of the embedded judge in one line;
`[metric]` alone (no torch) with no judge server fails at load, in one line
naming the `[local]` extra with a pip line that works; with a server it needs no torch; the
embedded judge's not-clinical warning reaches stderr once per process."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest
from test_metric import CLOSED_URL, REPO, SHIM, offline_env

from radmatch_audit.files.paths import install_command
from radmatch_audit.hf import extras
from radmatch_audit.hf.extras import MissingExtraError, missing_modules, require_local_judge
from radmatch_audit.hf.metric import MetricScorer
from radmatch_audit.testing.scripted import ScriptedJudge

# torch not installed, as after `pip install '.[metric]'`: the path finder no longer finds it
# (a None in sys.modules would break scipy and datasets, which look torch up themselves)
NO_TORCH = """
import sys
from importlib.machinery import PathFinder
class NoTorch(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            return None
        return PathFinder.find_spec(name, path, target)
sys.meta_path[sys.meta_path.index(PathFinder)] = NoTorch
"""


def run_code(code: str, tmp_path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env=offline_env(tmp_path, PYTHONPATH=str(REPO / "inference"), **env),
    )




# ---------------------------------------------------------------------------- item 2


def test_metric_extra_without_torch_fails_at_load_in_one_line(tmp_path):
    proc = run_code(NO_TORCH + f"import evaluate; evaluate.load({str(SHIM)!r})", tmp_path)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("radmatch_audit.hf.extras.MissingExtraError: ")
    assert "[local] extra" in last and install_command("local") in last and "torch" in last
    assert "During handling" not in proc.stderr and "direct cause" not in proc.stderr


def test_metric_extra_without_torch_runs_a_server_judge(tmp_path):
    proc = run_code(
        NO_TORCH
        + f"import evaluate, json; m = evaluate.load({str(SHIM)!r}, base_url={CLOSED_URL!r}, "
        "retries=1, cache=False)\n"
        "r = m.compute(predictions=['a'], references=['b'], progress=False)\n"
        "print(json.dumps([r['n_failed'], r['judge']]))",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    n_failed, judge = json.loads(proc.stdout.strip().splitlines()[-1])
    assert n_failed == 1 and judge["endpoints"] == ["127.0.0.1:9"]


# ---------------------------------------------------------------------------- item 3






def test_the_not_clinical_warning_reaches_stderr_once(tmp_path):
    code = (
        "from radmatch_audit.hf.metric import MetricScorer\n"
        "from radmatch_audit.hf.reward import RadMatchReward\n"
        "from radmatch_audit.testing.scripted import ScriptedJudge\n"
        "class Small(ScriptedJudge):\n    backend, model = 'transformers', 'SmolLM2-135M-Instruct'\n"
        "s = MetricScorer(judge=Small(), cache=False, env={})\n"
        "for _ in range(2): s.compute(['Small effusion.'], ['No effusion.'], progress=False)\n"
        "RadMatchReward(scorer=s)(completions=['x'], reference=['y'])\n"
    )
    proc = run_code(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("NotClinicalWarning") == 1 and "not clinical" in proc.stderr




@pytest.mark.parametrize("with_judge", [False, True])
def test_a_given_judge_needs_no_local_extra(monkeypatch, with_judge):
    monkeypatch.setattr("radmatch_audit.hf.extras.LOCAL_JUDGE_MODULES", ("torch", "h3_not_installed"))
    if with_judge:
        MetricScorer(judge=ScriptedJudge(), env={})
    else:
        with pytest.raises(ImportError, match=r"\[local\] extra.*missing: h3_not_installed\)"):
            MetricScorer(env={})


# ---------------------------------------------------------------------------- the check itself


def test_require_local_judge_names_what_is_missing_in_one_line(monkeypatch):
    monkeypatch.setattr(extras, "LOCAL_JUDGE_MODULES", ("json", "h13_absent_a", "h13_absent_b"))
    with pytest.raises(MissingExtraError) as caught:
        require_local_judge()
    message = str(caught.value)
    assert "\n" not in message and isinstance(caught.value, ImportError)
    assert "[local] extra" in message and "(missing: h13_absent_a, h13_absent_b)" in message
    assert install_command("local") in message and message.endswith("or give base_url for a judge server")
    monkeypatch.setattr(extras, "LOCAL_JUDGE_MODULES", ("json", "ast"))
    require_local_judge()  # everything found: no error


def test_a_broken_install_counts_as_missing(monkeypatch):
    broken = types.ModuleType("h13_broken")
    broken.__spec__ = None  # find_spec raises ValueError for such a module
    monkeypatch.setitem(sys.modules, "h13_broken", broken)
    assert missing_modules(("json", "h13_broken", "h13_absent.sub")) == ["h13_broken", "h13_absent.sub"]
