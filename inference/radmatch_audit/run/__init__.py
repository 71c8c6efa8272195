"""The one runner: the `Evaluator` (pipeline), each method of judging a pair, the judge-call
path (calls, answer cache, call gate), the event loop thread, the progress bar and the
embedded judge's warm-up.
"""
