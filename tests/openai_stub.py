"""Kept for the tests that import it: the server lives in radmatch.testing.fake_server."""
from radmatch.testing.fake_server import StubServer, toy_answer
__all__ = ["StubServer", "toy_answer"]
