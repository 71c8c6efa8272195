"""The agreement table: every method against every endpoint of an annotation set."""

from __future__ import annotations

from typing import Any, Optional

from radmatch_audit.agreement.annotations import AnnotationSet
from radmatch_audit.agreement.methods import MethodScores
from radmatch_audit.agreement.stats import agreement
from radmatch_audit.read.resampling import MIN_STUDIES, N_RESAMPLES, SEED, wilson_interval

FEW_STUDIES_MARK = "†"


def preference(annotations: AnnotationSet, method: MethodScores) -> Optional[dict[str, Any]]:
    """Does the method prefer (fewer errors) the candidate the radiologists rated higher?

    Over the compared pairs both of whose candidates the method scored and whose mean
    ratings differ; a metric tie counts as not agreeing (and is reported).
    """
    if not annotations.comparisons:
        return None
    n = agree = ties = radiologist_ties = 0
    for a, b in annotations.comparisons:
        case_a, case_b = annotations.cases.get(a), annotations.cases.get(b)
        if case_a is None or case_b is None or a not in method.errors or b not in method.errors:
            continue
        if case_a.rating is None or case_b.rating is None or case_a.rating == case_b.rating:
            radiologist_ties += 1
            continue
        n += 1
        errors_a, errors_b = method.errors[a], method.errors[b]
        if errors_a == errors_b:
            ties += 1
        elif (errors_a < errors_b) == (case_a.rating > case_b.rating):
            agree += 1
    return {
        "cases": n, "agree": agree, "metric_ties": ties, "radiologist_ties": radiologist_ties,
        "accuracy": round(agree / n, 4) if n else None,
        "ci95": [round(v, 4) for v in wilson_interval(agree, n)] if n else None,
    }


def compare(
    annotations: AnnotationSet,
    methods: list[MethodScores],
    *,
    common: bool = False,
    n_resamples: int = N_RESAMPLES,
    seed: int = SEED,
) -> dict[str, Any]:
    """Everything `radmatch-audit agreement` prints, as one JSON-able dict."""
    shared = None
    if common:
        shared = set(annotations.cases)
        for method in methods:
            shared &= set(method.errors)
    out: dict[str, Any] = {
        "annotations": annotations.name,
        "raters": annotations.raters,
        "annotated_pairs": len(annotations.cases),
        "bootstrap": {"resamples": n_resamples, "seed": seed, "unit": "study"},
        "common_pairs_only": common,
        "methods": [],
        "endpoints": [],
        "notes": list(annotations.notes) + [note for m in methods for note in m.notes],
    }
    for method in methods:
        out["methods"].append({
            "label": method.label, "path": method.path, "scored": len(method.errors),
            "failed": method.failed, "unreadable_lines": method.unreadable,
            "not_annotated": sum(1 for pid in method.errors if pid not in annotations.cases),
            "preference": preference(annotations, method),
        })
    for endpoint in annotations.endpoints:
        results = {}
        for method in methods:
            pids = [pid for pid, case in annotations.cases.items()
                    if endpoint.key in case.targets and pid in method.errors
                    and (shared is None or pid in shared)]
            if len(pids) < 2:
                results[method.label] = None
                continue
            stat = agreement(
                [method.errors[p] for p in pids],
                [annotations.cases[p].targets[endpoint.key] for p in pids],
                [annotations.cases[p].study_id for p in pids],
                n_resamples=n_resamples, seed=seed,
            )
            result = stat.to_dict()
            result["studies"] = len({annotations.cases[p].study_id for p in pids})
            few = few_studies(result)
            if few:
                result["caution"] = few
            results[method.label] = result
        out["endpoints"].append({"key": endpoint.key, "label": endpoint.label, "results": results})
    return out


def few_studies(result: dict[str, Any]) -> Optional[str]:
    """Why this result's intervals are not reliable 95 % intervals, or None."""
    studies, blocks = result["studies"], result["blocked_tau_b"].get("blocks", 0)
    if studies < MIN_STUDIES:
        return (f"{studies} studies, fewer than {MIN_STUDIES}: the intervals are not reliable "
                "95 % intervals")
    if blocks < MIN_STUDIES:
        return (f"blocked tau-b from {blocks} studies, fewer than {MIN_STUDIES}: its interval "
                "is not a reliable 95 % interval")
    return None


def _fmt(stat: Optional[dict[str, Any]]) -> str:
    if not stat or stat["value"] is None:
        return "n/a"
    low, high = stat["ci95"]
    interval = "" if low is None else f" [{low:.2f}, {high:.2f}]"
    return f"{stat['value']:.2f}{interval}"


def to_markdown(report: dict[str, Any]) -> str:
    boot = report["bootstrap"]
    lines = [
        f"## Agreement with radiologists: {report['annotations']} "
        f"({report['raters']} radiologist(s), {report['annotated_pairs']} annotated pairs)",
        "",
        "Each method's error count against the radiologists' mean count; higher agrees "
        "(the paper's |tau_b| when positive). 95 % intervals: bootstrap over studies "
        f"({boot['resamples']} resamples, seed {boot['seed']}). Blocked tau_b: within "
        "studies, studies with ties on either side left out.",
        "",
        "| method | scored | failed | not annotated |",
        "| --- | ---: | ---: | ---: |",
    ]
    for m in report["methods"]:
        lines.append(f"| {m['label']} | {m['scored']} | {m['failed']} | {m['not_annotated']} |")
    lines += [
        "",
        "| endpoint | method | n | tau_b [95% CI] | blocked tau_b [95% CI] | blocks | r [95% CI] |",
        "| --- | --- | ---: | --- | --- | ---: | --- |",
    ]
    for endpoint in report["endpoints"]:
        for label, res in endpoint["results"].items():
            if res is None:
                lines.append(f"| {endpoint['label']} | {label} | 0 | n/a | n/a | 0 | n/a |")
                continue
            mark = f" {FEW_STUDIES_MARK}" if res.get("caution") else ""
            lines.append(
                f"| {endpoint['label']} | {label} | {res['tau_b']['n']}{mark} | {_fmt(res['tau_b'])} | "
                f"{_fmt(res['blocked_tau_b'])} | {res['blocked_tau_b'].get('blocks', 0)} | "
                f"{_fmt(res['pearson_r'])} |"
            )
    prefs = [(m["label"], m["preference"]) for m in report["methods"] if m["preference"]]
    if prefs:
        lines += [
            "",
            "Pairwise preference: does the method give fewer errors to the candidate the "
            "radiologists rated higher (mean 1-5 rating)? Metric ties count as disagreeing; "
            "cases the radiologists rated equally are left out.",
            "",
            "| method | cases | agree | metric ties | accuracy [95% Wilson] |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for label, p in prefs:
            acc = "n/a" if p["accuracy"] is None else (
                f"{p['accuracy']:.2f} [{p['ci95'][0]:.2f}, {p['ci95'][1]:.2f}]")
            lines.append(f"| {label} | {p['cases']} | {p['agree']} | {p['metric_ties']} | {acc} |")
    cautions = [res["caution"] for e in report["endpoints"] for res in e["results"].values()
                if res and res.get("caution")]
    if cautions:
        lines.append(
            f"\ncaution: {FEW_STUDIES_MARK} marks {len(cautions)} row(s) whose intervals rest on "
            f"fewer than {MIN_STUDIES} studies (the bootstrap's unit), too few for a reliable "
            f"95 % interval (e.g. {cautions[0]}); see docs/agreement.md, section 4"
        )
    for note in report["notes"]:
        lines.append(f"\nnote: {note}")
    return "\n".join(lines)
