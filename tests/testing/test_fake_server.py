"""The fake judge server (radmatch_audit.testing.fake_server) over the stdlib HTTP client only,
and the ideal-makespan scheduler the pipeline benchmark divides by."""

import http.client
import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from radmatch_audit.testing.fake_server import StubServer, messages_digest
from radmatch_audit.testing.makespan import ideal_makespan

SCHEMA = {"title": "ExtractionAnswer", "type": "object", "additionalProperties": False,
          "properties": {"findings": {"type": "array", "maxItems": 8, "items": {"type": "object"}}},
          "required": ["findings"]}


def body(report="FINDINGS: Cough.\nClear lungs.", system="You are a judge."):
    return {"model": "stub-judge", "structured_outputs": {"json": SCHEMA},
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": json.dumps({"report": report})}]}


def post(server, payload, conn=None):
    """(status, headers, body bytes) of one chat request; a fresh connection unless given."""
    host, port = server._server.server_address[:2]
    conn = conn or http.client.HTTPConnection(host, port, timeout=10)
    conn.request("POST", "/v1/chat/completions", json.dumps(payload),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, response.headers, response.read()


def content(data):
    return json.loads(json.loads(data)["choices"][0]["message"]["content"])


def test_keep_alive_serves_two_requests_over_one_connection():
    with StubServer() as server:
        host, port = server._server.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        status, _, data = post(server, body(), conn)
        sock = conn.sock
        assert status == 200 and sock is not None  # not closed after the first answer
        assert [f["text"] for f in content(data)["findings"]] == ["Cough.", "Clear lungs."]
        conn.request("GET", "/v1/models")
        models = json.loads(conn.getresponse().read())
        assert conn.sock is sock and models["data"][0]["id"] == "stub-judge"
        ports = {r["client_port"] for r in server.requests}
        assert len(ports) == 1 and len(server.requests) == 2


def test_health_models_and_prefix_cache_metrics():
    long_system = "You grade radiology reports. " * 40
    with StubServer(model="judge-x") as server:
        post(server, body(system=long_system))
        post(server, body("FINDINGS: Small effusion.", system=long_system))
        with urllib.request.urlopen(server.base_url.replace("/v1", "/health")) as response:
            assert response.status == 200
        with urllib.request.urlopen(server.base_url + "/models") as response:
            assert json.load(response)["data"][0]["id"] == "judge-x"
        with urllib.request.urlopen(server.base_url.replace("/v1", "/metrics")) as response:
            text = response.read().decode()
    values = {line.split("{")[0]: float(line.split()[-1]) for line in text.splitlines()
              if not line.startswith("#")}
    # the second prompt shares the whole system message with the first
    assert values["vllm:prefix_cache_hits_total"] >= len(long_system) // 4 - 16
    assert values["vllm:prefix_cache_queries_total"] > values["vllm:prefix_cache_hits_total"]


def test_429_carries_retry_after():
    with StubServer(faults=["429:2", "429"], retry_after=5) as server:
        status, headers, _ = post(server, body())
        assert status == 429 and headers["Retry-After"] == "2"
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(urllib.request.Request(
                server.base_url + "/chat/completions", data=json.dumps(body()).encode(),
                headers={"Content-Type": "application/json"}))
        assert caught.value.code == 429 and caught.value.headers["Retry-After"] == "5"


def test_truncated_answers_are_short():
    with StubServer(faults=["truncated", "truncated_json", "invalid"]) as server:
        with pytest.raises(http.client.IncompleteRead):
            post(server, body())  # Content-Length of the whole body, half of it sent
        status, headers, data = post(server, body())
        assert status == 200 and int(headers["Content-Length"]) == len(data)
        with pytest.raises(ValueError):
            json.loads(data)
        status, _, data = post(server, body())  # JSON, but the required key is gone
        assert status == 200 and content(data) == {}


def test_reset_closes_without_a_response():
    with StubServer(faults=["reset"]) as server:
        with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
            post(server, body())
        assert post(server, body())[0] == 200


def test_always_fail_is_decided_by_content_and_holds_on_every_attempt():
    bodies = [body(f"FINDINGS: Case {i}.") for i in range(40)]
    with StubServer(always_fail_rate=0.3) as server:
        statuses = [[post(server, b)[0] for _ in range(3)] for b in bodies]
    assert all(len(set(s)) == 1 for s in statuses)  # every attempt alike
    failing = [b for b, s in zip(bodies, statuses) if s[0] == 500]
    assert 0 < len(failing) < len(bodies)
    assert all(int(messages_digest(b)[:16], 16) / 2**64 < 0.3 for b in failing)


def test_random_faults_follow_the_seed_not_the_order():
    bodies = [body(f"FINDINGS: Case {i}.") for i in range(30)]
    runs = []
    for ordered in (bodies, bodies[::-1]):
        with StubServer(fault_rate=0.5, seed=7, fault_kinds=("500", "503")) as server:
            for b in ordered:
                post(server, b)
            runs.append({json.dumps(r["body"]): r["fault"] for r in server.requests})
    assert runs[0] == runs[1] and {"500", "503", "ok"} == set(runs[0].values())


def test_explicit_faults_go_to_requests_in_the_logs_order():
    # concurrent requests: whichever is logged first draws the first fault, so a test can
    # find the faulted call from the log alone
    faults = ["500", "503", "429:0", "400"] * 2
    long_system = "You grade radiology reports. " * 20_000  # hashing it takes a while
    with StubServer(faults=list(faults)) as server:
        bodies = [body(f"FINDINGS: Case {i}.", system=long_system) for i in range(len(faults))]
        threads = [threading.Thread(target=post, args=(server, b)) for b in bodies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        log = server.requests
    assert [r["fault"] for r in log] == faults
    assert [r["status"] for r in log] == [int(f.split(":")[0]) for f in faults]


def test_capacity_queues_requests_beyond_it():
    latency, capacity = 1.0, 3
    with StubServer(latency_s={"ExtractionAnswer": latency}, capacity=capacity) as server:
        threads = [threading.Thread(target=post, args=(server, body(f"FINDINGS: Case {i}.")))
                   for i in range(capacity + 1)]
        for thread in threads[:capacity]:
            thread.start()
        deadline = time.monotonic() + 10
        while sum("waited_s" in r for r in server.requests) < capacity:  # all three in service
            assert time.monotonic() < deadline
            time.sleep(0.002)
        threads[-1].start()
        for thread in threads:
            thread.join()
        log = server.requests
    first, last = log[:capacity], log[capacity]
    assert all(r["waited_s"] < latency / 2 and r["status"] == 200 for r in first)
    # the fourth waits until the first slot frees, `latency` after the first arrival
    slot_freed = min(r["arrived"] for r in first) + latency
    assert last["waited_s"] >= slot_freed - last["arrived"] - 0.05
    assert last["finished"] - last["arrived"] >= last["waited_s"] + latency * 0.95
    assert last["status"] == 200


def test_ideal_makespan_schedules_chains_on_the_slots():
    # two pairs sharing one reference whose extraction waits for a first call
    calls = {
        "first": (1.0, []), "ext-ref": (1.0, ["first"]),
        "ext-a": (1.0, ["first"]), "ext-b": (1.0, ["first"]),
        "match-a": (1.0, ["ext-ref", "ext-a"]), "match-b": (1.0, ["ext-ref", "ext-b"]),
        "grade-a": (1.0, ["match-a"]), "grade-b": (1.0, ["match-b"]),
    }
    assert ideal_makespan(calls, capacity=8) == 4.0  # the chain
    assert ideal_makespan(calls, capacity=1) == 8.0  # the work
    assert ideal_makespan(calls, capacity=2) == 5.0  # three extractions need two rounds
    # the longest remaining chain goes first: a long chain is not left for last
    assert ideal_makespan({"a": (1.0, []), "b": (1.0, []), "c": (1.0, ["b"])}, capacity=1) == 3.0
    chains = {"short": (1.0, []), "long": (1.0, []), "next": (5.0, ["long"])}
    assert ideal_makespan(chains, capacity=1) == 7.0  # "long" first though listed second
    assert ideal_makespan({}, capacity=4) == 0.0
    with pytest.raises(ValueError):
        ideal_makespan({"a": (1.0, ["b"]), "b": (1.0, ["a"])}, capacity=1)
