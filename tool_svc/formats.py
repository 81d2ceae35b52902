"""Tool definitions in the common function-calling formats -> our tool contracts (issue 51).

Accepted shapes of one definition (detected by their keys):

- OpenAI tools: `{"type": "function", "function": {"name", "description", "parameters"}}`;
- OpenAI legacy `functions`, BFCL and Gemini: `{"name", "description", "parameters"}`;
- Anthropic: `{"name", "description", "input_schema"}`; MCP: `{"name", "description", "inputSchema"}`.

An optional `"examples": [str, ...]` (typical requests, indexed by DiscoverTools) is kept.

The parameters become a Draft 2020-12 JSON Schema: type names are read case-insensitively and the
non-JSON-Schema ones BFCL and others use are mapped (`dict`, `HashMap` -> object, `float`, `double` ->
number, `int`, `long` -> integer, `tuple`, `list` -> array, `str` -> string, `bool` -> boolean; `any`
drops the type); no parameters is an object with none. The result must pass the registry's schema
check (`check_tool_schema`).

Names: `registry_name` of `tool_svc.mcp.names` (the one mapping function: camel-case words split by
`_`, lowercased, anything outside [a-z0-9_] -> `_`, a hash ending a name over 64 characters:
`ChaDri.change_drink` -> `cha_dri_change_drink`), with an optional prefix; `convert_all` keeps
the mapping both ways (`NameMap`), so a model's call by the original name ("ChaDri.change_drink") is
found and a registry name maps back. A name with letters or digits outside ASCII has its accents folded
first ("café.lookup" -> `cafe_lookup`); when letters still do not fit [a-z0-9] (Chinese, Cyrillic...),
the ASCII words are kept and 8 hex digits of sha256(original name) end the name ("获取客户资料" ->
`fn_<hash>`, "get_客户" -> `get_<hash>`), so two such names do not map to one (each would otherwise be
a run of `_` of its length). Two definitions mapping to one name are an error, never a silent
overwrite. Every bad input is an `InvalidRequestError` naming the path (`tools[3].parameters.type`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentmesh.errors import InvalidRequestError
from tool_svc.mcp.names import local_part, registry_name
from tool_svc.model import ToolDef
from tool_svc.validation import SchemaDefinitionError, check_tool_schema

__all__ = ["NameMap", "ToolContract", "convert", "convert_all", "normalize_schema"]

_TYPES = {
    "object": "object",
    "dict": "object",
    "hashmap": "object",
    "map": "object",
    "string": "string",
    "str": "string",
    "char": "string",
    "number": "number",
    "float": "number",
    "double": "number",
    "integer": "integer",
    "int": "integer",
    "long": "integer",
    "short": "integer",
    "byte": "integer",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "tuple": "array",
    "list": "array",
    "arraylist": "array",
    "null": "null",
}
_ANY = "any"
# Keywords whose value is a map of name -> schema, a schema, or a list of schemas.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAX_DEPTH = 32
_UNDERSCORES = re.compile(r"_+")
_NAME_HASH_CHARS = 8


@dataclass(frozen=True)
class ToolContract:
    """A converted definition: the registry name, the original name, and what DiscoverTools indexes."""

    name: str
    original_name: str
    description: str
    input_schema: Mapping[str, Any]
    examples: tuple[str, ...] = ()

    def to_tooldef(self, **fields: Any) -> ToolDef:
        """A ToolDef of this contract; `fields` sets the rest (executor, endpoint_url, permission...)."""
        base = ToolDef(
            name=self.name, description=self.description, input_schema=self.input_schema, examples=self.examples
        )
        return replace(base, **fields)


@dataclass
class NameMap:
    """Original name <-> registry name, for the tools of one `convert_all`."""

    to_registry: dict[str, str] = field(default_factory=dict)
    to_original: dict[str, str] = field(default_factory=dict)

    def registry(self, original: str) -> str | None:
        return self.to_registry.get(original)

    def original(self, name: str) -> str | None:
        return self.to_original.get(name)


def _type(value: Any, where: str) -> str | None:
    if not isinstance(value, str):
        raise InvalidRequestError(where, f"a type is a name, got {value!r}")
    key = value.strip().lower()
    if key == _ANY:
        return None
    mapped = _TYPES.get(key)
    if mapped is None:
        raise InvalidRequestError(where, f"unknown type {value!r}")
    return mapped


def normalize_schema(schema: Any, where: str = "parameters", depth: int = 0) -> dict[str, Any]:
    """A copy of `schema` with the type names mapped to JSON Schema's (see the module docstring)."""
    if depth > _MAX_DEPTH:
        raise InvalidRequestError(where, f"nested deeper than {_MAX_DEPTH} levels")
    if not isinstance(schema, Mapping):
        raise InvalidRequestError(where, f"a schema is a JSON object, got {type(schema).__name__}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        path = f"{where}.{key}"
        if key == "type":
            if isinstance(value, list):
                types = [_type(v, path) for v in value]
                if None not in types:
                    out["type"] = list(dict.fromkeys(t for t in types if t is not None))
            else:
                mapped = _type(value, path)
                if mapped is not None:
                    out["type"] = mapped
        elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
            out[key] = {str(k): normalize_schema(v, f"{path}.{k}", depth + 1) for k, v in value.items()}
        elif key in _SCHEMA_ONE and isinstance(value, Mapping):
            out[key] = normalize_schema(value, path, depth + 1)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [normalize_schema(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        else:
            out[key] = value
    return out


def _unwrap(definition: Any, where: str) -> tuple[Mapping[str, Any], str, str]:
    """(the function object, its schema key, the path prefix) of any accepted shape."""
    if not isinstance(definition, Mapping):
        raise InvalidRequestError(where, f"a tool definition is a JSON object, got {type(definition).__name__}")
    if definition.get("type") == "function" and "function" in definition:
        inner = definition["function"]
        if not isinstance(inner, Mapping):
            raise InvalidRequestError(f"{where}.function", "must be a JSON object")
        definition, where = inner, f"{where}.function"
    for key in ("parameters", "input_schema", "inputSchema"):
        if key in definition:
            return definition, key, where
    return definition, "parameters", where


def _local_name(name: str) -> str | None:
    """The local part of a name with non-ASCII letters or digits (see the module docstring); None for
    an ASCII name, which `registry_name` maps as it maps MCP names."""
    if name.isascii():
        return None
    decomposed = unicodedata.normalize("NFKD", name)
    folded = unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))
    words = _UNDERSCORES.sub("_", local_part(folded, split_words=True)).strip("_")
    if all(c.isascii() or not c.isalnum() for c in folded):
        return words or None
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_NAME_HASH_CHARS]
    # `fn_` before a hash alone, as `registry_name` puts it before a name not starting with a letter.
    return f"{words}_{digest}" if words else f"fn_{digest}"


