"""Records for the dashboard tests: the paper's Fig. 3 pairs, hostile text, a failed
pair, and a synthetic corpus of any size. Scores come from the real scoring core."""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from radmatch_audit.read.recompute import score_record
from radmatch_audit.files.record_io import RecordWriter
from radmatch_audit.core.records import Failure, Record, Stages
from radmatch_audit.core.schemas import Finding, GradingStage, MatchingAnswer, MatchRow

XSS_IMG = "<img src=x onerror=\"window.__pwned=1;document.title='pwned'\">"
XSS_SCRIPT = "<script>window.__pwned=2;document.title='pwned'</script>"
XSS_BREAKOUT = "</script><script>window.__pwned=3</script>"


def finding(
    id: str,
    text: str,
    status: str,
    sig: str,
    comparison: str | None = None,
    evidence: list[str] | None = None,
    measurements: list[dict] | None = None,
) -> Finding:
    return Finding(
        id=id,
        text=text,
        clinical_status=status,
        clinical_significance=sig,
        comparison=comparison,
        evidence=evidence if evidence is not None else [text],
        measurements=measurements or [],
    )


def make_record(
    pair_id: str,
    reference: str,
    candidate: str,
    gt: list[Finding],
    pred: list[Finding],
    rows: list[tuple[str, str, str, str]],
    grades: dict[tuple[str, str], list[tuple[str, str, str]]],
    **extra,
) -> Record:
    """rows: (pred_id, gt_id, scope, reasoning); grades: {(pred, gt): [(dim, severity, why)]}."""
    in_rows = {r[0] for r in rows} | {r[1] for r in rows}
    matching = MatchingAnswer(
        matches=[
            MatchRow(pred_id=p, gt_id=g, match_scope=s, reasoning=why) for p, g, s, why in rows
        ],
        unmatched_pred=[x.id for x in pred if x.id not in in_rows],
        unmatched_gt=[x.id for x in gt if x.id not in in_rows],
    )
    graded = [(p, g) for p, g, s, _ in rows if s != "generic"]
    grading = GradingStage(
        pairs=graded,
        grades=[
            {"pred_id": key[0], "gt_id": key[1], "errors": [
                {"reasoning": why, "dimension": d, "severity": sv}
                for d, sv, why in grades.get(key, [])
            ]}
            for key in graded
        ],
    )
    record = Record(
        pair_id=pair_id,
        study_id=extra.pop("study_id", pair_id.rsplit("-", 1)[0]),
        modality=extra.pop("modality", "chest_xray"),
        reference=reference,
        candidate=candidate,
        stages=Stages(
            reference_findings=gt, candidate_findings=pred, matching=matching, grading=grading
        ),
        judge=extra.pop("judge", None) or {
            "backend": "scripted",
            "model": "fixture",
            "prompt_version": {"extract": "test"},
            "fewshot_set": "chest_xray",
        },
        **extra,
    )
    return score_record(record)


def fig3b() -> Record:
    """docs/scoring.md section 5 worked example (paper Fig. 3b): 2 actionable errors."""
    ref = (
        "New large right-sided pleural effusion with underlying atelectasis and possible "
        "consolidation. Small left-sided pleural effusion."
    )
    cand = (
        "No significant change: large right-sided pleural effusion, with severe atelectasis. "
        "Pneumonia cannot be excluded. Minimal interval increase of left effusion."
    )
    gt = [
        finding(
            "gt_1",
            "New large right-sided pleural effusion.",
            "abnormal",
            "urgent",
            "new",
            ["New large right-sided pleural effusion"],
        ),
        finding(
            "gt_2",
            "Underlying atelectasis.",
            "abnormal",
            "notable",
            None,
            ["underlying atelectasis"],
        ),
        finding(
            "gt_3",
            "Possible consolidation.",
            "abnormal",
            "urgent",
            None,
            ["possible consolidation"],
        ),
        finding(
            "gt_4",
            "Small left-sided pleural effusion.",
            "abnormal",
            "notable",
            None,
            ["Small left-sided pleural effusion"],
        ),
    ]
    pred = [
        finding(
            "p_1",
            "Large right-sided pleural effusion, no significant change.",
            "abnormal",
            "urgent",
            "stable",
            ["No significant change: large right-sided pleural effusion"],
        ),
        finding("p_2", "Severe atelectasis.", "abnormal", "urgent", None, ["severe atelectasis"]),
        finding(
            "p_3",
            "Pneumonia cannot be excluded.",
            "abnormal",
            "urgent",
            None,
            ["Pneumonia cannot be excluded"],
        ),
        finding(
            "p_4",
            "Minimal interval increase of left effusion.",
            "abnormal",
            "notable",
            "worsening",
            ["Minimal interval increase of left effusion"],
        ),
    ]
    rows = [
        ("p_1", "gt_1", "direct", "same right effusion"),
        ("p_2", "gt_2", "direct", "same atelectasis"),
        ("p_3", "gt_3", "direct", "consolidation vs pneumonia, same process"),
        ("p_4", "gt_4", "direct", "same left effusion"),
    ]
    grades = {
        ("p_2", "gt_2"): [("severity", "major", "underlying atelectasis overstated as severe")],
        ("p_3", "gt_3"): [("certainty", "minor", "possible vs cannot be excluded")],
        ("p_4", "gt_4"): [("severity", "minor", "small vs minimal increase")],
    }
    return make_record("rexval-fig3-b", ref, cand, gt, pred, rows, grades, study_id="rexval-fig3")


