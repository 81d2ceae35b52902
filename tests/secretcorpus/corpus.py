"""The public redaction corpus: gitleaks' own true- and false-positive samples, made by running its rule
files (./gitleaks/rules/*.go, MIT) with the Go-subset interpreter of golite.py.

Every rule function that cmd/generate/config/main.go lists is called; its `utils.Validate(r, tps, fps)`
(or `ValidateWithPaths`) hands over the samples. Kinds:
- `generated`: a true positive holding a secret made by `secrets.NewSecret` (reggen.py), most of them
  filled into the `GenerateSampleSecrets` templates (INI, JSON, XML, YAML, C#, Go, Java, Kotlin, PHP,
  Python, `System.setProperty`, logstash, Makefile: the template table is read from utils/generate.go);
- `handwritten`: a true positive the rule's authors wrote out literally;
- `bare`: each secret a true positive's template was filled with, standing alone as the whole text;
- `near_miss`: a false positive of the rule's tests (placeholders, look-alikes, variables).

The secret of a templated sample is the value the template was filled with; of any other true positive,
what the rule's own regex reports (its secret group, else its first non-empty group, else the match; the
vendored gitleaks.toml compiled with RE2), which is exactly what the rule's tests assert it finds.

Rules are split in two halves by a hash of their id (stable across refreshes): `tune` (the half the
redactor's own rules may be adjusted on) and `heldout` (reported, never tuned on).

`python -m tests.secretcorpus [--seed N]` prints the corpus's size per kind and half.
"""

from __future__ import annotations

import hashlib
import random
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import re2

from agentmesh.redact import gitleaks_rules
from tests.secretcorpus import golite, reggen

HERE = Path(__file__).resolve().parent
GITLEAKS = HERE / "gitleaks"
DEFAULT_SEED = 40

_MODULE = "github.com/zricethezav/gitleaks/v8"
# Rule families named by two words of the id.
_FAMILIES = {"new": "new-relic", "cisco": "cisco-meraki"}


@dataclass(frozen=True)
class Sample:
    """One text of the corpus. `secrets` must all be gone from the redacted text (none for near misses)."""

    rule: str
    kind: str  # generated | handwritten | bare | near_miss
    text: str
    secrets: tuple[str, ...]
    template: str = ""  # the GenerateSampleSecrets template's name ("go - short", ...), if any

    @property
    def family(self) -> str:
        return family_of(self.rule)

    @property
    def half(self) -> str:
        return half_of(self.rule)


def family_of(rule: str) -> str:
    head = rule.split("-", 1)[0]
    return _FAMILIES.get(head, head)


def half_of(rule: str) -> str:
    """`tune` or `heldout`: a rule's half, by a hash of its id."""
    return "tune" if hashlib.sha256(rule.encode()).digest()[0] % 2 == 0 else "heldout"


@dataclass
class _Recorder:
    """What the interpreted rule files hand to the generator's built-ins."""

    rng: random.Random
    templated: dict[str, tuple[str, str]]  # text -> (secret, template name)
    drawn: list[str]  # every secrets.NewSecret result, in order
    validated: list[tuple[Any, list[str], list[str]]]


def _utils_natives(rec: _Recorder, templates: dict[str, str], single: str) -> dict[str, Any]:
    def generate_sample_secrets(identifier: str, secret: str) -> list[str]:
        replacer = golite.Replacer((("{i}", identifier), ("{I}", identifier.upper()), ("{s}", secret)))
        out = []
        for name in sorted(templates):
            text = replacer.go_Replace(templates[name])
            rec.templated[text] = (secret, name)
            out.append(text)
        return out

    def generate_sample_secret(identifier: str, secret: str) -> str:
        text = golite.go_sprintf(single, identifier, secret)
        rec.templated[text] = (secret, "GenerateSampleSecret")
        return text

    def validate(rule: Any, tps: list[str] | None, fps: list[str] | None) -> Any:
        rec.validated.append((rule, list(tps or []), list(fps or [])))
        return rule

    def validate_with_paths(rule: Any, tps: dict[str, str] | None, fps: dict[str, str] | None) -> Any:
        rec.validated.append((rule, list((tps or {}).values()), list((fps or {}).values())))
        return rule

    def opaque(name: str) -> Callable[..., golite.Opaque]:
        return lambda *args: golite.Opaque(name, tuple(str(a) for a in args))

    return {
        "GenerateSampleSecrets": generate_sample_secrets,
        "GenerateSampleSecret": generate_sample_secret,
        "Validate": validate,
        "ValidateWithPaths": validate_with_paths,
        # They build the rule's regex, which the corpus takes from gitleaks.toml instead.
        "GenerateSemiGenericRegex": opaque("GenerateSemiGenericRegex"),
        "GenerateUniqueTokenRegex": opaque("GenerateUniqueTokenRegex"),
        "MergeRegexps": opaque("MergeRegexps"),
    }


