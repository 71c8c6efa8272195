"""RadMatch as a Hugging Face `evaluate` metric: metadata and a thin adapter.

The pipeline, the scoring and the output shape live in the `radmatch` package
(`radmatch_audit.hf.metric`); this file only declares the metric. Load it with any of::

    evaluate.load("radmatch")                          # after `radmatch-audit install-metric`
    evaluate.load(radmatch_audit.hf.metric.script_path())       # from the installed package
    evaluate.load("path/to/radmatch_metric.py")        # from a checkout

All three work offline (HF_EVALUATE_OFFLINE=1).
"""

import datasets
import evaluate

import radmatch_audit.hf.metric

_HOMEPAGE = "https://github.com/raidium-med/RadMatch"
_LICENSE = "Apache-2.0"
_CITATION = """\
@misc{corbiere2026radmatch,
  title  = {{RadMatch}: Auditable Radiology Report Evaluation via Finding-Level Matching},
  author = {Corbi{\\`e}re, Charles and Machado, L{\\'e}o and Charley, Aubin and
            Callard, Baptiste and Manceron, Pierre and Dancette, Corentin},
  year   = {2026},
  note   = {Raidium, Paris, France}
}
"""
EXTRAS = radmatch_audit.hf.metric.PER_PAIR_EXTRAS

_DESCRIPTION = """\
RadMatch scores a candidate radiology report against a reference report by counting
clinically actionable errors. An LLM judge extracts the findings of both reports,
matches them and grades the matched pairs; deterministic rules then derive outcomes
(correct, partial, incorrect, missed, spurious), significance tiers and per-pair
actionable errors. Every pair leaves an audit record of each verdict, with verbatim
evidence, so that a score can be traced to the findings behind it.

Judge configuration (keyword arguments of evaluate.load, or RADMATCH_* environment
variables; keyword arguments win): with no base_url the embedded CPU judge
(SmolLM2-135M, which only exercises the pipeline) runs in-process; with base_url an
OpenAI-compatible server (vLLM, `serve/start_vllm.sh`) is used. Report text is sent
only to loopback or private-network addresses unless allow_remote_endpoint=True.
Options:
""" + radmatch_audit.hf.metric.options_help() + """
Judge answers are cached on disk (cache=False to turn off) and in memory for the life
of the metric object: re-evaluating the same references every epoch costs judge calls
only for the new candidates.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate reports, one per pair.
    references (`list` of `str`): reference reports, aligned with `predictions`.
    indications (`list` of `str` or None, optional): the clinical indication per pair.
        Without it, the indication is read from an "Indication:" line of the reference.
    study_ids (`list` of `str` or None, optional): study ids, kept in the records; the
        interval of the mean resamples studies (a pair without one is its own study).
    pair_ids (`list` of `str`, optional): unique pair ids (default: the position).
    modalities (`str` or `list` of `str`, optional): modality per pair (default: the
        metric's `modality` option, "chest_xray"). Picks the few-shot exemplars.
    The optional extras go with their pairs, to `compute()` or to each `add_batch()`
    (a list per batch, like `predictions`); an extra given to a final `compute()`
    without predictions covers every pair added and replaces what the batches gave.
    progress (`bool`, optional): show the progress bar on stderr (default: the
        metric's `progress` option, on).
Returns:
    actionable_errors (`list` of `int` or None): per pair, aligned with the inputs; None
        when the pair failed (a failure is never 0 errors).
    mean_actionable_errors (`float` or None): over the scored pairs.
    mean_actionable_errors_ci (`list` of two `float`, or None): its 95 % interval,
        bootstrap over studies (2,000 resamples, seeded: the same pairs give the same
        interval).
    triage_precision, triage_recall, actionable_precision, actionable_recall (`float`
        or None): pooled over the scored pairs; None when undefined.
    n_pairs, n_scored, n_failed (`int`).
    summary (`dict`): the corpus summary (outcome counts, safety tiers with 95 % Wilson
        intervals, attribution, subsets, failed pairs).
    records (`list` of `dict`): the audit record of every pair (docs/records.md).
    judge_calls (`int`): answers this call got from the judge (cached ones cost none).
Examples:
    Loading and inspecting the inputs (no judge runs until `compute`):

    >>> import evaluate
    >>> radmatch_metric = evaluate.load("radmatch_metric.py")
    >>> sorted(radmatch_metric.features)
    ['indications', 'modalities', 'pair_ids', 'predictions', 'references', 'study_ids']

    A judge that cannot be reached fails every pair; the pair is reported as failed:

    >>> radmatch_metric = evaluate.load(
    ...     "radmatch_metric.py", base_url="http://127.0.0.1:9/v1", retries=1, cache=False)
    >>> results = radmatch_metric.compute(
    ...     predictions=["No pleural effusion."],
    ...     references=["Small right pleural effusion."],
    ...     study_ids=["study-1"], progress=False)
    >>> results["actionable_errors"], results["n_failed"], results["mean_actionable_errors"]
    ([None], 1, None)
    >>> results["records"][0]["study_id"], results["records"][0]["error"][:8]
    ('study-1', 'extract:')
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class RadMatch(evaluate.Metric):
    """Counts clinically actionable errors of candidate reports; see `radmatch_audit.hf.metric`."""

    def __init__(self, **kwargs):
        module_kwargs, options = radmatch_audit.hf.metric.split_init_kwargs(kwargs)
        super().__init__(**module_kwargs)
        self._scorer = radmatch_audit.hf.metric.MetricScorer(**options)
        self._final_extras = {}

    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage=_HOMEPAGE,
            license=_LICENSE,
            inputs_description=_KWARGS_DESCRIPTION,
            # the per-pair extras are stored beside the pairs (absent: "", read back as None)
            features=datasets.Features(
                {name: datasets.Value("string") for name in ("predictions", "references", *EXTRAS)}
            ),
            codebase_urls=[_HOMEPAGE],
            reference_urls=[],
        )

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add pairs, with any per-pair extras (`indications`, `study_ids`, `pair_ids`,
        `modalities`) as lists of the batch's length (`modalities` may be one string)."""
        n = len(predictions) if predictions is not None else len(references or [])
        extras = radmatch_audit.hf.metric.batch_extras(n, kwargs)
        return super().add_batch(predictions=predictions, references=references, **extras)

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one pair; extras by their singular names (`study_id=...`) or the plural ones."""
        singular = {name[:-1]: name for name in EXTRAS}
        given = {singular.get(k, k): v for k, v in kwargs.items()}
        extras = radmatch_audit.hf.metric.batch_extras(1, {k: None if v is None else [v] for k, v in given.items()})
        return super().add(prediction=prediction, reference=reference,
                           **{k: v[0] for k, v in extras.items()})

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Score the pairs given here and those added with `add_batch`/`add`."""
        extras = {k: kwargs.pop(k) for k in EXTRAS if k in kwargs}
        if predictions is None and references is None:  # after add_batch: covering every pair
            self._final_extras = extras
            try:
                return super().compute(**kwargs)
            finally:
                self._final_extras = {}
        n = len(predictions) if predictions is not None else len(references)
        return super().compute(predictions=predictions, references=references,
                               **radmatch_audit.hf.metric.batch_extras(n, extras), **kwargs)

    def _compute(self, predictions, references, progress=None, **columns):
        unknown = {k: v for k, v in columns.items() if k not in EXTRAS}  # refused, with a hint
        extras = radmatch_audit.hf.metric.stored_extras(columns, self._final_extras)
        return self._scorer.compute(predictions, references, progress=progress, **extras, **unknown)
