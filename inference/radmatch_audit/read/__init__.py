"""Everything that reads records back: the one reader, corpus summaries, comparisons of two
runs, recompute, the red-team checker and the study-clustered resampling they share.
"""
