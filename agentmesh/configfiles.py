"""Reading configuration files: `${VAR}` interpolation, which files, and how a later file overlays an earlier one.

The schema and `load_settings` are in `agentmesh.config`; this module knows YAML and dictionaries only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

__all__ = [
    "CONFIG_ENV_VAR",
    "DEFAULT_CONFIG_FILE",
    "INHERIT_DEFAULTS_KEY",
    "PACKAGED_CONFIG",
    "PACKAGED_LABEL",
    "ConfigError",
    "ConfigFiles",
    "FoundConfig",
    "Layer",
    "config_path",
    "config_paths",
    "deep_merge",
    "find_config",
    "interpolate",
    "named_list_key",
    "overlay",
    "read_layers",
    "read_yaml",
]

CONFIG_ENV_VAR = "AGENTMESH_CONFIG"
DEFAULT_CONFIG_FILE = "agentmesh.yaml"
PACKAGED_CONFIG = Path(__file__).resolve().parent / "defaults" / "agentmesh.yaml"
"""The production-safe configuration shipped inside the package: a verbatim copy of the repository's
agentmesh.yaml (`python -m agentmesh.dev.deployfiles` writes it; a test fails when it is stale). The CLI
falls back to it anywhere outside a directory with an agentmesh.yaml."""

PACKAGED_LABEL = "packaged default"
INHERIT_DEFAULTS_KEY = "inherit_defaults"
"""A top-level key of a configuration file: `false` means the packaged defaults are not read under it
(the file is a whole configuration of its own). Not part of the schema: it is removed once read."""

_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ConfigError(Exception):
    """The configuration cannot be used; the message names the file and the key."""


def interpolate(value: Any, env: Mapping[str, str], *, where: str, path: str = "") -> Any:
    """Replaces `${VAR}` / `${VAR:-default}` in every string of a parsed YAML tree."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, where=where, path=f"{path}.{k}" if path else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, where=where, path=f"{path}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return env[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: {path}: environment variable {name} is not set")

    return _INTERPOLATION.sub(substitute, value)


ConfigFiles = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
"""One YAML file, or several applied in order (a base, then overlays)."""


def config_paths(explicit: ConfigFiles | None = None) -> list[Path]:
    """The YAML files to read, in order: the argument, else $AGENTMESH_CONFIG (several joined by
    `os.pathsep`, like KUBECONFIG: `agentmesh.yaml:agentmesh.demo.yaml`), else ./agentmesh.yaml if present."""
    if explicit is not None:
        if isinstance(explicit, str | os.PathLike):
            return [Path(explicit)]
        return [Path(item) for item in explicit]
    from_env = os.environ.get(CONFIG_ENV_VAR)
    if from_env:
        return [Path(item) for item in from_env.split(os.pathsep) if item]
    default = Path(DEFAULT_CONFIG_FILE)
    return [default] if default.exists() else []


class FoundConfig(NamedTuple):
    """The configuration files a command uses, and how they were found (for messages)."""

    files: list[Path]
    source: str
    """"--config", "$AGENTMESH_CONFIG", "./agentmesh.yaml" or "packaged default"."""

    def describe(self) -> str:
        """The files and where they came from, e.g. `/x/agentmesh.yaml (from $AGENTMESH_CONFIG)`, after the
        packaged defaults they add to."""
        if self.files == [PACKAGED_CONFIG]:
            return f"{PACKAGED_LABEL} {PACKAGED_CONFIG} (no --config, $AGENTMESH_CONFIG or ./agentmesh.yaml)"
        own = f"{' + '.join(str(file) for file in self.files)} (from {self.source})"
        return f"{PACKAGED_LABEL} {PACKAGED_CONFIG} + {own}"


def find_config(
    explicit: ConfigFiles | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> FoundConfig:
    """The CLI's configuration, first found of: `--config` (`explicit`), $AGENTMESH_CONFIG, ./agentmesh.yaml
    in `cwd`, then the packaged production-safe default (`PACKAGED_CONFIG`), so the command works from
    any directory. Files are returned absolute, so services started elsewhere read the same ones. Whatever
    is found adds to the packaged defaults (`read_layers`), it does not replace them."""
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    if explicit is not None:
        items = [explicit] if isinstance(explicit, str | os.PathLike) else list(explicit)
        return FoundConfig([cwd / Path(item) for item in items], "--config")
    from_env = env.get(CONFIG_ENV_VAR)
    if from_env:
        return FoundConfig([cwd / item for item in from_env.split(os.pathsep) if item], f"${CONFIG_ENV_VAR}")
    local = cwd / DEFAULT_CONFIG_FILE
    if local.is_file():
        return FoundConfig([local], f"./{DEFAULT_CONFIG_FILE}")
    return FoundConfig([PACKAGED_CONFIG], "packaged default")


def config_path(explicit: ConfigFiles | None = None) -> Path | None:
    """The first of `config_paths` (the base file), or None."""
    paths = config_paths(explicit)
    return paths[0] if paths else None


def read_yaml(file: Path) -> dict[str, Any]:
    """One configuration file, parsed and interpolated; ConfigError naming the file on any problem."""
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read configuration: {exc.strerror or exc}") from exc
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from exc
    if loaded is None:
        loaded = {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{file}: the top level must be a mapping, got {type(loaded).__name__}")
    data: dict[str, Any] = interpolate(loaded, os.environ, where=str(file))
    return data


_LIST_ITEM_KEYS = ("name", "id")
"""A list of mappings whose items all carry one of these keys is merged item by item (see overlay)."""


def overlay(base: Any, extra: Any) -> Any:
    """`extra` (a later configuration file) applied to `base`: mappings merge recursively; a list of
    named mappings (`agents` by `id`, `backends`, `models`, `registry` by `name`) merges item by item,
    new items appended; anything else, other lists and an empty list included, is replaced."""
    if isinstance(base, dict) and isinstance(extra, dict):
        merged = dict(base)
        for key, value in extra.items():
            merged[key] = overlay(merged[key], value) if key in merged else value
        return merged
    key = _item_key(base, extra) if isinstance(base, list) and isinstance(extra, list) and extra else None
    if key is None:
        return extra
    items = list(base)
    index = {item[key]: i for i, item in enumerate(items)}
    for item in extra:
        if item[key] in index:
            items[index[item[key]]] = overlay(items[index[item[key]]], item)
        else:
            index[item[key]] = len(items)
            items.append(item)
    return items


def named_list_key(items: list[Any]) -> str | None:
    """The key (`name` or `id`) every item of a list of mappings carries, or None: such a list merges item
    by item in an overlay, and `agentmesh config show` names its items by it."""
    return _item_key(items, [])


def _item_key(base: list[Any], extra: list[Any]) -> str | None:
    both = [*base, *extra]
    for key in _LIST_ITEM_KEYS:
        if both and all(isinstance(item, dict) and isinstance(item.get(key), str) for item in both):
            return key
    return None


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` merged into `base`, recursively for nested mappings (neither is modified)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class Layer(NamedTuple):
    """One configuration file as read, in the order they apply (later layers overlay earlier ones)."""

    label: str
    """How messages and `agentmesh config show` name it: "packaged default" or the file's path."""
    path: Path
    data: dict[str, Any]


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def read_layers(files: Sequence[Path], *, defaults: bool = True) -> list[Layer]:
    """The configuration files, read, as the layers they make: first the packaged production-safe defaults
    (`PACKAGED_CONFIG`), then `files` in order, each an overlay of the ones before, so a file holding only
    one's own agents and tools adds them to the defaults.

    The packaged defaults are left out when `defaults` is false, when one of `files` is the packaged file
    itself, or when one of them says `inherit_defaults: false` (a whole configuration of its own, e.g. a
    cluster's ConfigMap from which an operator removed an agent). ConfigError names the file on any problem."""
    layers: list[Layer] = []
    inherit = defaults and not any(_same_file(file, PACKAGED_CONFIG) for file in files)
    for file in files:
        data = read_yaml(file)
        flag = data.pop(INHERIT_DEFAULTS_KEY, True)
        if not isinstance(flag, bool):
            raise ConfigError(f"{file}: {INHERIT_DEFAULTS_KEY}: must be true or false, got {flag!r}")
        inherit = inherit and flag
        layers.append(Layer(PACKAGED_LABEL if _same_file(file, PACKAGED_CONFIG) else str(file), file, data))
    if inherit:
        layers.insert(0, Layer(PACKAGED_LABEL, PACKAGED_CONFIG, read_yaml(PACKAGED_CONFIG)))
    return layers