def fig3a() -> Record:
    """Paper Fig. 3a: two status inversions, two correct normals, one hallucinated tube."""
    ref = (
        "AP chest. Previous mild but asymmetric pulmonary edema continues to improve. Residual "
        "right-upper-lobe opacification, concern for pneumonia. Heart size is normal. No pleural effusion."
    )
    cand = (
        "AP chest. Ground-glass opacification and consolidation have improved. There is no pulmonary "
        "edema or pleural effusion. The heart size is normal. A feeding tube ends in the stomach."
    )
    gt = [
        finding(
            "gt_1",
            "Mild asymmetric pulmonary edema, improving.",
            "abnormal",
            "urgent",
            "improving",
            ["Previous mild but asymmetric pulmonary edema continues to improve"],
        ),
        finding(
            "gt_2",
            "Right-upper-lobe opacification, concern for pneumonia.",
            "abnormal",
            "urgent",
            None,
            ["Residual right-upper-lobe opacification, concern for pneumonia"],
        ),
        finding(
            "gt_3", "Heart size is normal.", "normal", "routine", None, ["Heart size is normal"]
        ),
        finding("gt_4", "No pleural effusion.", "normal", "routine", None, ["No pleural effusion"]),
    ]
    pred = [
        finding(
            "p_1",
            "Opacification and consolidation have improved.",
            "normal",
            "notable",
            "improving",
            ["Ground-glass opacification and consolidation have improved"],
        ),
        finding("p_2", "No pulmonary edema.", "normal", "routine", None, ["no pulmonary edema"]),
        finding("p_3", "No pleural effusion.", "normal", "routine", None, ["or pleural effusion"]),
        finding(
            "p_4", "Heart size is normal.", "normal", "routine", None, ["The heart size is normal"]
        ),
        finding(
            "p_5",
            "Feeding tube ends in the stomach.",
            "abnormal",
            "notable",
            None,
            ["A feeding tube ends in the stomach"],
        ),
    ]
    rows = [
        ("p_2", "gt_1", "direct", "edema: present vs absent"),
        ("p_1", "gt_2", "direct", "same right upper lobe opacity"),
        ("p_4", "gt_3", "aggregate", "heart size"),
        ("p_3", "gt_4", "direct", "pleural effusion"),
    ]
    return make_record(
        "rexval-fig3-a",
        ref,
        cand,
        gt,
        pred,
        rows,
        {},
        study_id="rexval-fig3",
        indication="Shortness of breath.",
    )


def hostile() -> Record:
    """Report text, finding text, ids and reasoning holding markup and script."""
    ref = f"Small nodule {XSS_IMG} in the left lung. {XSS_SCRIPT} {XSS_BREAKOUT} & more"
    cand = f"Left lung nodule {XSS_IMG}. Javascript: alert(1) U+2028:\u2028 end."
    gt = [
        finding("gt_1", f"Nodule {XSS_SCRIPT}", "abnormal", "notable", None, [f"nodule {XSS_IMG}"])
    ]
    pred = [finding("p_1", f"Nodule {XSS_IMG}", "abnormal", "notable", None, [f"nodule {XSS_IMG}"])]
    rows = [("p_1", "gt_1", "direct", XSS_SCRIPT)]
    grades = {("p_1", "gt_1"): [("location", "minor", XSS_IMG)]}
    return make_record(
        "xss-<b>1</b>",
        ref,
        cand,
        gt,
        pred,
        rows,
        grades,
        study_id=XSS_IMG,
        indication=XSS_SCRIPT,
        flags=[XSS_IMG],
    )


