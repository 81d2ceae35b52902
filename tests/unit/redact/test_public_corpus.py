"""Issue 40: the redactor on gitleaks' own samples (tests/secretcorpus), sample by sample.

The acceptance figures themselves are printed by `python -m bench.bench_redaction` (held-out and tune
halves, beside detect-secrets and gitleaks alone); here: no sample is reported redacted while its
secret survives, every finding is masked whole, and recall and false positives do not fall below what
the bench measured when this was written (so a regression fails the suite, not just the bench).
"""

from __future__ import annotations

import pytest

from agentmesh.redact import MASK, find_secrets, redact_text
from agentmesh.redact.gitleaks_rules import default_rules
from agentmesh.redact.spans import mask
from tests.secretcorpus.corpus import Sample, corpus, generate, half_of
from tests.secretcorpus.scoring import KINDS, RUN, Outcome, Score, score, survives


@pytest.fixture(scope="module")
def samples() -> tuple[Sample, ...]:
    return corpus()


@pytest.fixture(scope="module")
def scores(samples: tuple[Sample, ...]) -> dict[str, Score]:
    return {half: score(redact_text, [s for s in samples if s.half == half]) for half in ("heldout", "tune")}


def test_the_corpus_is_gitleaks_rule_tests_whole(samples: tuple[Sample, ...]) -> None:
    kinds = {kind: [s for s in samples if s.kind == kind] for kind in KINDS}
    assert len({s.rule for s in samples}) >= 200
    assert len(kinds["generated"]) >= 5000 and len(kinds["handwritten"]) >= 350
    assert len(kinds["bare"]) >= 200 and len(kinds["near_miss"]) >= 350
    # Every template of utils/generate.go was used, each on every rule that calls GenerateSampleSecrets.
    templates = {s.template for s in kinds["generated"] if s.template and s.template != "GenerateSampleSecret"}
    assert len(templates) >= 25
    assert {"go - short", "make - shell assignment", "logstash", "php - string concat", "xml - element multiline"} <= (
        templates
    )
    # Both halves hold a fair share of the rules.
    halves = {half_of(rule) for rule in {s.rule for s in samples}}
    assert halves == {"tune", "heldout"}


def test_generation_is_reproducible_for_a_seed() -> None:
    first, second, other = generate(3), generate(3), generate(4)
    assert first == second
    assert [s.text for s in first] != [s.text for s in other]


def test_every_true_positive_holds_its_secret(samples: tuple[Sample, ...]) -> None:
    for s in samples:
        if s.kind != "near_miss":
            assert s.secrets and all(secret in s.text for secret in s.secrets), s


@pytest.mark.parametrize("half", ["heldout", "tune"])
def test_no_text_is_reported_redacted_while_its_secret_survives(scores: dict[str, Score], half: str) -> None:
    """Per sample: changed=True means no 12-character run of the secret is left."""
    leaks = [(o.sample.rule, o.sample.text[:80], o.redacted[:80]) for o in scores[half].leaks]
    assert leaks == []


def test_a_caught_sample_keeps_no_run_of_its_secret(samples: tuple[Sample, ...]) -> None:
    checked = 0
    for s in samples[::7]:
        if s.kind == "near_miss":
            continue
        out, changed = redact_text(s.text)
        outcome = Outcome(s, out, changed)
        if outcome.caught:
            for secret in s.secrets:
                runs = [secret[i : i + RUN] for i in range(max(1, len(secret) - RUN + 1))]
                assert not any(run in out for run in runs), (s.rule, out[:120])
            checked += 1
    assert checked > 500


def test_changed_only_when_every_finding_is_masked_whole(samples: tuple[Sample, ...]) -> None:
    for s in samples[::5]:
        findings = find_secrets(s.text)
        out, changed = mask(s.text, findings)
        assert changed == bool(findings), (s.rule, s.text[:80])
        for f in findings:
            value = s.text[f.start : f.end]
            if len(value) >= 6 and value not in MASK:
                assert value not in out, (f.rule, value, out[:160])


# What bench/bench_redaction.py measured (seed 40) after issue 40's sixth pass (held-out bare 95.3 %,
# near misses masked 9.5 % / tune 12.0 %), less a little slack.
FLOORS = {
    "heldout": {"generated": 0.99, "handwritten": 0.99, "bare": 0.945},
    "tune": {"generated": 0.99, "handwritten": 0.99, "bare": 0.98},
}
FP_CEILINGS = {"heldout": 0.105, "tune": 0.13}


@pytest.mark.parametrize("half", ["heldout", "tune"])
def test_recall_and_false_positives_hold(scores: dict[str, Score], half: str) -> None:
    result = scores[half]
    for kind, floor in FLOORS[half].items():
        missed = [(o.sample.rule, o.sample.text[:80]) for o in result.misses if o.sample.kind == kind]
        assert result.by_kind[kind].rate >= floor, missed
    flagged = [(o.sample.rule, o.sample.text[:80]) for o in result.false_positives]
    assert result.by_kind["near_miss"].rate <= FP_CEILINGS[half], flagged


def test_gitleaks_rules_alone_find_every_templated_sample(samples: tuple[Sample, ...]) -> None:
    """The port of gitleaks' detector (keywords, groups, entropy, allowlists) agrees with its rule tests."""
    missed = []
    for s in samples:
        if s.kind == "generated" and s.template:
            out, _ = mask(s.text, default_rules().findings(s.text))
            if any(survives(secret, out) for secret in s.secrets):
                missed.append((s.rule, s.template))
    assert missed == []
