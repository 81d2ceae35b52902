"""Letter-pair randomness (agentmesh/redact/randomness.py) and the lone-token rule's use of it: random
letters of one case are secrets, words and names joined together are not."""

from __future__ import annotations

import random
import string

import pytest

from agentmesh.redact import MASK, find_secrets, redact_text
from agentmesh.redact.randomness import RANDOM_BELOW, english_score, letter_pairs, reads_random


def test_the_table_scores_english_pairs_above_random_ones() -> None:
    assert english_score("th") > 2 > english_score("qx") + 6
    assert english_score("") == 0.0 and english_score("1234") == 0.0  # no letter pairs: no opinion
    assert letter_pairs("ab1cD-eF") == ["ab", "cd", "ef"]


def test_random_letters_read_random_and_words_do_not() -> None:
    rng = random.Random(5)
    for alphabet in (string.ascii_lowercase, string.ascii_uppercase):
        tokens = ["".join(rng.choice(alphabet) for _ in range(20)) for _ in range(500)]
        assert sum(map(reads_random, tokens)) >= 475  # about one in fifty reads like words by chance
    words = ["getsnapshotdrafts", "kubernetesnamespace", "matchboxtwentytwo", "applicationjson"]
    words += ["mysqlconnectionpool", "CONTENTSECURITYPOLICY", "httpsgithubcom"]
    assert [w for w in words if reads_random(w)] == []


def test_few_letter_pairs_decide_nothing() -> None:
    assert english_score("xqzjk") < RANDOM_BELOW
    assert not reads_random("xqzjk")  # 4 pairs: `smtp`, `jwks`, `pgsql` read random too
    assert reads_random("xqzjk", min_pairs=4)


@pytest.mark.parametrize(
    "text",
    [
        "aouqgluchaiyqvgaoita",  # nine vowels in twenty: the vowel test alone took it for a word
        "QIUVOEWZAHBNTELXKDOG",
        "cjbfbdlfhx=hv695clflqwkjlpx6bid962ucu_ai",  # `=` in the alphabet, random letters before it
        "dnkey-=kqlyrw0aci6a9bcg5v7z18-qy-2ycjkx2d_xwrc",  # a field's name ends with a letter
        "3792046137582046639148175290358164280153",  # 40 digits: a number, not a SHA-1's hex
    ],
)
def test_random_tokens_of_one_case_standing_alone_are_masked(text: str) -> None:
    assert redact_text(text) == (MASK, True)


@pytest.mark.parametrize(
    "text",
    [
        "getsnapshotdraftsforreview",
        "KUBERNETESNAMESPACEDEFAULT",
        "abcdefghijklmnopqrstuvwxyz",  # the alphabet: a stand-in
        "session=Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a",  # a named field (the name reads as a word)
        "mysql=Xk9vQ2mR7tLp4Wz8Ns3Yd6Hf1Jc5Bg0a",  # a short name says nothing: a field
        "3f786850e387550fdab836ed7e6dc881de23001b",  # git rev-parse HEAD
    ],
)
def test_words_names_fields_and_digests_standing_alone_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    "text",
    [
        "af3r09fquo6s",  # 12 characters of one case: the letters (digits taken out) read random
        "TJM7KV25PUZQ",
        "kqzvbnwtrx-pqlmhgsdfv",  # random letters with a separator
        "dffx-ktqn-ck1z-6x82",  # groups of four: random letters, not a name's short parts
        "mYkb4K0IfljoJrKql8IidzklCcQr4PPcze",  # begins with `my`, yet no `my_password` stand-in
    ],
)
def test_short_grouped_and_my_prefixed_random_tokens_are_masked(text: str) -> None:
    assert redact_text(text) == (MASK, True)


@pytest.mark.parametrize(
    "text",
    [
        "cmpxchg486",  # jargon with digits: reads random only on the short test's lower bar
        "sda1-xfs-lvm",
        "utf8mb4general",
        "ubuntu2204lts",
        "x86_64-linux-gnu",
        "us-east-1",
        "web-7d4b9c8f5-x2kqp",  # a pod: a name and Kubernetes' suffixes (no vowels, no 0, 1 or 3)
        "nginx-deployment-66b6c48dd5-4jw2p",
        "my-secret-key",
        "MY_API_KEY_2",
    ],
)
def test_jargon_names_pods_and_stand_ins_standing_alone_are_kept(text: str) -> None:
    assert redact_text(text) == (text, False)


@pytest.mark.parametrize(
    ("text", "changed"),
    [
        # Letters and digits typed as runs, alone: gitleaks' snyk rule tests take this for a key.
        ("12345678-ABCD-ABCD-ABCD-1234567890AB", True),
        ("abcdef0123456789abcdef", True),
        # A run of the digits or of the alphabet alone is filler.
        ("1234567890123456", False),
        ("abcdefghijklmnopqrstuvwxyz", False),
        ("12345678-1234-1234-1234-123456789012", False),
    ],
)
def test_a_lone_token_typed_as_runs_is_masked_unless_one_run_alone(text: str, changed: bool) -> None:
    assert redact_text(text)[1] is changed


def test_beside_a_keys_name_runs_still_mark_a_stand_in() -> None:
    text = 'api_key = "12345678-ABCD-ABCD-ABCD-1234567890AB"'
    assert [f.rule for f in find_secrets(text) if not f.rule.startswith("gitleaks:")] == []
