"""Filling tool arguments from a schema and the conversation's texts (the TestModel half).

`synthesize_arguments` builds a call's arguments from the tool's JSON schema (const, default, enum,
examples, prose examples in descriptions), `name: value` mentions, pattern matches and arithmetic
stated in the goal (operators as symbols or words: "6 x 7", "6 times 7"), and, for a string field that
names something, the entity the goal names (`entities`: a quoted span, or capitalized words that are not
just a sentence's first word: "How cold is it in Oslo?" -> city "Oslo"), each field of a call the next
one. The regex and schema-validation helpers here are shared by `fixing`, which
corrects arguments, and `scenario`, whose `from_goal` / `from_result` arguments search the texts.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]

from provider_svc.models.base import ToolDef
from provider_svc.testing.scripted.jsonio import _from_json_text

_FREE_TEXT_NAMES = frozenset({"query", "q", "text", "question", "goal", "prompt", "message", "search", "keywords"})
_EXAMPLE = re.compile(r"(?:e\.g\.|for example|example:|such as)\s*['\"`]?([^'\"`,;)\s]+)", re.IGNORECASE)


def _unanchored(pattern: str) -> str:
    return pattern.removeprefix("^").removesuffix("$")


def _search(pattern: str, texts: Iterable[str]) -> str | None:
    try:
        compiled = re.compile(_unanchored(pattern))
    except re.error:
        return None
    for text in texts:
        match = compiled.search(text)
        if match:
            return match.group(0)
    return None


def _named_value(name: str, texts: Iterable[str]) -> str | None:
    """`name: value` or `name=value` written in the goal or a result."""
    pattern = re.compile(rf"\b{re.escape(name)}\s*[:=]\s*['\"]?([^\s'\",;]+)", re.IGNORECASE)
    for text in texts:
        match = pattern.search(text)
        if match:
            return match.group(1)
    return None


def _valid(value: Any, schema: Mapping[str, Any] | None) -> bool:
    if not schema:
        return True
    try:
        validator = _validator(json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError):  # not JSON: nothing to judge the value by
        return True
    if validator is None:
        return True
    try:
        return bool(validator.is_valid(value))
    except Exception:  # an unresolvable (sub)schema ($ref) cannot judge the value
        return True


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A validator of the schema (checked once, not per value as `jsonschema.validate` does: that
    check was most of a Generate's time), or None for a schema that is itself invalid."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


# Arithmetic in a goal ("what is 17*23", "sqrt(2) * 10"): runs of numbers, operators and the math
# functions a calculator commonly takes; a run counts when Python's grammar reads it as arithmetic.
_MATH_NAMES = frozenset(
    {"sqrt", "log", "log10", "log2", "exp", "sin", "cos", "tan", "abs", "round", "min", "max", "pi"}
)
_MATH_RUN = re.compile(
    r"(?:\d+(?:\.\d+)?|\b(?:" + "|".join(sorted(_MATH_NAMES, key=len, reverse=True)) + r")\b|\*\*|[-+*/%^()×÷,]|[ \t])+"
)
_MAX_EXPRESSION_CHARS = 500
_EXPRESSION_NAMES = frozenset({"expression", "expr", "formula", "equation", "calculation", "math"})
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Load, ast.operator, ast.unaryop)


def _is_arithmetic(text: str) -> bool:
    """Whether `text` is a numeric expression with at least one operation (not a lone number)."""
    if len(text) > _MAX_EXPRESSION_CHARS:
        return False
    try:
        tree = ast.parse(text, mode="eval")  # parsed only, never evaluated
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    operations = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, int | float):
                return False
        elif isinstance(node, ast.Name):
            if node.id not in _MATH_NAMES:
                return False
        elif isinstance(node, ast.BinOp | ast.Call):
            operations += 1
        elif not isinstance(node, _ARITHMETIC_NODES):
            return False
    return operations > 0


# Operators written as words between two numbers ("6 times 7", "6 x 7", "10 divided by 4").
_WORD_OPERATORS = (
    (re.compile(r"(?<=\d)\s*(?:[xX×]|times|multiplied\s+by)\s*(?=[\d(])"), " * "),
    (re.compile(r"(?<=\d)\s*(?:divided\s+by|over)\s*(?=[\d(])"), " / "),
    (re.compile(r"(?<=\d)\s*plus\s*(?=[\d(])"), " + "),
    (re.compile(r"(?<=\d)\s*minus\s*(?=[\d(])"), " - "),
)


def _operators_in_words(text: str) -> str:
    for pattern, operator in _WORD_OPERATORS:
        text = pattern.sub(operator, text)
    return text


def _arithmetic(texts: Iterable[str]) -> str | None:
    """The longest arithmetic expression of the first text that has one (operators may be words)."""
    for text in map(_operators_in_words, texts):
        found = [
            candidate
            for match in _MATH_RUN.finditer(text)
            if _is_arithmetic(
                candidate := match.group(0).strip(" \t,").replace("×", "*").replace("÷", "/").replace("^", "**")
            )
        ]
        if found:
            return max(found, key=len)
    return None


def _wants_expression(name: str, schema: Mapping[str, Any]) -> bool:
    """A string field that takes arithmetic: by its name, or because its examples are arithmetic."""
    if name.lower() in _EXPRESSION_NAMES:
        return True
    examples = schema.get("examples")
    return (
        isinstance(examples, list)
        and bool(examples)
        and all(isinstance(e, str) and _is_arithmetic(e) for e in examples)
    )


def _pattern_tokens(pattern: str, text: str) -> list[str]:
    """Distinct whole tokens of `text` that fully match `pattern`, in order."""
    try:
        compiled = re.compile(rf"(?<![\w-])(?:{_unanchored(pattern)})(?![\w-])")
    except re.error:
        return []
    return list(dict.fromkeys(m.group(0) for m in compiled.finditer(text) if m.group(0)))


def _from_goal(name: str, schema: Mapping[str, Any], kind: Any, texts: Sequence[str]) -> Any:
    """A value for `name` the texts state unambiguously (None when they do not): an explicit
    `name: value`, the arithmetic an expression field needs, or the one goal token its pattern fits."""
    named = _named_value(name, texts)
    candidates: list[Any] = []
    if kind in ("integer", "number"):
        if named is not None:
            with contextlib.suppress(ValueError):
                candidates.append(int(named) if kind == "integer" else float(named))
    elif kind in ("string", None):
        if named is not None:
            candidates.append(named)
        if _wants_expression(name, schema):
            candidates.append(_arithmetic(texts))
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and texts:
            tokens = _pattern_tokens(pattern, texts[0])
            if len(tokens) == 1:
                candidates.append(tokens[0])
    return next((c for c in candidates if c is not None and _valid(c, schema)), None)


# Words that start a sentence without naming anything: a capitalized one of these is not an entity.
_SENTENCE_WORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "but",
        "or",
        "if",
        "so",
        "then",
        "please",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "it",
        "its",
        "is",
        "are",
        "was",
        "were",
        "be",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "whats",
        "tell",
        "show",
        "give",
        "find",
        "get",
        "list",
        "check",
        "look",
        "search",
        "fetch",
        "book",
        "send",
        "make",
        "let",
        "set",
        "run",
        "call",
        "use",
        "help",
        "hi",
        "hello",
        "hey",
        "thanks",
        "thank",
        "yes",
        "no",
        "not",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "today",
        "tomorrow",
        "yesterday",
        "now",
        "in",
        "on",
        "at",
        "for",
        "from",
        "to",
        "of",
        "by",
        "with",
        "about",
        "after",
        "before",
    ]
)
_TOKEN = re.compile(r"[^\W\d_][\w'’.-]*[^\W_]|[^\W\d_]")
_QUOTED = re.compile(r"\"([^\"]{1,80})\"|“([^”]{1,80})”|`([^`]{1,80})`|(?<![\w])'([^']{1,80})'(?![\w])")


def _is_capitalized(token: str) -> bool:
    """Title case ("Oslo", "São"), or a short acronym ("NYC")."""
    if not token[:1].isupper():
        return False
    rest = token[1:]
    return any(c.islower() for c in rest) or (rest.isupper() and 1 <= len(rest) <= 2) or not rest


def entities(text: str) -> list[str]:
    """What `text` names, in order: quoted spans, then runs of capitalized words ("Oslo", "New York",
    "São Paulo"), without a sentence's capitalized first word when it names nothing ("How", "What"); a
    lone capitalized first word ("Flights from Oslo", "Oslo weather") comes after the others."""
    quoted: list[str] = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(text)]
    rest = _QUOTED.sub(" . ", text)
    found: list[str] = []
    initial: list[str] = []
    run: list[str] = []
    run_initial = False
    sentence_start = True
    previous_end = 0

    def close() -> None:
        if run:
            (initial if run_initial and len(run) == 1 else found).append(" ".join(run))
            run.clear()

    for match in _TOKEN.finditer(rest):
        token = match.group(0).rstrip(".")
        gap = rest[previous_end : match.start()]
        if any(mark in gap for mark in ".!?\n:;,") or (gap.strip() and gap.strip() not in ("'", "’")):
            close()
            sentence_start = sentence_start or any(mark in gap for mark in ".!?\n")
        starts = sentence_start
        sentence_start = False
        previous_end = match.end()
        if _is_capitalized(token) and not (token.lower() in _SENTENCE_WORDS and (starts or not run)):
            if not run:
                run_initial = starts
            run.append(token)
        else:
            close()
    close()
    return list(dict.fromkeys(e for e in [*quoted, *found, *initial] if e.strip()))


def _wants_entity(name: str, schema: Mapping[str, Any]) -> bool:
    """A string field that names something (a city, a person, a product): not free text, an expression,
    a date, a choice or a pattern-shaped value, which have their own rules."""
    if name.lower() in _FREE_TEXT_NAMES or _wants_expression(name, schema):
        return False
    return not any(key in schema for key in ("pattern", "enum", "const", "format"))


def _entity(name: str, schema: Mapping[str, Any], texts: Sequence[str], taken: set[str]) -> str | None:
    """The first entity of the goal (`texts[0]`) not given to another field yet, if it fits the schema."""
    if not texts or not _wants_entity(name, schema):
        return None
    for candidate in entities(texts[0]):
        if candidate not in taken and _valid(candidate, schema):
            return candidate
    return None


def _synth_value(name: str, schema: Mapping[str, Any], texts: Sequence[str], taken: set[str] | None = None) -> Any:
    """A value for property `name` of `schema`, from the schema's own hints first, then the texts.
    `taken`: entities already given to other fields of the same call (each field gets the next one)."""
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        joined = " ".join(texts).lower()
        mentioned = [v for v in schema["enum"] if isinstance(v, str) and v.lower() in joined]
        return mentioned[0] if mentioned else schema["enum"][0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    # What the goal states beats the schema's example (asked for 17*23, compute 17*23; asked about
    # Oslo, not the example's Paris).
    stated = _from_goal(name, schema, kind, texts)
    if stated is not None:
        return stated
    if kind in ("string", None):
        named = _entity(name, schema, texts, taken if taken is not None else set())
        if named is not None:
            if taken is not None:
                taken.add(named)
            return named
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    description = schema.get("description")
    if isinstance(description, str):
        # An example given in prose ("e.g. 15m"), when it fits.
        for match in _EXAMPLE.finditer(description):
            example = _from_json_text(match.group(1)) if kind not in ("string", None) else match.group(1)
            if _valid(example, schema):
                return example
    if kind in ("integer", "number"):
        named = _named_value(name, texts)
        if named is not None:
            try:
                return int(named) if kind == "integer" else float(named)
            except ValueError:
                pass
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        items = schema.get("items")
        items = items if isinstance(items, dict) else {}
        return [_synth_value(name, items, texts) for _ in range(int(schema.get("minItems", 0)))]
    if kind == "object":
        return _synth_object(schema, texts)
    # A string (or no type).
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        found = _search(pattern, texts)
        if found is not None:
            return found
    named = _named_value(name, texts)
    if named is not None:
        return named
    if schema.get("format") == "date":
        found = _search(r"\d{4}-\d{2}-\d{2}", texts)
        return found or time.strftime("%Y-%m-%d", time.gmtime())
    text = texts[0] if texts else ""
    limit = schema.get("maxLength")
    return text[: int(limit)] if isinstance(limit, int) else text


def _synth_object(schema: Mapping[str, Any], texts: Sequence[str]) -> dict[str, Any]:
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = [r for r in schema.get("required", ()) if isinstance(r, str)]
    values: dict[str, Any] = {}
    taken: set[str] = set()
    for name in [*required, *(p for p in props if p not in required)]:
        sub = props.get(name)
        sub = sub if isinstance(sub, dict) else {}
        findable = _named_value(name, texts) is not None or (
            isinstance(sub.get("pattern"), str) and _search(sub["pattern"], texts) is not None
        )
        if name in required or name in _FREE_TEXT_NAMES or findable:
            values[name] = _synth_value(name, sub, texts, taken)
    return values


def synthesize_arguments(tool: ToolDef, texts: Sequence[str]) -> dict[str, Any]:
    """Arguments for `tool` filled from its schema (const/default/enum/examples), `name: value`
    mentions and pattern matches in `texts` (goal first), and the goal text for free-text fields."""
    return _synth_object(tool.input_schema, texts)
