"""What the resolver keeps on a knowledge object between queries (the rule sets per option, the
compiled rules per host, the rules still active per prefix of a search) changes no answer: a
sequence of varied queries on one knowledge object answers exactly as each query on a knowledge
loaded afresh, explanations of failures (searches that disable rules) included. Pure logic on
the real matrix."""

from __future__ import annotations

from imagebuild import knowledge
from imagebuild.render import images as I
from imagebuild.resolve import solver as R

from conftest import ROOT

MATRIX = str(ROOT / "matrix.yaml")

QUERIES = [
    ("resolve", R.Host(driver="535.104.05", gpu="H100"), {"pytorch": ">=2.4"}, {}),
    ("resolve", R.Host(driver="470.82.01", gpu="A100"), {"pytorch": "==2.9.1"}, {}),
    ("resolve", R.Host(driver="580.95.05", gpu="H100"), {}, {"system": {"cudnn": "8.9.7",
                                                                      "nccl": "2.18.3"}}),
    ("resolve", R.Host(driver="550.54.15", gpu="GH200"), {"pytorch": ">=2.0"}, {}),
    ("resolve", R.Host(driver="535.104.05", gpu="H100"), {"cuda": "12.4"},
     {"allow_unverified": True}),
    ("resolve", R.Host(), {"pytorch": "==2.9.1", "cuda": "12.8", "os": "ubuntu24.04"},
     {"repo_cuda": True, "explain": False}),
    ("resolve", R.Host(driver="535.104.05", gpu="none"), {}, {}),
    ("check", R.Host(driver="535.104.05", gpu="H100"),
     {"pytorch": "2.4.1", "cuda": "12.4.1", "python": "3.11", "os": "ubuntu22.04"}, {}),
]


def _ask(k, query):
    kind, host, wishes, opts = query
    if kind == "check":
        return R.check(k, host, wishes, **opts).to_json()
    return R.resolve(k, host, wishes, **opts).to_json()


def test_queries_on_one_knowledge_answer_as_on_a_fresh_one():
    fresh = [_ask(knowledge.load(MATRIX), q) for q in QUERIES]
    shared = knowledge.load(MATRIX)
    I.expand(shared)                              # dozens of queries first, as `resolve` makes
    for _ in range(2):                            # twice: the second pass reads what the first kept
        assert [_ask(shared, q) for q in QUERIES] == fresh
    assert [_ask(shared, q) for q in reversed(QUERIES)] == fresh[::-1]
    assert any(not a["ok"] and len(a["explanation"]) > 2 for a in fresh)   # a chain was explained


def test_enumeration_on_one_knowledge_matches_a_fresh_one():
    host = R.Host(driver="550.54.15", gpu="A100")
    fresh = [g.to_json() for g in R.enumerate_stacks(knowledge.load(MATRIX), host, {"cuda": "12.4"})]
    shared = knowledge.load(MATRIX)
    R.resolve(shared, host, {"cuda": "12.4"})
    for _ in range(2):
        assert [g.to_json() for g in R.enumerate_stacks(shared, host, {"cuda": "12.4"})] == fresh
    assert fresh
