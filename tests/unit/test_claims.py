"""The claims check (agentmesh/claims.py, issue 41): the detector and the ledger."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentmesh.claims import LedgerEntry, cited_gaps, detect, tools_for, unsupported

OPS = ["restart_pod", "delete_pod", "send_notification"]
DATA = Path(__file__).parents[2] / "bench" / "data"


@pytest.mark.parametrize(
    "text",
    [
        "I restarted the pod.",
        "The pod payment-7f9c was restarted successfully.",
        "Restarted the pod; all good.",
        "The restart succeeded.",
        "Pod 已重启成功。",
        "我已经把 Pod 删除了。",
        "通知已发送。",
    ],
)
def test_completed_claims_are_detected(text: str) -> None:
    assert detect(text), text


@pytest.mark.parametrize(
    "text",
    [
        "I could not restart the pod: APPROVAL_DENIED.",
        "I will restart the pod once approved.",
        "Should I restart the pod?",
        'You asked me to "restart the pod, make sure it is restarted".',
        "The pod has restarted 5 times in the last hour.",
        "The pod was restarted by the kubelet.",
        "Plan: 1. Restart the pod 2. Check it",
        "无法重启 Pod。",
        "建议重启 Pod。",
        "Pod 已重启 3 次。",
        "用户说“已重启”，我没有执行。",
    ],
)
def test_negations_plans_quotes_and_observations_are_not_claims(text: str) -> None:
    assert detect(text) == [], text


def test_a_claim_backed_by_a_succeeded_write_is_supported() -> None:
    ledger = [LedgerEntry("c1", "restart_pod", "OK", True)]
    verdict = unsupported("I restarted the pod.", ledger, OPS)
    assert verdict.verdict == "supported" and verdict.claims


def test_the_gap_names_the_refusal_of_the_last_attempt() -> None:
    ledger = [LedgerEntry("c1", "restart_pod", "APPROVAL_DENIED", True)]
    verdict = unsupported("Pod 已重启成功。", ledger, OPS)
    assert verdict.verdict == "unsupported"
    assert "no restart_pod call succeeded in this task" in verdict.gap
    assert "refused: APPROVAL_DENIED" in verdict.gap
    never = unsupported("I restarted the pod.", [], OPS)
    assert "it was never called" in never.gap
    waiting = unsupported("I restarted the pod.", [LedgerEntry("c1", "restart_pod", "APPROVAL_REQUIRED", True)], OPS)
    assert "APPROVAL_REQUIRED" in waiting.gap


def test_a_claim_no_write_tool_could_make_is_not_judged() -> None:
    assert unsupported("I restarted the pod.", [], ["get_pod"]).verdict == "none"
    assert tools_for("restart", ["restart_pod", "get_pod", "rollout_restart"]) == ["restart_pod", "rollout_restart"]


def test_with_no_write_tool_the_text_is_not_even_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing could back a claim, so none is looked for (issue 45: the scan cost every task ~1 % of
    the dispatcher's CPU); a write in the ledger still makes its tool one that can."""

    def scanned(text: str) -> Any:
        raise AssertionError("scanned")

    monkeypatch.setattr("agentmesh.claims.detect", scanned)
    assert unsupported("I restarted the pod.", [LedgerEntry("c1", "get_pod", "OK", False)], []).verdict == "none"
    with pytest.raises(AssertionError, match="scanned"):
        unsupported("I restarted the pod.", [LedgerEntry("c1", "restart_pod", "OK", True)], [])


def test_citations_are_checked_against_the_ledger() -> None:
    ledger = [
        LedgerEntry("c1", "restart_pod", "OK", True),
        LedgerEntry("c2", "get_pod", "OK", False),
        LedgerEntry("c3", "delete_pod", "APPROVAL_DENIED", True),
    ]
    assert cited_gaps([{"tool": "restart_pod", "tool_call_id": "c1"}], ledger, OPS).verdict == "supported"
    for actions, gap in [
        ([{"tool": "restart_pod", "tool_call_id": "c9"}], "no tool call of this task"),
        ([{"tool": "delete_pod", "tool_call_id": "c1"}], "that call was restart_pod"),
        ([{"tool": "delete_pod", "tool_call_id": "c3"}], "did not succeed (APPROVAL_DENIED)"),
        ([{"tool": "get_pod", "tool_call_id": "c2"}], "not a write tool"),
        (["restart"], "not an object"),
    ]:
        verdict = cited_gaps(actions, ledger, OPS)
        assert verdict.verdict == "unsupported" and gap in verdict.gap, (actions, verdict)
    assert cited_gaps([], ledger, OPS).verdict == "none"


@pytest.mark.parametrize(
    ("name", "size"), [("claims_corpus.json", 150), ("claims_heldout.json", 60), ("claims_fresh.json", 40)]
)
def test_the_committed_corpora_meet_the_targets(name: str, size: int) -> None:
    cases = json.loads((DATA / name).read_text())["cases"]
    claims = [c for c in cases if c["unsupported_claim"]]
    others = [c for c in cases if not c["unsupported_claim"]]
    assert len(cases) >= size and claims and others and {c["lang"] for c in cases} == {"en", "zh"}

    def flagged(case: dict[str, Any]) -> bool:
        ledger = [LedgerEntry(e[0], e[1], e[2], bool(e[3]) if len(e) > 3 else True) for e in case["ledger"]]
        return unsupported(str(case["text"]), ledger, case["write_tools"]).verdict == "unsupported"

    detected = sum(flagged(c) for c in claims) / len(claims)
    false_pos = sum(flagged(c) for c in others) / len(others)
    assert detected >= 0.95 and false_pos <= 0.02, (detected, false_pos)
