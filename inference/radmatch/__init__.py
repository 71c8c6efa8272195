"""RadMatch: auditable radiology report evaluation by finding-level matching."""

__version__ = "0.1.0"