class _Regexp:
    """gitleaks' regexp package (Go's regexp): what the rule files call on a compiled pattern."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._re: Any = None

    def go_MatchString(self, s: str) -> bool:
        if self._re is None:
            self._re = re2.compile(self.pattern)
        return self._re.search(s) is not None

    def go_String(self) -> str:
        return self.pattern


def _contains_stopword(allowlist: golite.Struct, s: str) -> tuple[bool, str]:
    lowered = s.lower()
    for word in allowlist.fields.get("StopWords") or []:
        if word.lower() in lowered:
            return True, word
    return False, ""


def _template_table(utils: golite.Package, interp: golite.Interpreter) -> tuple[dict[str, str], str]:
    """The `samples` map of GenerateSampleSecrets and the format of GenerateSampleSecret, from generate.go."""
    many = utils.funcs["GenerateSampleSecrets"]
    one = utils.funcs["GenerateSampleSecret"]
    assert isinstance(many, golite.FuncDecl) and isinstance(one, golite.FuncDecl)
    env = golite.Env(utils, {"fmt": "fmt", "strings": "strings"})
    table = next(s for s in many.body if s[0] == "define" and s[1] == ["samples"])
    templates = interp.eval(table[2][0], env)
    ret = one.body[0]
    assert ret[0] == "return" and ret[1][0][0] == "call", "GenerateSampleSecret is no longer one Sprintf"
    fmt = interp.eval(ret[1][0][2][0], env)
    return templates, fmt


def _rule_functions() -> list[str]:
    main = (GITLEAKS / "main.go").read_text(encoding="utf-8")
    return re.findall(r"\brules\.([A-Z]\w*)\(\)", main)


@dataclass(frozen=True)
class _Rule:
    id: str
    regex: Any
    secret_group: int


@cache
def _toml_rules() -> dict[str, _Rule]:
    with gitleaks_rules.TOML.open("rb") as f:
        config = tomllib.load(f)
    return {
        r["id"]: _Rule(r["id"], re2.compile(r["regex"]) if "regex" in r else None, int(r.get("secretGroup", 0)))
        for r in config["rules"]
    }


def rule_secrets(rule_id: str, text: str) -> tuple[str, ...]:
    """What the rule's regex reports as secrets in `text` (gitleaks' detectRule, before its filters)."""
    rule = _toml_rules().get(rule_id)
    if rule is None or rule.regex is None:
        return ()
    found = []
    for m in rule.regex.finditer(text):
        match = m.group(0).strip("\n")
        groups = rule.regex.search(match)
        secret = match
        if groups is not None and rule.regex.groups >= 1:
            if rule.secret_group:
                secret = groups.group(rule.secret_group) or ""
            else:
                secret = next((g for g in groups.groups() if g), match)
        if secret:
            found.append(secret)
    return tuple(dict.fromkeys(found))


def generate(seed: int = DEFAULT_SEED) -> list[Sample]:
    """The whole corpus, reproducibly for a seed."""
    rec = _Recorder(random.Random(seed), {}, [], [])

    def new_secret(pattern: str) -> str:
        secret = reggen.new_secret(pattern, rec.rng)
        rec.drawn.append(secret)
        return secret

    interp = golite.Interpreter(
        {
            "fmt": {"Sprintf": golite.go_sprintf},
            "strings": {
                "NewReplacer": lambda *kv: golite.Replacer(tuple(zip(kv[::2], kv[1::2], strict=True))),
                "ToUpper": str.upper,
                "ToLower": str.lower,
                "Repeat": lambda s, n: s * n,
                "Join": lambda items, sep: sep.join(items),
            },
            "encoding/base64": golite.BASE64,
            f"{_MODULE}/regexp": {"MustCompile": _Regexp},
            "regexp": {"MustCompile": _Regexp},
            f"{_MODULE}/config": {"AllowlistMatchOr": 0, "AllowlistMatchAnd": 1},
            f"{_MODULE}/cmd/generate/secrets": {"NewSecret": new_secret},
            "methods": {"config.Allowlist.ContainsStopWord": _contains_stopword},
        }
    )
    utils_sources = [(GITLEAKS / "utils" / name).read_text(encoding="utf-8") for name in ("patterns.go", "generate.go")]
    utils = interp.load(f"{_MODULE}/cmd/generate/config/utils", utils_sources)
    templates, single = _template_table(utils, interp)
    utils.funcs.update(_utils_natives(rec, templates, single))
    rule_sources = [p.read_text(encoding="utf-8") for p in sorted((GITLEAKS / "rules").glob("*.go"))]
    rules = interp.load(f"{_MODULE}/cmd/generate/config/rules", rule_sources)

    samples: list[Sample] = []
    for name in _rule_functions():
        drawn = len(rec.drawn)
        rec.validated.clear()
        interp.call_function(rules, name)
        if not rec.validated:
            continue  # a rule without tests (`// validate TODO`)
        if len(rec.validated) != 1:
            raise golite.GoError(f"rules.{name} validated {len(rec.validated)} times")
        rule, tps, fps = rec.validated[0]
        rule_id = rule.fields["RuleID"]
        samples += _samples_of(rule_id, tps, fps, rec, rec.drawn[drawn:])
    return samples


def _samples_of(rule_id: str, tps: list[str], fps: list[str], rec: _Recorder, drawn: list[str]) -> list[Sample]:
    out: list[Sample] = []
    bare: list[str] = []
    for text in dict.fromkeys(tps):
        if text in rec.templated:
            secret, template = rec.templated[text]
            out.append(Sample(rule_id, "generated", text, (secret,), template))
            bare.append(secret)
            continue
        secrets = rule_secrets(rule_id, text)
        if not secrets:
            continue  # a sample its own rule does not match here (none in the current set)
        # Made with NewSecret outside a template (fmt.Sprintf, concatenation)? (3-character draws exist,
        # too short to tell apart from a literal.)
        generated = any(len(d) >= 8 and d in text for d in drawn)
        out.append(Sample(rule_id, "generated" if generated else "handwritten", text, secrets))
    # Only what the true positives planted: a false positive's GenerateSampleSecret plants a look-alike.
    for secret in dict.fromkeys(bare):
        out.append(Sample(rule_id, "bare", secret, (secret,)))
    out += [Sample(rule_id, "near_miss", text, ()) for text in dict.fromkeys(fps)]
    return out


@cache
def corpus(seed: int = DEFAULT_SEED) -> tuple[Sample, ...]:
    return tuple(generate(seed))
