"""gitleaks' rule matcher (agentmesh/redact/gitleaks_rules.py) on small rule sets written for each test:
the keyword prefilter, the secret's group, the entropy threshold, allowlists of every target and
condition, vetoes, vendor prefixes; and the vendored rule set loads whole."""

from __future__ import annotations

from typing import Any

import pytest

from agentmesh.redact.gitleaks_rules import GENERIC, TOML, Allowlist, RuleSet, default_rules, shannon_entropy
from agentmesh.redact.spans import Finding

KEY = "k9Xq2Lm7Rt4Wz8Ns3Yd6"  # 20 characters, entropy about 4.3


def rules(*rule: dict[str, Any], **config: Any) -> RuleSet:
    return RuleSet({"rules": list(rule), **config})


def rule(**fields: Any) -> dict[str, Any]:
    return {"id": "acme", "regex": r"acme_([A-Za-z0-9]{20})", "keywords": ["ACME_"], **fields}


def spans(found: list[Finding]) -> list[tuple[int, int, str]]:
    return [(f.start, f.end, f.rule) for f in found]


# --- keywords and groups


def test_a_rule_runs_only_when_one_of_its_keywords_occurs_in_any_case() -> None:
    rs = rules(rule(regex=r"(?i)acme_([A-Za-z0-9]{20})"))
    assert spans(rs.findings(f"x Acme_{KEY}")) == [(7, 27, "gitleaks:acme")]
    # The regex would match, but the keyword is absent: the rule does not run.
    rs = rules(rule(regex=r"([A-Za-z0-9]{20})", keywords=["acme"]))
    assert rs.findings(f"x {KEY}") == []
    assert spans(rs.findings(f"acme {KEY}")) == [(5, 25, "gitleaks:acme")]


def test_a_rule_without_keywords_always_runs() -> None:
    rs = rules(rule(regex=r"([A-Za-z0-9]{20})", keywords=[]))
    assert spans(rs.findings(f"x {KEY}")) == [(2, 22, "gitleaks:acme")]


def test_candidates_are_the_rules_whose_keywords_occur_in_file_order() -> None:
    rs = rules(
        rule(id="b", keywords=["beta"]),
        rule(id="a", keywords=["alpha", "beta"]),
        rule(id="c", keywords=[]),
        rule(id="d", keywords=["delta"]),
    )
    assert [r.id for r in rs.candidates("beta alpha")] == ["b", "a", "c"]
    assert [r.id for r in rs.candidates("delta")] == ["c", "d"]
    assert [r.id for r in rs.candidates("nothing")] == ["c"]


def test_keywords_are_lowercased_and_deduplicated() -> None:
    rs = rules(rule(keywords=["ACME_", "acme_", "Other"]))
    assert rs.rules[0].keywords == ("acme_", "other")


def test_the_secret_is_the_secret_group() -> None:
    rs = rules(rule(regex=r"(acme)_([A-Za-z0-9]{20})", secretGroup=2))
    assert spans(rs.findings(f"acme_{KEY}")) == [(5, 25, "gitleaks:acme")]


def test_without_a_secret_group_the_first_non_empty_group_is_the_secret() -> None:
    rs = rules(rule(regex=r"acme_(x?)([A-Za-z0-9]{20})"))
    assert spans(rs.findings(f"acme_{KEY}")) == [(5, 25, "gitleaks:acme")]


def test_without_groups_the_match_is_the_secret() -> None:
    rs = rules(rule(regex=r"acme_[A-Za-z0-9]{20}"))
    assert spans(rs.findings(f"- acme_{KEY} -")) == [(2, 27, "gitleaks:acme")]


def test_an_empty_secret_group_finds_nothing() -> None:
    rs = rules(rule(regex=r"acme_([A-Za-z0-9]{20})(x?)", secretGroup=2))
    assert rs.findings(f"acme_{KEY}") == []


def test_leading_and_trailing_newlines_of_a_match_are_not_the_secret() -> None:
    rs = rules(rule(regex=r"\n*acme_[A-Za-z0-9]{20}\n*"))
    text = f"a\n\nacme_{KEY}\n\nb"
    assert spans(rs.findings(text)) == [(3, 28, "gitleaks:acme")]
    rs = rules(rule(regex=r"\n+", keywords=[]))
    assert rs.findings("a\n\nb") == []


