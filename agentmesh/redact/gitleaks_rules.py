"""gitleaks' rule set, run the way gitleaks runs it, for the redactor.

The rules are gitleaks' `config/gitleaks.toml` (MIT, vendored verbatim in data/ with its licence and the
commit it came from; `scripts/refresh_gitleaks.py` replaces it). Their regexes are Go RE2 syntax and are
compiled with RE2 itself (`google-re2`): the same language, and matching in linear time on hostile text.

As in gitleaks' detector (detect/detect.go): a rule runs only when one of its keywords occurs in the
lowercased text (one RE2 set over all keywords finds which); a match's secret is the rule's
`secretGroup`, else its first non-empty group, else the match; a secret whose Shannon entropy is not
above the rule's `entropy` is dropped, and so is one that the global or the rule's allowlists allow
(regexes against the secret, the match or the line; stop words in the secret; AND/OR conditions).
What gitleaks decides from a file path cannot apply to a text without one: path-only rules never fire,
allowlists that need a path never allow, and the few rules restricted to a file type (`.php`, `.tf`,
`.yaml`, `nuget.config`) run on every text, since a tool's output may be any of them. The
`gitleaks:allow` comment is not honoured: it marks a line a developer vouched for in their own
repository, which says nothing about a text an upstream sent us.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import re2

from agentmesh.redact.spans import Finding

DATA = Path(__file__).resolve().parent / "data"
TOML = DATA / "gitleaks.toml"

GENERIC = "generic-api-key"
_LINE_WINDOW = 1024
# Shorter keywords (`sk`, `ey`, `s.`, `q~`) begin random tokens by chance: not a vendor's prefix.
_MIN_PREFIX = 3
# How gitleaks' semi-generic rules begin (utils.GenerateSemiGenericRegex): an identifier naming the vendor,
# then an operator, then the value. Such a rule cannot match a token standing alone, so its keywords
# (`nrak`, `test_pub`) say nothing about one.
_SEMI_GENERIC = "[\\w.-]{0,50}?"

# A keyword's head before its first separator is a vendor's prefix too when it is at least this long.
_MIN_HEAD = 6
_WORD_HEADS = frozenset({"secret", "github", "bedrock", "private", "public", "access"})
_LEADING_SYNTAX = re.compile(r"^(?:\(\?i\))?(?:\\b)?(?:\((?:\?:)?)?")

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 64 << 20  # the generic rule's DFA needs more than RE2's 8 MiB default to stay fast


def shannon_entropy(data: str) -> float:
    """gitleaks' shannonEntropy: over the runes, divided by the length in bytes (detect/utils.go)."""
    if not data:
        return 0.0
    inverse = 1.0 / len(data.encode("utf-8", "surrogatepass"))
    return -sum(count * inverse * math.log2(count * inverse) for count in Counter(data).values())


def _prefixes(keywords: tuple[str, ...], pattern: str) -> list[str]:
    """The vendor prefixes a rule's keywords give: each keyword of 3 characters or more, and the head of
    one up to its first `_`/`-` when the rule's format begins with that head literally and it is long
    enough to be a vendor's mark (`sntrys_eyjpyxqio` -> `sntrys_`, `pscale_tkn_` -> `pscale_`; not `sk-`,
    `api_`, `secret_`: words and short heads begin other tokens)."""
    out = [k for k in keywords if len(k) >= _MIN_PREFIX]
    body = _LEADING_SYNTAX.sub("", pattern, count=1).lower()
    for k in keywords:
        cut = min((i for i in (k.find("_"), k.find("-")) if i >= 0), default=-1) + 1
        head = k[:cut]
        if _MIN_HEAD <= cut < len(k) and body.startswith(head) and head.rstrip("_-") not in _WORD_HEADS:
            out.append(head)
    return out


