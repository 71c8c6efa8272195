"""Test and benchmark helpers shipped with radmatch: a fake OpenAI-compatible judge server."""