def failed() -> Record:
    return Record(
        pair_id="failed-001",
        study_id="failed",
        reference="Reference text.",
        candidate="Candidate text.",
        error="judge timed out after 3 retries",
    )


# --------------------------------------------------------------------------- synthetic corpus

_VOCAB = [
    # (reference text, status, tier, comparison, measurement) ; candidate variants derive from it
    ("Right pleural effusion", "abnormal", "urgent", "new", None),
    ("Left lower lobe atelectasis", "abnormal", "notable", None, None),
    ("Pulmonary nodule of 8 mm in the right upper lobe", "abnormal", "notable", "stable", 8.0),
    ("Pneumothorax on the left", "abnormal", "critical", "new", None),
    ("Cardiomegaly", "abnormal", "notable", "stable", None),
    ("Consolidation in the right lower lobe", "abnormal", "urgent", "worsening", None),
    ("Heart size is normal", "normal", "routine", None, None),
    ("No pleural effusion", "normal", "routine", None, None),
    ("Endotracheal tube 4 cm above the carina", "abnormal", "notable", None, 4.0),
    ("Degenerative changes of the spine", "abnormal", "routine", "stable", None),
]
_COMPARISONS = ["stable", "improving", "worsening", "new", "resolved", None]


def synthetic(pair_id: str, rng: random.Random) -> Record:
    """A random but plausible pair: shared, altered, missed and added findings."""
    chosen = rng.sample(_VOCAB, rng.randint(2, 6))
    gt, pred, rows, grades = [], [], [], {}
    ref_sent, cand_sent = [], []
    for text, status, tier, comp, size in chosen:
        fate = rng.random()
        meas = (
            [{"value": size, "unit": "mm" if size > 5 else "cm", "category": "size"}]
            if size
            else []
        )
        if fate < 0.8:
            gid = f"gt_{len(gt) + 1}"
            gt.append(finding(gid, text + ".", status, tier, comp, [text], meas))
            ref_sent.append(text + ".")
        if fate > 0.15:
            pid = f"p_{len(pred) + 1}"
            ctext = text if rng.random() < 0.7 else "Probable " + text[0].lower() + text[1:]
            ccomp = comp if rng.random() < 0.75 else rng.choice(_COMPARISONS)
            cmeas = [dict(m, value=m["value"] * rng.choice([1, 1, 1.5, 2])) for m in meas]
            pred.append(finding(pid, ctext + ".", status, tier, ccomp, [ctext], cmeas))
            cand_sent.append(ctext + ".")
            if fate < 0.8:
                rows.append((pid, gid, "direct", "same finding"))
                if rng.random() < 0.3:
                    grades[(pid, gid)] = [
                        (
                            rng.choice(["location", "severity", "certainty", "morphology"]),
                            rng.choice(["minor", "major"]),
                            "graded difference",
                        )
                    ]
    if not gt:
        gt.append(
            finding("gt_1", "No acute findings.", "normal", "routine", None, ["No acute findings"])
        )
        ref_sent.append("No acute findings.")
    return make_record(
        pair_id,
        "FINDINGS: " + " ".join(ref_sent),
        "FINDINGS: " + " ".join(cand_sent),
        gt,
        pred,
        rows,
        grades,
        study_id=pair_id.rsplit("-", 1)[0],
    )


def synthetic_corpus(n: int, seed: int = 0, failed_every: int = 0) -> list[Record]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if failed_every and i % failed_every == failed_every - 1:
            out.append(
                Record(
                    pair_id=f"syn{i // 3:05d}-{i:05d}",
                    reference="r",
                    candidate="c",
                    error="judge returned invalid JSON",
                )
            )
        else:
            out.append(synthetic(f"syn{i // 3:05d}-{i:05d}", rng))
    return out


def write_records(path: Path, records: Iterable[Record]) -> Path:
    with RecordWriter(path) as writer:
        for record in records:
            writer.write(record)
    return path