def _compile(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


def _any_of(words: list[str]) -> Any | None:
    """A regex matching any of the words as a substring (None for no words)."""
    unique = sorted({w.lower() for w in words if w})
    return _compile("|".join(re2.escape(w) for w in unique)) if unique else None


@dataclass(frozen=True)
class Allowlist:
    """One of gitleaks' allowlists, without its path and commit parts (a text has neither)."""

    target: str  # "secret" | "match" | "line"
    regex: Any | None
    stopwords: Any | None  # one RE2 alternation of the (lowercased) stop words, as gitleaks' Aho-Corasick trie
    match_all: bool  # condition = "AND"
    needs_path: bool  # an AND condition over paths or commits: never met without a path

    @classmethod
    def from_toml(cls, data: dict[str, Any]) -> Allowlist:
        regexes = data.get("regexes") or []
        return cls(
            target=data.get("regexTarget") or "secret",
            regex=_compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
            stopwords=_any_of(data.get("stopwords") or []),
            match_all=str(data.get("condition", "")).upper() == "AND",
            needs_path=bool(data.get("paths") or data.get("commits")),
        )

    def allows(self, secret: str, match: str, line: str) -> bool:
        target = {"match": match, "line": line}.get(self.target, secret)
        regex_hit = self.regex is not None and target != "" and self.regex.search(target) is not None
        stopword_hit = bool(secret) and self.stopwords is not None and self.stopwords.search(secret.lower()) is not None
        if self.match_all:
            if self.needs_path:
                return False
            checks = [regex_hit] if self.regex is not None else []
            checks += [stopword_hit] if self.stopwords is not None else []
            return bool(checks) and all(checks)
        return regex_hit or stopword_hit


@dataclass(frozen=True)
class Rule:
    id: str
    regex: Any
    secret_group: int
    entropy: float
    keywords: tuple[str, ...]
    allowlists: tuple[Allowlist, ...]


class RuleSet:
    """The compiled rules of one gitleaks.toml."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.rules: list[Rule] = []
        patterns: list[str] = []
        for data in config.get("rules", []):
            if "regex" not in data:
                continue  # a path-only rule (pkcs12-file): nothing to find in a text
            patterns.append(data["regex"])
            allowlists = [Allowlist.from_toml(a) for a in data.get("allowlists") or []]
            if "allowlist" in data:  # the older single-table form
                allowlists.append(Allowlist.from_toml(data["allowlist"]))
            self.rules.append(
                Rule(
                    id=data["id"],
                    regex=_compile(data["regex"]),
                    secret_group=int(data.get("secretGroup", 0)),
                    entropy=float(data.get("entropy", 0.0)),
                    keywords=tuple(dict.fromkeys(k.lower() for k in data.get("keywords") or [])),
                    allowlists=tuple(allowlists),
                )
            )
        self.global_allowlists = tuple(
            Allowlist.from_toml(a) for a in [config.get("allowlist") or {}, *(config.get("allowlists") or [])] if a
        )
        keywords = sorted({k for rule in self.rules for k in rule.keywords})
        self._keyword_set = re2.Set.SearchSet(_OPTIONS)
        for keyword in keywords:
            self._keyword_set.Add(re2.escape(keyword))
        self._keyword_set.Compile()
        self._by_keyword: dict[str, list[int]] = {}
        for index, rule in enumerate(self.rules):
            for keyword in rule.keywords:
                self._by_keyword.setdefault(keyword, []).append(index)
        self._keywords = keywords
        self._always = [i for i, rule in enumerate(self.rules) if not rule.keywords]
        prefixes = sorted(
            {
                k
                for rule, pattern in zip(self.rules, patterns, strict=True)
                if rule.id != GENERIC and not pattern.removeprefix("(?i)").startswith(_SEMI_GENERIC)
                for k in _prefixes(rule.keywords, pattern)
            }
        )
        self._vendor_prefix = _compile("^(?:" + "|".join(re2.escape(k) for k in prefixes) + ")") if prefixes else None

    @classmethod
    def load(cls, path: Path = TOML) -> RuleSet:
        with path.open("rb") as f:
            return cls(tomllib.load(f))

    def candidates(self, lowered: str) -> list[Rule]:
        """The rules whose keywords occur in the (lowercased) text, in the file's order."""
        hits = self._keyword_set.Match(lowered) or []
        indices = set(self._always)
        for hit in hits:
            indices.update(self._by_keyword[self._keywords[hit]])
        return [self.rules[i] for i in sorted(indices)]

    def vendor_prefix(self, token: str) -> bool:
        """Whether `token` begins with the keyword of a rule that can match a token standing alone (`sntryu_`,
        `sgp_`, `xoxb`, `AIza`; not the generic or a semi-generic rule): then it is that vendor's format,
        which the rule itself judges, or a look-alike of it."""
        return self._vendor_prefix is not None and self._vendor_prefix.search(token.lower()) is not None

    def findings(self, text: str) -> list[Finding]:
        return self.scan(text)[0]

    def scan(self, text: str) -> tuple[list[Finding], list[Finding]]:
        """The findings, and the matches the rules themselves rejected as not secret: a known example or
        placeholder by an allowlist, filler by its entropy (`vetoes`; other detectors defer to them)."""
        found: list[Finding] = []
        vetoes: list[Finding] = []
        for rule in self.candidates(text.lower()):
            self._rule_findings(rule, text, found, vetoes)
        return found, vetoes

    def _rule_findings(self, rule: Rule, text: str, out: list[Finding], vetoes: list[Finding]) -> None:
        # The generic rule's stop words reject any secret containing a common word ("access", "main"):
        # right for its own guesses, too broad to overrule other detectors.
        veto = rule.id != GENERIC
        for m in rule.regex.finditer(text):
            start, end = m.span()
            raw = text[start:end]
            match = raw.strip("\n")
            start += len(raw) - len(raw.lstrip("\n"))
            end = start + len(match)
            if not match:
                continue
            s_start, s_end = start, end
            groups = m.groups()
            if groups:
                if rule.secret_group:
                    s_start, s_end = m.span(rule.secret_group)
                else:
                    for g, value in enumerate(groups, 1):
                        if value:
                            s_start, s_end = m.span(g)
                            break
            if s_start < 0 or s_end <= s_start:
                continue
            secret = text[s_start:s_end]
            name = f"gitleaks:{rule.id}"
            if rule.entropy and shannon_entropy(secret) <= rule.entropy:
                if veto:
                    vetoes.append(Finding(s_start, s_end, name))
                continue
            # The match's line, at most _LINE_WINDOW characters either side of it: a line-target allowlist
            # on a 1 MB one-line text would otherwise cost a pass over the whole text per match.
            line_start = max(text.rfind("\n", max(0, start - _LINE_WINDOW), start) + 1, start - _LINE_WINDOW)
            line_end = text.find("\n", end, end + _LINE_WINDOW)
            line = text[line_start : min(len(text) if line_end < 0 else line_end, end + _LINE_WINDOW)]
            if any(a.allows(secret, match, line) for a in self.global_allowlists):
                vetoes.append(Finding(s_start, s_end, name))
                continue
            if any(a.allows(secret, match, line) for a in rule.allowlists):
                if veto:
                    vetoes.append(Finding(s_start, s_end, name))
                continue
            out.append(Finding(s_start, s_end, name))


@cache
def default_rules() -> RuleSet:
    """The vendored rule set, compiled once per process."""
    return RuleSet.load()
