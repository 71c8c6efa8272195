"""Every result names its judge, and the embedded small judge's results say they are
not clinical (issue 30 items 2 and 3).

* `[metric]` alone (no torch) with no judge server fails at load, in one line naming
  the `[local]` extra with a pip line that works; with a server it needs no torch.
* compute()'s result and the reward name the judge (backend, model, servers by
  host:port; never a path, query or key); the embedded judge's results warn once per
  process that they are not clinical.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import pytest
from test_metric import C1, C2, CLOSED_URL, REF, REPO, SHIM, offline_env

from radmatch_audit.judges import judge_notice
from radmatch_audit.judges.judge_notice import NotClinicalWarning, describe, endpoint_host
from radmatch_audit.hf.metric import MetricScorer
from radmatch_audit.files.paths import install_command
from radmatch_audit.hf.reward import RadMatchReward
from radmatch_audit.testing.fake_server import StubServer
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
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env=offline_env(tmp_path, PYTHONPATH=str(REPO / "inference"), **env),
    )


class SmallJudge(ScriptedJudge):
    """The scripted answers under the embedded judge's name."""

    backend = "transformers"
    model = "SmolLM2-135M-Instruct"


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


def test_compute_names_a_server_judge_by_host_without_path_or_key(monkeypatch):
    monkeypatch.setenv("H3_TEST_KEY", "sk-very-secret")
    with StubServer(api_key="sk-very-secret", model="big-judge") as server:
        scorer = MetricScorer(base_url=server.base_url + "?token=q", model="big-judge",
                              api_key_env="H3_TEST_KEY", cache=False, env={})
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = scorer.compute([C1], [REF], progress=False)
        finally:
            scorer.close()
    port = server.base_url.split(":")[2].split("/")[0]
    assert result["judge"] == {"backend": "vllm", "model": "big-judge",
                               "endpoints": [f"127.0.0.1:{port}"], "embedded_small_judge": False}
    text = json.dumps(result["judge"])
    assert "secret" not in text and "/v1" not in text and "token" not in text
    assert not [w for w in caught if issubclass(w.category, NotClinicalWarning)]


def test_embedded_judge_results_warn_once_per_process(monkeypatch):
    monkeypatch.setattr(judge_notice, "_warned", False)
    scorer = MetricScorer(judge=SmallJudge(), cache=False, env={})
    reward = RadMatchReward(scorer=scorer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = scorer.compute([C1], [REF], progress=False)
        scorer.compute([C2], [REF], progress=False)
        reward(completions=[C1], reference=[REF])
    notices = [w for w in caught if issubclass(w.category, NotClinicalWarning)]
    assert len(notices) == 1 and "not clinical" in str(notices[0].message)
    assert first["judge"]["embedded_small_judge"] is True
    assert reward.judge == first["judge"] and reward.judge["model"] == "SmolLM2-135M-Instruct"
    scorer.close()


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


def test_describe_and_endpoint_host():
    assert endpoint_host("http://u:p@10.0.0.2:8000/v1?k=1") == "10.0.0.2:8000"
    assert endpoint_host("http://[::1]:8000/v1") == "[::1]:8000"
    line = describe({"backend": "transformers", "model": "SmolLM2-135M-Instruct", "endpoints": [],
                     "embedded_small_judge": True})
    assert line == "judge: transformers / SmolLM2-135M-Instruct, in process (embedded small judge: not clinical)"


@pytest.mark.parametrize("with_judge", [False, True])
def test_a_given_judge_needs_no_local_extra(monkeypatch, with_judge):
    monkeypatch.setattr("radmatch_audit.hf.extras.LOCAL_JUDGE_MODULES", ("torch", "h3_not_installed"))
    if with_judge:
        MetricScorer(judge=ScriptedJudge(), env={})
    else:
        with pytest.raises(ImportError, match=r"\[local\] extra.*missing: h3_not_installed\)"):
            MetricScorer(env={})
