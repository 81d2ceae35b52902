"""`agentmesh keys create|list|revoke` on a real Redis, the key used against a running provider_svc, and
`agentmesh usage --by agent|key|model|day|tag`."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agentmesh.audit import AuditLog
from agentmesh.cli import main
from agentmesh.cli.keys_view import create_command, list_command, revoke_command
from agentmesh.cli.usage_report import format_grouped, grouped
from agentmesh.config import Settings
from tests.contract.gateway.conftest import Gateway, gateway_config


def _run(fn: Callable[..., int], *args: Any, **kw: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = fn(*args, out=out, **kw) if fn is list_command or fn is revoke_command else fn(*args, out=out, err=err, **kw)
    return code, out.getvalue(), err.getvalue()


async def test_keys_create_list_revoke_and_use(start_gateway: Any, make_settings: Callable[..., Settings]) -> None:
    gw: Gateway = await start_gateway(gateway_config())
    settings = make_settings()
    code, out, err = await asyncio.to_thread(
        _run,
        create_command,
        settings,
        agent="support-bot",
        name="support",
        budgets=["5/day", "100/month"],
        rpm=60,
        tpm=100_000,
        models=["scripted/*"],
    )
    assert code == 0, err
    key = out.strip()
    assert key.startswith("amk_") and "shown once" in err
    key_id = key[4:16]
    code, listed, _ = await asyncio.to_thread(_run, list_command, settings, as_json=True)
    record = json.loads(listed.splitlines()[-1])
    assert record["id"] == key_id and record["budget_usd_day"] == 5 and record["budget_usd_month"] == 100
    assert record["rpm"] == 60 and record["tpm"] == 100_000 and record["models"] == ["scripted/*"]
    assert key not in listed and key.split("_", 2)[2] not in listed  # never the secret
    async with httpx.AsyncClient(headers={"authorization": f"Bearer {key}"}) as client:
        ok = await client.post(
            f"{gw.base_url}/v1/chat/completions",
            json={"model": "scripted/default", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert ok.status_code == 200, ok.text
        code, out = (await asyncio.to_thread(_run, revoke_command, settings, key_id))[:2]
        assert code == 0 and "revoked" in out
        refused = await client.post(
            f"{gw.base_url}/v1/chat/completions",
            json={"model": "scripted/default", "messages": [{"role": "user", "content": "hello"}]},
        )
        assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    assert gw.svc.host.store is not None
    actions = [(e.action, e.target) for e in await AuditLog(gw.svc.host.store).read(action="key.")]
    assert actions == [("key.create", key_id), ("key.revoke", key_id)]
    code, _, err = await asyncio.to_thread(_run, create_command, settings, agent="a", budgets=["5 a day"])
    assert code == 2 and "expected USD/period" in err
    assert (await asyncio.to_thread(_run, revoke_command, settings, "000000000000"))[0] == 2


def test_keys_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["keys", "create"])  # --agent is required
    assert "--agent" in capsys.readouterr().err


def test_usage_by_groups_rows() -> None:
    rows = [
        {"day": "2026-12-01", "agent_id": "ops", "provider": "openai", "model": "gpt-4o", "calls": 2,
         "input_tokens": 1200, "output_tokens": 300, "cost_usd": 0.006, "total_latency_ms": 1600.0,
         "task_tag": "", "api_key_id": "aaaaaaaaaaaa"},
        {"day": "2026-12-02", "agent_id": "ops", "provider": "scripted", "model": "cheap", "calls": 6,
         "input_tokens": 60, "output_tokens": 40, "cost_usd": 0.001, "total_latency_ms": 6.0,
         "task_tag": "summarize", "api_key_id": "aaaaaaaaaaaa"},
        {"day": "2026-12-02", "agent_id": "web", "provider": "openai", "model": "gpt-4o", "calls": 1,
         "input_tokens": 100, "output_tokens": 10, "cost_usd": 0.002, "total_latency_ms": 400.0,
         "task_tag": "", "api_key_id": ""},
    ]  # fmt: skip
    by_model = grouped(rows, "model")
    assert [(g["model"], g["calls"], round(g["cost_usd"], 6)) for g in by_model] == [
        ("openai/gpt-4o", 3, 0.008),
        ("scripted/cheap", 6, 0.001),
    ]
    assert by_model[0]["avg_latency_ms"] == pytest.approx(2000 / 3)
    assert [(g["key"], g["calls"]) for g in grouped(rows, "key")] == [("", 1), ("aaaaaaaaaaaa", 8)]
    assert [(g["agent"], g["calls"]) for g in grouped(rows, "agent")] == [("ops", 8), ("web", 1)]
    assert [(g["day"], g["calls"]) for g in grouped(rows, "day")] == [("2026-12-01", 2), ("2026-12-02", 7)]
    lines = format_grouped(grouped(rows, "tag"), "tag").splitlines()
    assert lines[0].split() == ["tag", "calls", "input", "tok", "output", "tok", "cost", "USD", "avg", "ms"]
    assert lines[2].split()[:2] == ["(none)", "3"] and lines[3].split()[:2] == ["summarize", "6"]
    assert lines[-1].split()[:2] == ["total", "9"]
