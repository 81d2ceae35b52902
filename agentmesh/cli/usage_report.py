"""`agentmesh usage`: provider_svc's recorded usage and cost, as a table (or JSON).

`--by agent|key|model|day|tag` sums the rows into one line per agent, API key, model
(`provider/model`), UTC day or task tag (the tag the calls were routed by: a price route shows which
models it picked); without it every (day, agent, model, tag, key) row is shown.

Calls `ProviderService.GetUsage` with a short-lived operator token minted from the configured
auth key (the same way `agentmesh token` does), so it sees every agent's usage.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio
from google.protobuf import timestamp_pb2

from agentmesh.authenticator import Authenticator
from agentmesh.cli.tracing import command_trace
from agentmesh.config import Settings
from agentmesh.rpc import codec
from agentmesh.rpc.channels import ServiceClients
from agentmesh.v1 import provider_pb2

__all__ = ["format_grouped", "format_table", "grouped", "usage_command"]

HEADER = ("day", "agent", "provider", "model", "calls", "input tok", "output tok", "cost USD", "avg ms")


def _timestamp(day: dt.date) -> timestamp_pb2.Timestamp:
    return codec.timestamp(dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp())


def _rows(reply: provider_pb2.GetUsageResponse) -> list[dict[str, Any]]:
    rows = []
    for r in reply.rows:
        latency_s = codec.duration_seconds(r.total_latency, "total_latency")
        rows.append(
            {
                "day": r.day,
                "agent_id": r.agent_id,
                "provider": r.provider,
                "model": r.model,
                "calls": r.calls,
                "input_tokens": r.usage.input_tokens,
                "output_tokens": r.usage.output_tokens,
                "cost_usd": r.cost_usd,
                "avg_latency_ms": (latency_s * 1000 / r.calls) if r.calls else 0.0,
                "task_tag": r.task_tag,
                "api_key_id": r.api_key_id,
                "total_latency_ms": latency_s * 1000,
            }
        )
    return sorted(
        rows,
        key=lambda row: (
            row["day"],
            row["agent_id"],
            row["provider"],
            row["model"],
            row["task_tag"],
            row["api_key_id"],
        ),
    )


_GROUPS = {"agent": "agent_id", "key": "api_key_id", "model": "model", "day": "day", "tag": "task_tag"}


def grouped(rows: Sequence[dict[str, Any]], by: str) -> list[dict[str, Any]]:
    """The rows summed per agent, key, model, day or tag (`--by`), by name."""
    field = _GROUPS[by]
    sums: dict[str, dict[str, Any]] = {}
    for row in rows:
        name = f"{row['provider']}/{row['model']}" if by == "model" else row[field]
        into = sums.setdefault(
            name,
            {by: name, "calls": 0, "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "total_latency_ms": 0.0},
        )
        for metric in ("calls", "input_tokens", "output_tokens", "cost_usd", "total_latency_ms"):
            into[metric] += row[metric]
    out = []
    for name in sorted(sums):
        entry = sums[name]
        entry["avg_latency_ms"] = entry.pop("total_latency_ms") / entry["calls"] if entry["calls"] else 0.0
        out.append(entry)
    return out


def format_grouped(rows: Sequence[dict[str, Any]], by: str) -> str:
    """`--by` lines as an aligned table with a total line."""
    header = (by, "calls", "input tok", "output tok", "cost USD", "avg ms")
    cells = [
        [row[by] or "(none)", str(row["calls"]), str(row["input_tokens"]), str(row["output_tokens"]),
         f"{row['cost_usd']:.6f}", f"{row['avg_latency_ms']:.1f}"]
        for row in rows
    ]  # fmt: skip
    cells.append(
        ["total", str(sum(r["calls"] for r in rows)), str(sum(r["input_tokens"] for r in rows)),
         str(sum(r["output_tokens"] for r in rows)), f"{sum(r['cost_usd'] for r in rows):.6f}", ""]
    )  # fmt: skip
    widths = [max(len(str(c)) for c in column) for column in zip(header, *cells, strict=True)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True)))

    rule = "  ".join("-" * w for w in widths)
    return "\n".join(s.rstrip() for s in [line(header), rule, *(line(c) for c in cells[:-1]), rule, line(cells[-1])])


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned text table with a total line."""
    cells = [
        [
            row["day"],
            row["agent_id"],
            row["provider"],
            row["model"],
            str(row["calls"]),
            str(row["input_tokens"]),
            str(row["output_tokens"]),
            f"{row['cost_usd']:.6f}",
            f"{row['avg_latency_ms']:.1f}",
        ]
        for row in rows
    ]
    cells.append(
        [
            "total",
            "",
            "",
            "",
            str(sum(r["calls"] for r in rows)),
            str(sum(r["input_tokens"] for r in rows)),
            str(sum(r["output_tokens"] for r in rows)),
            f"{sum(r['cost_usd'] for r in rows):.6f}",
            "",
        ]
    )
    widths = [max(len(str(c)) for c in column) for column in zip(HEADER, *cells, strict=True)]
    numeric = set(range(4, len(HEADER)))

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if i in numeric else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths, strict=True))
        )

    out = [line(HEADER), "  ".join("-" * w for w in widths)]
    out += [line(c) for c in cells[:-1]]
    out += ["  ".join("-" * w for w in widths), line(cells[-1])]
    return "\n".join(s.rstrip() for s in out)


async def _fetch(settings: Settings, request: provider_pb2.GetUsageRequest, timeout_s: float) -> Any:
    token = Authenticator(settings.auth, settings.environment).mint(
        subject="agentmesh-usage", roles=frozenset({"operator"}), ttl_s=300
    )
    async with ServiceClients(settings, identity_token=token) as clients:
        return await clients.provider().GetUsage(request, timeout=timeout_s)


def usage_command(
    settings: Settings,
    *,
    agent: str = "",
    days: int | None = None,
    start: dt.date | None = None,
    end: dt.date | None = None,
    as_json: bool = False,
    timeout_s: float = 10.0,
    by: str | None = None,
) -> int:
    """Prints usage rows; 0 on success, 1 when provider_svc cannot answer, 2 on bad arguments."""
    if days is not None:
        if days <= 0:
            print("agentmesh usage: --days must be > 0", file=sys.stderr)
            return 2
        today = dt.datetime.now(dt.UTC).date()
        start, end = today - dt.timedelta(days=days - 1), today
    if start is not None and end is not None and start > end:
        print("agentmesh usage: --since must not be after --until", file=sys.stderr)
        return 2
    request = provider_pb2.GetUsageRequest(agent_id=agent)
    if start is not None:
        request.start_time.CopyFrom(_timestamp(start))
    if end is not None:
        request.end_time.CopyFrom(_timestamp(end))
    try:
        with command_trace(settings, "usage"):
            reply = asyncio.run(_fetch(settings, request, timeout_s))
    except grpc.aio.AioRpcError as exc:
        target = settings.services.endpoint("provider").dial_target
        print(f"agentmesh usage: provider_svc at {target}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    rows = _rows(reply)
    if by is not None:
        groups = grouped(rows, by)
        if as_json:
            print(json.dumps(groups, indent=2))
        elif not groups:
            print("no usage recorded" + (f" for agent {agent}" if agent else ""))
        else:
            print(format_grouped(groups, by))
        return 0
    if as_json:
        print(json.dumps([{k: v for k, v in r.items() if k != "total_latency_ms"} for r in rows], indent=2))
    elif not rows:
        print("no usage recorded" + (f" for agent {agent}" if agent else ""))
    else:
        print(format_table(rows))
    return 0
