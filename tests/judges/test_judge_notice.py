"""judges/judge_notice.py: which judge answered, by host:port, never a path, query or key."""

from radmatch_audit.judges.judge_notice import describe, endpoint_host


def test_describe_and_endpoint_host():
    assert endpoint_host("http://u:p@10.0.0.2:8000/v1?k=1") == "10.0.0.2:8000"
    assert endpoint_host("http://[::1]:8000/v1") == "[::1]:8000"
    line = describe({"backend": "transformers", "model": "SmolLM2-135M-Instruct", "endpoints": [],
                     "embedded_small_judge": True})
    assert line == "judge: transformers / SmolLM2-135M-Instruct, in process (embedded small judge: not clinical)"