def test_every_match_is_found() -> None:
    rs = rules(rule())
    other = KEY[::-1]
    assert spans(rs.findings(f"acme_{KEY} acme_{other}")) == [(5, 25, "gitleaks:acme"), (31, 51, "gitleaks:acme")]


def test_a_rule_without_a_regex_is_skipped() -> None:
    rs = rules({"id": "pkcs12-file", "path": r"\.p12$"}, rule())
    assert [r.id for r in rs.rules] == ["acme"]


# --- entropy


def test_a_secret_at_or_below_the_entropy_threshold_is_vetoed_not_found() -> None:
    rs = rules(rule(regex=r"acme_([A-Za-z0-9]{8})", entropy=2.0))
    found, vetoes = rs.scan("acme_aaaabbbb")  # entropy exactly 1.0
    assert found == [] and spans(vetoes) == [(5, 13, "gitleaks:acme")]
    found, vetoes = rs.scan("acme_aabbccdd")  # entropy exactly 2.0: not above
    assert found == [] and len(vetoes) == 1
    found, vetoes = rs.scan("acme_abcdefgh")  # entropy 3.0
    assert spans(found) == [(5, 13, "gitleaks:acme")] and vetoes == []


def test_the_generic_rules_low_entropy_and_allowlisted_matches_veto_nothing() -> None:
    generic = rule(id=GENERIC, regex=r"key=([a-z]{8})", keywords=["key"], entropy=2.0)
    found, vetoes = rules(generic).scan("key=aaaabbbb")
    assert found == [] and vetoes == []
    stop = rule(id=GENERIC, regex=r"key=([a-z]{8})", keywords=["key"], allowlists=[{"stopwords": ["abcd"]}])
    found, vetoes = rules(stop).scan("key=abcdefgh")
    assert found == [] and vetoes == []


# --- allowlists


def test_an_allowlist_regex_on_the_secret_by_default() -> None:
    rs = rules(rule(allowlists=[{"regexes": ["^k9X"]}]))
    found, vetoes = rs.scan(f"acme_{KEY}")
    assert found == [] and spans(vetoes) == [(5, 25, "gitleaks:acme")]
    # The secret does not start with `acme_`: the match does, and the target is the secret.
    rs = rules(rule(allowlists=[{"regexes": ["^acme_"]}]))
    assert len(rs.findings(f"acme_{KEY}")) == 1


def test_an_allowlist_regex_on_the_match() -> None:
    rs = rules(rule(allowlists=[{"regexTarget": "match", "regexes": ["^acme_k9"]}]))
    assert rs.findings(f"acme_{KEY}") == []
    assert len(rs.findings(f"acme_{KEY[::-1]}")) == 1


def test_an_allowlist_regex_on_the_line_sees_the_matchs_line_only() -> None:
    rs = rules(rule(allowlists=[{"regexTarget": "line", "regexes": ["example"]}]))
    assert rs.findings(f"example: acme_{KEY}") == []
    assert rs.findings(f"acme_{KEY} # example") == []
    assert len(rs.findings(f"example\nacme_{KEY}\nexample")) == 1


def test_the_line_is_cut_to_a_window_around_a_match() -> None:
    rs = rules(rule(allowlists=[{"regexTarget": "line", "regexes": ["example"]}]))
    far = "example" + "x" * 1100 + " "
    assert len(rs.findings(f"{far}acme_{KEY}")) == 1
    assert len(rs.findings(f"acme_{KEY}" + " " + "x" * 1100 + "example")) == 1
    near = "example" + "x" * 900 + " "
    assert rs.findings(f"{near}acme_{KEY}") == []
    assert rs.findings(f"acme_{KEY} " + "x" * 900 + "example") == []


def test_allowlist_stopwords_match_inside_the_secret_in_any_case() -> None:
    rs = rules(rule(allowlists=[{"stopwords": ["LM7R"]}]))
    assert rs.findings(f"acme_{KEY}") == []
    assert len(rs.findings(f"acme_{KEY[::-1]}")) == 1


