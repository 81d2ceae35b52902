"""`agentmesh audit` over the test Redis: filters, `--since` forms, text and JSON lines, bad arguments."""

from __future__ import annotations

import datetime as dt
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentmesh.audit import AuditLog
from agentmesh.cli import main
from agentmesh.cli.audit_view import audit_command, parse_since
from agentmesh.config import RedisSettings, Settings
from agentmesh.store import Store

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC).timestamp()

# What the acceptance names: a start, a cancel, an approval, a settlement and a RegisterTool.
# The dispatcher's entries are written here directly; tool_svc's come from tests/contract/tool/test_audit.py.
ENTRIES = [
    {"subject": "ops-jane", "action": "task.start", "target": "t-1", "detail": "agent sre-bot"},
    {"subject": "ops-jane", "action": "task.cancel", "target": "t-1"},
    {"subject": "ops-bob", "action": "approval.resolve", "target": "apr_1", "detail": "approved (restart_service)"},
    {"subject": "ops-bob", "action": "settlement.resolve", "target": "stl_1", "detail": "ran (charge)"},
    {"subject": "root-ann", "action": "tool.register", "target": "get_inventory"},
]


async def _write(store: Store) -> list[int]:
    log = AuditLog(store)
    for entry in ENTRIES:
        await log.record(**entry)
    return [e.time_ms for e in await log.read()]


def _run(settings: Settings, **options: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = audit_command(settings, out=out, err=err, **options)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


async def test_lists_each_entry_with_time_subject_action_target_outcome(settings: Settings, store: Store) -> None:
    times = await _write(store)
    code, out, err = await _in_thread(settings)
    assert code == 0, err
    header, *lines = out.splitlines()
    assert header.split() == ["time", "(UTC)", "subject", "action", "target", "outcome", "detail"]
    assert len(lines) == len(ENTRIES)
    for line, entry, time_ms in zip(lines, ENTRIES, times, strict=True):
        stamp = dt.datetime.fromtimestamp(time_ms / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        cells = line.split()
        assert cells[0].startswith(stamp) and cells[0].endswith("Z"), line
        assert cells[1:5] == [entry["subject"], entry["action"], entry["target"], "ok"], line
        assert line.endswith(entry.get("detail", "ok")), line


async def test_filters_by_subject_and_action_prefix_and_prints_json_lines(settings: Settings, store: Store) -> None:
    await _write(store)
    code, out, _ = await _in_thread(settings, subject="ops-jane", as_json=True)
    assert code == 0
    rows = [json.loads(line) for line in out.splitlines()]
    assert [(r["subject"], r["action"], r["target"]) for r in rows] == [
        ("ops-jane", "task.start", "t-1"),
        ("ops-jane", "task.cancel", "t-1"),
    ]
    assert set(rows[0]) == {"time", "time_ms", "subject", "action", "target", "outcome", "detail", "id"}
    assert rows[0]["time"].endswith("Z") and rows[0]["outcome"] == "ok"
    code, out, _ = await _in_thread(settings, action="task.", as_json=True)
    assert [json.loads(line)["action"] for line in out.splitlines()] == ["task.start", "task.cancel"]
    code, out, err = await _in_thread(settings, limit=2)
    assert code == 0 and len(out.splitlines()) == 3 and "first 2 entries" in err
    code, out, _ = await _in_thread(settings, subject="nobody")
    assert code == 0 and out.startswith("no audit entries of subject nobody since ")


async def test_since_excludes_older_entries(settings: Settings, store: Store) -> None:
    await _write(store)
    code, out, _ = await _in_thread(settings, since="2h", as_json=True)
    assert code == 0 and len(out.splitlines()) == len(ENTRIES)
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    code, out, _ = await _in_thread(settings, since=future, as_json=True)
    assert code == 0 and out == ""


def test_since_accepts_durations_and_iso_dates() -> None:
    assert parse_since("15m", now=NOW) == int((NOW - 900) * 1000)
    assert parse_since("2h", now=NOW) == int((NOW - 7200) * 1000)
    assert parse_since("7d", now=NOW) == int((NOW - 7 * 86400) * 1000)
    assert parse_since("90s", now=NOW) == int((NOW - 90) * 1000)
    midnight = int(dt.datetime(2026, 12, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert parse_since("2026-12-01", now=NOW) == midnight
    assert parse_since("2026-12-01T00:00Z", now=NOW) == midnight
    assert parse_since("2026-12-01T01:00:00+01:00", now=NOW) == midnight
    assert parse_since("2026-12-01T09:30", now=NOW) == midnight + int(9.5 * 3600 * 1000)
    for bad in ("yesterday", "15", "-2h", "2026-13-01"):
        with pytest.raises(ValueError, match="neither an ISO date"):
            parse_since(bad, now=NOW)


def test_bad_arguments_exit_2(settings: Settings) -> None:
    code, _, err = _run(settings, since="last tuesday")
    assert code == 2 and "--since 'last tuesday'" in err
    code, _, err = _run(settings, limit=0)
    assert code == 2 and "--limit" in err


def test_an_unreachable_redis_exits_1(settings: Settings) -> None:
    nowhere = RedisSettings(url="redis://127.0.0.1:1/0", connect_timeout_s=0.2)
    code, _, err = _run(settings.model_copy(update={"redis": nowhere}))
    assert code == 1 and err.startswith("agentmesh audit: ")


async def test_the_sub_command_is_registered(
    settings: Settings, store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await _write(store)
    config = tmp_path / "audit.yaml"
    config.write_text(
        f"redis:\n  url: {settings.redis.url}\nauth:\n  key: {settings.auth.key.get_secret_value()}\n",  # type: ignore[union-attr]
        encoding="utf-8",
    )
    argv = ["--config", str(config), "audit", "--since", "1h", "--action", "tool.", "--json"]
    code = await _thread(lambda: main(argv))
    assert code == 0
    [row] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (row["subject"], row["action"], row["target"]) == ("root-ann", "tool.register", "get_inventory")


async def _thread(function: Callable[[], Any]) -> Any:
    # The command runs its own event loop (asyncio.run); keep it off the test's.
    import asyncio

    return await asyncio.to_thread(function)


async def _in_thread(settings: Settings, **options: Any) -> tuple[int, str, str]:
    return await _thread(lambda: _run(settings, **options))  # type: ignore[no-any-return]
