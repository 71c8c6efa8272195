"""Files in and out: the owner-only, resumable records writer and reader, the pairs a run
reads (JSONL, CSV, a saved `datasets` folder), and the paths of caches and of this checkout.
"""
