"""Agreement of RadMatch (and its single-call baselines) with radiologists.

`radmatch-audit agreement RECORDS... --annotations SET` (docs/agreement.md): Kendall's tau-b,
blocked tau-b and Pearson r per endpoint, with study-bootstrap intervals.
"""

from radmatch_audit.agreement.annotations import AnnotationError, AnnotationSet, Case, Endpoint
from radmatch_audit.agreement.stats import agreement, blocked_tau_b, kendall_tau_b, pearson_r
from radmatch_audit.core.vocabulary import check_choice

FORMATS = ("radpref", "rexval", "radevalexpert")


def load_annotations(path: str, fmt: str = "radpref") -> AnnotationSet:
    """The annotation set at `path`, read as `fmt` (one of FORMATS)."""
    check_choice(fmt, FORMATS, "The annotation format")
    if fmt == "radpref":
        from radmatch_audit.agreement.radpref import load_radpref

        return load_radpref(path)
    if fmt == "rexval":
        from radmatch_audit.agreement.rexval import load_rexval

        return load_rexval(path)
    if fmt == "radevalexpert":
        from radmatch_audit.agreement.radevalexpert import load_radevalexpert

        return load_radevalexpert(path)


__all__ = [
    "AnnotationError", "AnnotationSet", "Case", "Endpoint", "FORMATS", "agreement",
    "blocked_tau_b", "kendall_tau_b", "load_annotations", "pearson_r",
]