def convert(definition: Any, *, prefix: str = "", where: str = "tool") -> ToolContract:
    """One definition -> a ToolContract, or InvalidRequestError naming what is wrong."""
    fn, schema_key, where = _unwrap(definition, where)
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequestError(f"{where}.name", "a tool needs a name")
    description = fn.get("description", "")
    if not isinstance(description, str) or not description.strip():
        raise InvalidRequestError(f"{where}.description", "is required: say when to use the tool")
    examples = fn.get("examples", [])
    if not isinstance(examples, list) or not all(isinstance(e, str) for e in examples):
        raise InvalidRequestError(f"{where}.examples", "must be a list of strings")
    raw = fn.get(schema_key)
    if raw is None:
        raw = {"type": "object", "properties": {}}
    schema = normalize_schema(raw, f"{where}.{schema_key}")
    if "type" not in schema and "properties" in schema:
        schema["type"] = "object"
    try:
        check_tool_schema(schema, f"{where}.{schema_key}", require_object=True)
    except SchemaDefinitionError as exc:
        raise InvalidRequestError(f"{where}.{schema_key}", str(exc)) from None
    return ToolContract(
        registry_name(prefix, name, _local_name(name), split_words=True),
        name,
        description.strip(),
        schema,
        tuple(examples),
    )


def convert_all(definitions: Iterable[Any], *, prefix: str = "") -> tuple[list[ToolContract], NameMap]:
    """Every definition converted, with the name mapping; two names mapping to one is an error."""
    contracts: list[ToolContract] = []
    names = NameMap()
    for i, definition in enumerate(definitions):
        contract = convert(definition, prefix=prefix, where=f"tools[{i}]")
        taken = names.to_original.get(contract.name)
        if taken is not None:
            if taken == contract.original_name:
                raise InvalidRequestError(f"tools[{i}].name", f"{taken!r} is defined twice")
            raise InvalidRequestError(
                f"tools[{i}].name", f"{contract.original_name!r} and {taken!r} both map to {contract.name}"
            )
        names.to_registry[contract.original_name] = contract.name
        names.to_original[contract.name] = contract.original_name
        contracts.append(contract)
    return contracts, names