def test_an_and_allowlist_needs_all_its_checks() -> None:
    both = {"condition": "AND", "regexes": ["^k9"], "stopwords": ["zzzz"]}
    rs = rules(rule(allowlists=[both]))
    assert len(rs.findings(f"acme_{KEY}")) == 1  # the regex alone
    rs = rules(rule(allowlists=[{**both, "stopwords": ["wz8n"]}]))
    assert rs.findings(f"acme_{KEY}") == []  # regex and stop word
    rs = rules(rule(allowlists=[{"condition": "and", "regexes": ["^k9"]}]))
    assert rs.findings(f"acme_{KEY}") == []  # one check, met
    rs = rules(rule(allowlists=[{"condition": "AND", "stopwords": ["wz8n"]}]))
    assert rs.findings(f"acme_{KEY}") == []


def test_an_allowlist_that_needs_a_path_never_allows_a_text() -> None:
    for extra in ({"paths": [".*"]}, {"commits": ["abc"]}):
        rs = rules(rule(allowlists=[{"condition": "AND", "regexes": ["^k9"], **extra}]))
        assert len(rs.findings(f"acme_{KEY}")) == 1
    # Without AND, a path condition is one alternative among others: the regex still allows.
    rs = rules(rule(allowlists=[{"regexes": ["^k9"], "paths": [".*"]}]))
    assert rs.findings(f"acme_{KEY}") == []


def test_an_empty_allowlist_allows_nothing() -> None:
    a = Allowlist.from_toml({})
    assert not a.allows(KEY, KEY, KEY)
    assert not Allowlist.from_toml({"condition": "AND"}).allows(KEY, KEY, KEY)
    assert a.target == "secret" and a.regex is None and a.stopwords is None
    assert not a.match_all and not a.needs_path


def test_an_allowlist_regex_never_allows_an_empty_target() -> None:
    a = Allowlist.from_toml({"regexTarget": "line", "regexes": ["^$"]})
    assert not a.allows(KEY, KEY, "")
    assert a.allows(KEY, KEY, "") is False


def test_stopwords_never_allow_an_empty_secret() -> None:
    a = Allowlist.from_toml({"stopwords": ["x"]})
    assert not a.allows("", "x", "x")
    assert a.allows("x", "", "")


def test_the_older_single_table_allowlist_counts_too() -> None:
    rs = rules(rule(allowlist={"regexes": ["^k9X"]}))
    assert rs.findings(f"acme_{KEY}") == []
    rs = rules(rule(allowlist={"regexes": ["^zz"]}, allowlists=[{"regexes": ["^k9X"]}]))
    assert rs.findings(f"acme_{KEY}") == []


def test_global_allowlists_veto_every_rules_match_the_generic_one_too() -> None:
    generic = rule(id=GENERIC)
    for config in ({"allowlist": {"regexes": ["^k9X"]}}, {"allowlists": [{"stopwords": ["lm7r"]}]}):
        found, vetoes = rules(generic, **config).scan(f"acme_{KEY}")
        assert found == [] and spans(vetoes) == [(5, 25, f"gitleaks:{GENERIC}")]
    found, _ = rules(generic, allowlists=[{"regexes": ["^zz"]}]).scan(f"acme_{KEY}")
    assert len(found) == 1


# --- vendor prefixes


def test_vendor_prefixes_are_keywords_of_three_characters_or_more() -> None:
    rs = rules(
        rule(id="a", regex=r"abc_[a-z0-9]{20}", keywords=["abc_"]),
        rule(id="b", regex=r"sk[a-z0-9]{20}", keywords=["sk"]),
    )
    assert rs.vendor_prefix("ABC_k9xq2lm7rt4wz8ns3yd6")
    assert not rs.vendor_prefix("xabc_k9xq2lm7rt4wz8ns3yd6")
    assert not rs.vendor_prefix("skk9xq2lm7rt4wz8ns3yd6")
    assert not rs.vendor_prefix("abc")  # shorter than the keyword


def test_the_generic_and_semi_generic_rules_give_no_vendor_prefix() -> None:
    rs = rules(
        rule(id=GENERIC, regex=r"(?i)[\w.-]{0,50}?(?:key)[=:]([a-z0-9]{20})", keywords=["apikey"]),
        rule(id="semi", regex=r"(?i)[\w.-]{0,50}?(?:acme)[=:]([a-z0-9]{20})", keywords=["acme"]),
    )
    assert not rs.vendor_prefix("apikey12345")
    assert not rs.vendor_prefix("acme12345")
    assert not rules().vendor_prefix("anything")