def demo_records() -> list[Record]:
    """The small corpus the browser tests open: Fig. 3 pairs, hostile text, a failure."""
    return [fig3b(), fig3a(), hostile(), failed()] + synthetic_corpus(40, seed=7)


# --------------------------------------------------------------------------- issue 14

SMALL_JUDGE = {
    "backend": "transformers",
    "model": "SmolLM2-135M-Instruct",  # how the embedded judge names itself (radmatch_audit.judges.smollm)
    "prompt_version": {"indication": "v3-1a2b3c", "extract": "v5-4d5e6f", "match": "v4-778899",
                       "grade": "v2-aabbcc"},
    "fewshot_set": "chest_xray",
}
THRESHOLD_REASON = "ascending_aorta_diameter crosses >= 40 mm"


def on_small_judge(record: Record) -> Record:
    return record.model_copy(update={"judge": record.judge.model_validate(SMALL_JUDGE)})


def failed_with_cause() -> Record:
    """A pair whose grading failed after three attempts (records' `failure` field)."""
    record = Record(pair_id="failed-grade", study_id="failed", reference="Reference text.",
                    candidate="Candidate text.")
    record.fail(Failure(stage="grade", cause="judge returned invalid JSON", attempts=3, elapsed_s=12.5))
    return record


def threshold_pair() -> Record:
    """Two measurements of one clinical quantity either side of a threshold of the
    clinical threshold table: the scoring core's reasoning names the threshold."""
    def size(value: float) -> list[dict]:
        return [{"value": value, "unit": "mm", "category": "size", "quantity": "ascending_aorta_diameter"}]

    gt = [finding("gt_1", "Ascending aorta 42 mm.", "abnormal", "notable", None,
                  ["Ascending aorta measures 42 mm"], size(42))]
    pred = [finding("p_1", "Ascending aorta 38 mm.", "abnormal", "notable", None,
                    ["Ascending aorta measures 38 mm"], size(38))]
    return make_record(
        "threshold-1",
        "Ascending aorta measures 42 mm. The lungs are clear.",
        "Ascending aorta measures 38 mm.",
        gt, pred, [("p_1", "gt_1", "direct", "same aorta")], {}, study_id="threshold",
    )


def degraded(record: Record) -> Record:
    """The same pair as another system might answer it: nothing matched (more errors)."""
    if record.scores is None:
        return record
    stages = record.stages.model_copy(update={
        "matching": MatchingAnswer(
            matches=[],
            unmatched_pred=[f.id for f in record.stages.candidate_findings or []],
            unmatched_gt=[f.id for f in record.stages.reference_findings or []],
        ),
        "grading": GradingStage(pairs=[], grades=[]),
    })
    return score_record(record.model_copy(update={"stages": stages, "scores": None}))


# --------------------------------------------------------------------------- headless Chromium
# where it is and how it runs, for the browser tests of the dashboard and of reliability

CHROMIUM = next(
    (shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None
)
CHROMEDRIVER = shutil.which("chromedriver") or (
    "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
)
CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--window-size=1600,1100",
]


def wait_until(driver, script: str, *args, timeout: float = 10.0, what: str = "") -> None:
    """Wait until `script` (run in the page with `args`) returns true."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        WebDriverWait(driver, timeout, poll_frequency=0.01).until(
            lambda d: d.execute_script(script, *args)
        )
    except TimeoutException:
        raise AssertionError(f"{what or script} not seen after {timeout} s: "
                             f"{driver.get_log('browser')}") from None


def open_page(driver, path: Path, timeout: float = 30.0) -> float:
    """Open the page from disk; drain earlier logs first; return seconds until ready."""
    driver.get("about:blank")
    driver.get_log("performance")
    driver.get_log("browser")
    start = time.perf_counter()
    driver.get(path.resolve().as_uri())
    wait_until(driver, "return document.documentElement.dataset.ready === '1'",
               timeout=timeout, what="page ready")
    return time.perf_counter() - start


def wait_for_view(driver, view: str, pair_id: str = "", timeout: float = 10.0) -> None:
    """Wait until the router shows `view` (and that pair): it runs on hashchange, async."""
    wait_until(
        driver,
        "return document.documentElement.dataset.view === arguments[0] && (!arguments[1] ||"
        " document.getElementById('view-pair').dataset.pairId === arguments[1])",
        view, pair_id, timeout=timeout, what=f"view {view!r} {pair_id!r}",
    )
