"""Issue 37's three sentences, and the phrasing families around them: a plain-word fact with no number
is kept verbatim at every budget, a correction leaves one current value under one key ("refund" /
"refund amount" are one thing), and "from X" is not a correction unless the sentence says so."""

from __future__ import annotations

import pytest

from agentmesh.config import ContextSettings
from agentmesh.store import Store
from context_svc.engine import ContextEngine
from context_svc.facts.entities import KnownFact, extract_known
from context_svc.facts.known import KNOWN_FACTS_HEADER
from context_svc.model import Caller, Message, Role

OPERATOR = Caller("oncall", is_operator=True)
PLAN = "The customer is on the Pro plan, not Enterprise."


def facts(text: str) -> dict[str, KnownFact]:
    return {fact.key: fact for fact in extract_known([text])}


async def _session(engine: ContextEngine, lines: list[tuple[Role, str]]) -> None:
    await engine.create_session(OPERATOR, session_id="s1", goal="settle the customer's billing question")
    for role, text in lines:
        await engine.append_message(OPERATOR, "s1", Message(role, text))


def _known(view_system: str) -> list[str]:
    if KNOWN_FACTS_HEADER not in view_system:
        return []
    return [line for line in view_system.split(KNOWN_FACTS_HEADER, 1)[1].splitlines() if line.startswith("- ")]


@pytest.mark.parametrize("budget", [2000, 4000, 8000])
async def test_a_plain_word_fact_without_a_number_is_kept_at_every_budget(store: Store, budget: int) -> None:
    # Newer user lines without values or constraints, and assistant narration: the plan line has no
    # number, so only its plain-word constraint ("not") keeps it ahead of them.
    chatter = [
        (Role.USER, f"Thanks, could you look at the {word} dashboard again and tell me what you see there?")
        if i % 2 == 0
        else (Role.ASSISTANT, f"I looked at invoice batch {i} and the ledger entries for week {i % 52}; nothing odd.")
        for i, word in enumerate(["billing", "ledger", "invoice", "payments", "customer", "account"] * 70)
    ]
    # In the middle: not the opening line (the summary's "User intent" quotes that), not a recent one.
    await _session(ContextEngine(ContextSettings(), store), [*chatter[:100], (Role.USER, PLAN), *chatter[100:]])
    engine = ContextEngine(ContextSettings(), store)
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=budget)
    assert view.total_tokens <= budget
    assert any(PLAN in m.content for m in view.messages), budget


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("The refund amount is 1,250 EUR.", "Correction: the refund is 1,205 EUR."),
        ("The refund is 1,250 EUR.", "Correction: the refund amount is 1,205 EUR."),
        ("退款金额是1,250 EUR。", "更正：退款改为1,205 EUR。"),
    ],
)
async def test_a_correction_leaves_one_current_value_under_one_key(store: Store, first: str, second: str) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await _session(engine, [(Role.USER, first), (Role.ASSISTANT, "Noted."), (Role.USER, second)])
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=2000)
    known = _known(view.messages[0].content)
    refund = [line for line in known if line.startswith("- refund")]
    assert len(refund) == 1, known
    assert refund[0].startswith("- refund: 1,205 EUR (corrected from 1,250 EUR)"), refund
    _, entities = await engine.get_session(OPERATOR, "s1")
    assert entities.get("refund") == "1,205 EUR" and "refund amount" not in entities


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("Ticket owner: Alice from billing-svc.", "owner", "Alice"),
        ("The owner is Bob, who came from ledger-svc last year.", "owner", "Bob"),
    ],
)
def test_from_x_is_not_a_correction(text: str, key: str, value: str) -> None:
    got = facts(text)
    assert got[key].value == value
    assert all(not fact.corrected_from and not fact.correction for fact in got.values()), got


def test_went_from_x_to_y_is_not_a_correction_and_stays_quoted() -> None:
    got = facts("Traffic went from 1,200 USD to 1,500 USD of spend last month.")
    assert all(not fact.corrected_from for fact in got.values()), got
    # No certain label: kept as a quote of its clause, never under an invented key.
    assert all(fact.uncertain for fact in got.values()), got


@pytest.mark.parametrize(
    ("text", "key", "value", "old"),
    [
        ("Change the refund cap from 200 USD to 250 USD.", "refund cap", "250 USD", "200 USD"),
        ("We updated the deadline from June 1 to June 5.", "deadline", "June 5", "June 1"),
        ("负责人从Bob改为Alice。", "owner", "Alice", "Bob"),
    ],
)
def test_a_sentence_that_says_it_changes_a_value_still_corrects(text: str, key: str, value: str, old: str) -> None:
    fact = facts(text)[key]
    assert (fact.value, fact.corrected_from) == (value, old)


async def test_ticket_owner_from_a_service_renders_no_correction(store: Store) -> None:
    engine = ContextEngine(ContextSettings(), store)
    await _session(engine, [(Role.USER, "Ticket owner: Alice from billing-svc.")])
    view = await engine.build_context(OPERATOR, "s1", budget_tokens=1000)
    system = view.messages[0].content
    assert "corrected from" not in system
    assert any(line.startswith("- owner: Alice") for line in _known(system))


def test_related_keys_merge_only_when_the_modifier_is_itself_the_value() -> None:
    got = facts("The refund amount is 120 USD and the order amount is 300 USD.")
    assert (got["refund"].value, got["order amount"].value) == ("120 USD", "300 USD")
    assert facts("The payment amount is 10 USD.")["payment"].value == "10 USD"
    assert facts("The refund cap is 10 USD.")["refund cap"].value == "10 USD"


PEOPLE = ["Alice", "Bob", "Carol", "Dave", "Erin"]
SERVICES = ["billing-svc", "payment-svc", "ledger-api", "refund-proxy"]
NOT_CORRECTIONS = [
    "Ticket owner: {p} from {s}.",
    "The owner is {p} from {s}.",
    "{p} came from {s} last year.",
    "Contact: {p} from {s}, on call this week.",
    "负责人是来自{s}的{p}。",
]


@pytest.mark.parametrize("template", NOT_CORRECTIONS)
def test_no_from_phrasing_is_ever_a_correction(template: str) -> None:
    for p in PEOPLE:
        for s in SERVICES:
            text = template.format(p=p, s=s)
            got = facts(text)
            assert all(not f.corrected_from and not f.correction for f in got.values()), (text, got)
            assert all(s != f.value for f in got.values() if f.key in ("owner", "contact")), (text, got)
