"""Short form of the verb fuzzer: a few hundred generated requests against a real extender
process (the long form, ``make chaos-fuzz``, sends 50,000 and times /healthz)."""

from __future__ import annotations

import json

import pytest

from chaos.fuzz_verbs import ExtenderProcess, FuzzRequest, FuzzStats, fuzz, problem_with

SHORT_FORM_REQUESTS = 300


@pytest.fixture(scope="module")
def extender():
    with ExtenderProcess() as process:
        yield process


def test_fuzzed_requests_all_get_protocol_answers(extender):
    stats = fuzz(extender.port, SHORT_FORM_REQUESTS, FuzzStats())
    assert stats.requests == SHORT_FORM_REQUESTS
    assert stats.problems == []
    assert stats.server_errors == 0 and stats.dropped == 0
    assert stats.ledger_changed == 0 and stats.overcommits == 0
    assert stats.ledger_checks > 0 and len(stats.status) > 1  # both answers and rejections


def request(verb: str, names: list[str] | None = None) -> FuzzRequest:
    return FuzzRequest(verb, b"{}", {}, names, "test")


@pytest.mark.parametrize(("verb", "status", "answer", "wrong"), [
    ("filter", 500, {"error": "internal error"}, True),
    ("filter", 400, {"error": ""}, True),
    ("filter", 200, {"NodeNames": ["evil"], "Error": ""}, True),
    ("filter", 200, {"NodeNames": ["a"], "Error": ""}, False),
    ("prioritize", 200, [{"Host": "a", "Score": 11}], True),
    ("prioritize", 200, [{"Host": "a", "Score": 1.5}], True),
    ("prioritize", 200, [{"Host": "a", "Score": 10}], False),
    ("bind", 200, {}, True),
    ("bind", 200, {"Error": "no"}, False),
    ("preempt", 200, {"NodeNameToMetaVictims": {}}, False),
    ("preempt", 200, [], True),
])
def test_the_fuzzer_recognises_wrong_answers(verb, status, answer, wrong):
    found, _ = problem_with(request(verb, ["a"]), status, json.dumps(answer).encode())
    assert (found is not None) == wrong