def test_a_long_keywords_head_is_a_prefix_when_the_format_begins_with_it() -> None:
    rs = rules(rule(id="p", regex=r"pscale_tkn_[a-z0-9]{20}", keywords=["pscale_tkn_"]))
    assert rs.vendor_prefix("pscale_pw_abc")
    # The head must start the format literally, be 6 characters or more, and be no word.
    rs = rules(rule(id="q", regex=r"\b(?:x)?sntrys_[a-z0-9]{20}", keywords=["sntrys_eyjpyxqio"]))
    assert not rs.vendor_prefix("sntrys_other")
    rs = rules(rule(id="r", regex=r"(?i)\b(sntrys_[a-z0-9]{20})", keywords=["sntrys_eyjpyxqio"]))
    assert rs.vendor_prefix("sntrys_other")
    rs = rules(rule(id="s", regex=r"abcd_[a-z0-9]{20}", keywords=["abcd_fgh"]))
    assert not rs.vendor_prefix("abcd_other")
    rs = rules(rule(id="s", regex=r"abcde_[a-z0-9]{20}", keywords=["abcde_fgh"]))
    assert rs.vendor_prefix("abcde_other")
    rs = rules(rule(id="s", regex=r"abcde_[a-z0-9]{20}", keywords=["abcde_"]))
    assert not rs.vendor_prefix("abcde-other")  # the keyword whole is no longer than its head
    rs = rules(rule(id="t", regex=r"secret_key_[a-z0-9]{20}", keywords=["secret_key_"]))
    assert not rs.vendor_prefix("secret_other")
    rs = rules(rule(id="u", regex=r"abcdef-gh[a-z0-9]{20}", keywords=["abcdef-gh"]))
    assert rs.vendor_prefix("abcdef-zz")
    rs = rules(rule(id="v", regex=r"abcdef_[a-z0-9]{20}", keywords=["abcdef_"]))
    assert rs.vendor_prefix("abcdef_zz") and not rs.vendor_prefix("abcdezz")


# --- entropy and the vendored set


@pytest.mark.parametrize(
    ("data", "bits"), [("", 0.0), ("aaaa", 0.0), ("ab", 1.0), ("aabb", 1.0), ("abcd", 2.0), ("abcdefgh", 3.0)]
)
def test_shannon_entropy(data: str, bits: float) -> None:
    assert shannon_entropy(data) == pytest.approx(bits)


def test_shannon_entropy_divides_by_bytes() -> None:
    # Two runes of two bytes each: each rune's share is 1/4, as gitleaks computes it.
    assert shannon_entropy("éü") == pytest.approx(1.0)


def test_the_vendored_rule_set_loads_whole() -> None:
    rs = RuleSet.load(TOML)
    ids = [r.id for r in rs.rules]
    assert len(ids) > 200 and GENERIC in ids and len(set(ids)) == len(ids)
    assert default_rules() is default_rules()
    github = next(r for r in rs.rules if r.id == "github-pat")
    assert github.keywords == ("ghp_",)
    assert rs.vendor_prefix("ghp_abc") and not rs.vendor_prefix("key_abc")
    assert rs.global_allowlists


# --- matches the matcher rejects, then finds the next one


def test_an_empty_config_has_no_rules() -> None:
    rs = RuleSet({})
    assert rs.rules == [] and rs.findings(f"acme_{KEY}") == [] and not rs.global_allowlists


def test_a_rule_without_entropy_keeps_a_secret_of_no_entropy() -> None:
    rs = rules(rule())
    assert spans(rs.findings("acme_" + "a" * 20)) == [(5, 25, "gitleaks:acme")]


def test_after_an_empty_match_the_next_match_is_found() -> None:
    rs = rules(rule(regex=r"\n+|acme_[A-Za-z0-9]{20}", keywords=[]))
    assert spans(rs.findings(f"a\n\nb acme_{KEY}")) == [(5, 30, "gitleaks:acme")]


def test_after_an_empty_secret_group_the_next_match_is_found() -> None:
    rs = rules(rule(regex=r"acme_([A-Za-z0-9]{20})?-", secretGroup=1))
    assert spans(rs.findings(f"acme_- acme_{KEY}-")) == [(12, 32, "gitleaks:acme")]


def test_after_a_low_entropy_secret_the_next_match_is_found() -> None:
    rs = rules(rule(entropy=2.0))
    found, vetoes = rs.scan(f"acme_{'a' * 20} acme_{KEY}")
    assert spans(found) == [(31, 51, "gitleaks:acme")] and spans(vetoes) == [(5, 25, "gitleaks:acme")]


