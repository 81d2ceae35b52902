"""`query_logs`: read service logs under the configured directory, filtered by service, level, time, text.

Files are `<logs_dir>/<service>.log`; lines are JSON objects (`ts|time|timestamp`, `level|severity`,
`service`, `msg|message`) or text `<timestamp> <LEVEL> [<service>] <message>`. The service name is a
strict pattern, so no argument can name a path outside the directory.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmesh.errors import AgentmeshError, ErrorCode, Violation
from tool_svc.cpu import CpuPool
from tool_svc.model import Invocation, Produced

SERVICE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
LEVELS = ("DEBUG", "INFO", "WARN", "WARNING", "ERROR", "FATAL", "CRITICAL")
_RANK = {"DEBUG": 10, "INFO": 20, "WARN": 30, "WARNING": 30, "ERROR": 40, "FATAL": 50, "CRITICAL": 50}
MAX_LIMIT = 2000

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service": {
            "type": "string",
            "pattern": SERVICE_PATTERN,
            "description": "The service whose log to read, e.g. payment-svc; omit for every service",
            "examples": ["payment-svc"],
        },
        "level": {"type": "string", "enum": list(LEVELS), "description": "Minimum level, e.g. WARN"},
        "since": {"type": "string", "format": "date-time", "description": "ISO 8601 start, e.g. 2025-06-01T10:00:00Z"},
        "until": {"type": "string", "format": "date-time", "description": "ISO 8601 end (exclusive)"},
        "contains": {"type": "string", "maxLength": 200, "description": "Case-insensitive text the line must contain"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 200},
    },
    "additionalProperties": False,
}

_TEXT_LINE = re.compile(
    r"^(?P<ts>\d{4}-\d{2}-\d{2}[T ][0-9:.]+(?:Z|[+-]\d{2}:?\d{2})?)\s+\[?(?P<level>[A-Za-z]+)\]?\s+"
    r"(?:\[?(?P<service>[a-z0-9][a-z0-9._-]*)\]?:?\s+)?(?P<msg>.*)$"
)


@dataclass(frozen=True)
class LogLine:
    raw: str
    ts: dt.datetime | None
    level: str
    service: str


def _parse_time(value: str) -> dt.datetime | None:
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace(" ", "T", 1))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def parse_line(raw: str, default_service: str) -> LogLine:
    text = raw.rstrip("\n")
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            ts = next((str(data[k]) for k in ("ts", "time", "timestamp") if k in data), "")
            level = str(data.get("level") or data.get("severity") or "").upper()
            return LogLine(text, _parse_time(ts) if ts else None, level, str(data.get("service") or default_service))
    match = _TEXT_LINE.match(text)
    if match:
        level = match.group("level").upper()
        service = match.group("service") or default_service
        return LogLine(text, _parse_time(match.group("ts")), level if level in _RANK else "", service)
    return LogLine(text, None, "", default_service)


def _time_arg(args: dict[str, Any], name: str) -> dt.datetime | None:
    if not args.get(name):
        return None
    parsed = _parse_time(str(args[name]))
    if parsed is None:
        raise AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            f"query_logs: {name} is not an ISO 8601 time",
            violations=[
                Violation(
                    path=f"$.{name}",
                    rule="format",
                    expected="date-time",
                    actual=json.dumps(args[name])[:100],
                    hint=f"{name} must be an ISO 8601 time such as 2025-06-01T10:00:00Z",
                )
            ],
        )
    return parsed


def _files(directory: Path, service: str | None) -> list[Path]:
    if service is not None:
        path = directory / f"{service}.log"
        return [path] if path.is_file() else []
    return sorted(p for p in directory.glob("*.log") if p.is_file())


def _lines(path: Path) -> Iterator[str]:
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        yield from handle


def search(directory: Path, args: dict[str, Any]) -> str:
    service = args.get("service")
    files = _files(directory, service)
    if not files:
        known = sorted(p.stem for p in directory.glob("*.log")) if directory.is_dir() else []
        raise AgentmeshError(
            ErrorCode.SCHEMA_INVALID,
            f"query_logs: no log for service {service!r}",
            violations=[
                Violation(
                    path="$.service",
                    rule="enum",
                    expected=", ".join(known) or "(no logs)",
                    actual=json.dumps(service),
                    hint=f"known services: {', '.join(known) or 'none'}",
                )
            ],
        )
    min_rank = _RANK.get(str(args.get("level", "")).upper(), 0)
    since = _time_arg(args, "since")
    until = _time_arg(args, "until")
    needle = str(args.get("contains", "")).lower()
    limit = int(args.get("limit", 200))
    kept: deque[str] = deque(maxlen=limit)
    matched = scanned = 0
    for path in files:
        for raw in _lines(path):
            scanned += 1
            line = parse_line(raw, path.stem)
            if min_rank and _RANK.get(line.level, 0) < min_rank:
                continue
            if (since or until) and line.ts is None:
                continue
            if since and line.ts and line.ts < since:
                continue
            if until and line.ts and line.ts >= until:
                continue
            if needle and needle not in line.raw.lower():
                continue
            matched += 1
            kept.append(line.raw if len(files) == 1 else f"{path.stem}: {line.raw}")
    shown = len(kept)
    header = f"# {matched} matching lines of {scanned} scanned" + (
        f", showing the last {shown}" if shown < matched else ""
    )
    return "\n".join([header, *kept])


def make(logs_dir: Path, cpu: CpuPool) -> Any:
    async def run(call: Invocation) -> Produced:
        # Always in the CPU pool: the logs' size is not known before reading them, and parsing is CPU
        # bound (a thread would hold the GIL and could not be stopped at the timeout).
        text = await cpu.run(
            search,
            logs_dir,
            dict(call.arguments),
            timeout_s=call.timeout_s,
            what="query_logs",
            fallback_tool=call.tool.fallback_tool,
        )
        return Produced("text", text=text)

    return run
