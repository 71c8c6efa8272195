"""The Hugging Face faces: the `evaluate` metric, the RL reward, installing the metric
script, and the checks of optional extras.
"""