def test_after_an_allowed_secret_the_next_match_is_found() -> None:
    other = KEY[::-1]
    rs = rules(rule(allowlists=[{"regexes": ["^k9X"]}]))
    assert spans(rs.findings(f"acme_{KEY} acme_{other}")) == [(31, 51, "gitleaks:acme")]
    rs = rules(rule(), allowlist={"regexes": ["^k9X"]})
    assert spans(rs.findings(f"acme_{KEY} acme_{other}")) == [(31, 51, "gitleaks:acme")]


def test_only_newlines_are_trimmed_from_a_match() -> None:
    # As gitleaks does: spaces and other characters at a match's ends stay in it.
    rs = rules(rule(regex=r"acme_[A-Za-z0-9]{20} +"))
    assert spans(rs.findings(f"acme_{KEY}  x")) == [(0, 27, "gitleaks:acme")]
    rs = rules(rule(regex=r"X?acme_[A-Za-z0-9]{20}", keywords=[]))
    assert spans(rs.findings(f"Xacme_{KEY}")) == [(0, 26, "gitleaks:acme")]


# --- the match's line


def test_the_line_ends_at_the_first_newline_after_the_match() -> None:
    rs = rules(rule(allowlists=[{"regexTarget": "line", "regexes": ["example"]}]))
    assert rs.findings(f"example: acme_{KEY}\nnext line") == []
    assert len(rs.findings(f"acme_{KEY}\nexample\nmore")) == 1


def test_the_line_starts_after_the_last_newline_before_the_match() -> None:
    rs = rules(rule(allowlists=[{"regexTarget": "line", "regexes": ["example"]}]))
    assert len(rs.findings(f"x\nexample\nacme_{KEY}")) == 1
    assert rs.findings(f"a\nexample acme_{KEY}") == []
    anchored = rules(rule(allowlists=[{"regexTarget": "line", "regexes": ["^example"]}]))
    assert anchored.findings(f"\nexample acme_{KEY}") == []


def test_global_allowlists_see_the_match_and_the_line() -> None:
    other = KEY[::-1]
    rs = rules(rule(), allowlists=[{"regexTarget": "match", "regexes": ["^acme_k9"]}])
    assert spans(rs.findings(f"acme_{KEY} acme_{other}")) == [(31, 51, "gitleaks:acme")]
    rs = rules(rule(), allowlists=[{"regexTarget": "line", "regexes": ["example"]}])
    assert rs.findings(f"example acme_{KEY}") == []
    assert len(rs.findings(f"acme_{KEY}")) == 1


def test_each_of_several_allowlist_regexes_and_stopwords_allows() -> None:
    regexes = Allowlist.from_toml({"regexes": ["^zz", "^k9X"]})
    assert regexes.allows(KEY, "", "") and regexes.allows("zzz", "", "") and not regexes.allows("q", "", "")
    words = Allowlist.from_toml({"stopwords": ["zzzz", "LM7R"]})
    assert words.allows(KEY, "", "") and words.allows("azzzzb", "", "") and not words.allows("q", "", "")


def test_an_allowlist_condition_other_than_and_is_or() -> None:
    for condition in ({}, {"condition": "OR"}, {"condition": ""}):
        a = Allowlist.from_toml({**condition, "regexes": ["^k9"], "stopwords": ["zzzz"]})
        assert not a.match_all and a.allows(KEY, "", "")


# --- prefixes from keywords


def test_a_keyword_of_exactly_three_characters_is_a_prefix() -> None:
    rs = rules(rule(id="a", regex=r"abc[a-z0-9]{20}", keywords=["abc"]))
    assert rs.vendor_prefix("abcdef")


def test_a_keywords_head_ends_at_its_first_separator() -> None:
    rs = rules(rule(id="a", regex=r"abcdef-gh-ij[a-z0-9]{20}", keywords=["abcdef-gh-ij"]))
    assert rs.vendor_prefix("abcdef-zz")
    # A separator leading the keyword cuts a head of one character: none.
    rs = rules(rule(id="b", regex=r"-abcdefg_hij[a-z0-9]{20}", keywords=["-abcdefg_hij"]))
    assert not rs.vendor_prefix("-abcdefg_zz")
