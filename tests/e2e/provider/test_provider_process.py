"""provider_svc as its own process: the example config's offline default, an upstream through a key
from the environment, an unset key listed as unavailable, and `agentmesh usage` over the result."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml

from agentmesh.callctx import IDENTITY_HEADER
from agentmesh.dev.localredis import LocalRedis
from agentmesh.tokens import mint_token
from agentmesh.v1 import common_pb2, provider_pb2, provider_pb2_grpc
from tests.contract.provider.fakes import FakeProvider, Reply
from tests.e2e.conftest import AUTH_KEY, REPO, free_port, spawn, wait_serving

pytestmark = pytest.mark.e2e


def _config(tmp_path: Path, port: int, fake: FakeProvider) -> Path:
    """The repository's agentmesh.yaml with provider_svc on `port` and openai pointing at the fake."""
    data = yaml.safe_load((REPO / "agentmesh.yaml").read_text(encoding="utf-8"))
    data["services"]["provider"]["port"] = port
    data["services"]["provider"]["http_port"] = 0
    for backend in data["providers"]["backends"]:
        if backend["name"] == "openai":
            backend["base_url"] = fake.base_url
            backend["retry"] = {"max_retries": 1, "base_s": 0.01, "cap_s": 0.02, "jitter_s": 0}
    path = tmp_path / "agentmesh.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_provider_process_end_to_end(tmp_path: Path, process_env: dict[str, str], e2e_redis: LocalRedis) -> None:
    port = free_port()
    with FakeProvider("openai") as fake:
        config = _config(tmp_path, port, fake)
        env = {
            **process_env,
            "AGENTMESH_CONFIG": str(config),
            "AGENTMESH_REDIS_URL": e2e_redis.url,
            "OPENAI_API_KEY": "sk-e2e-openai-key-0123456789",
        }
        env.pop("ANTHROPIC_API_KEY", None)
        proc = spawn(["-m", "provider_svc", str(config)], env, tmp_path / "provider.log")
        try:
            target = f"127.0.0.1:{port}"
            wait_serving(target)
            token = mint_token(AUTH_KEY.encode(), subject="e2e", roles=["agent"], agent_id="e2e-agent", ttl_s=300)
            metadata = ((IDENTITY_HEADER, token),)
            with grpc.insecure_channel(target) as channel:
                stub = provider_pb2_grpc.ProviderServiceStub(channel)  # type: ignore[no-untyped-call]
                hello = [common_pb2.Message(role=common_pb2.ROLE_USER, content="hello")]
                offline = stub.Generate(provider_pb2.GenerateRequest(messages=hello), metadata=metadata, timeout=30)
                assert offline.model == "scripted/default"
                fake.push(Reply(text="from the fake", usage=(1_000_000, 0)))
                online = stub.Generate(
                    provider_pb2.GenerateRequest(model="openai/gpt-4o-mini", messages=hello),
                    metadata=metadata,
                    timeout=30,
                )
                assert online.message.content == "from the fake"
                assert online.cost_usd == pytest.approx(0.15)
                # The example config falls back from gpt-4o-mini to anthropic (no key: unavailable) to scripted.
                fake.push(Reply.error(503, "down"), Reply.error(503, "down"))
                fell_back = stub.Generate(
                    provider_pb2.GenerateRequest(model="openai/gpt-4o-mini", messages=hello),
                    metadata=metadata,
                    timeout=30,
                )
                assert fell_back.model == "scripted/default"
                assert [a.model for a in fell_back.attempts] == [
                    "openai/gpt-4o-mini",
                    "openai/gpt-4o-mini",
                    "anthropic/claude-haiku-4-5",
                    "scripted/default",
                ]
                listing = stub.ListModels(provider_pb2.ListModelsRequest(), metadata=metadata, timeout=30)
                unavailable = {m.name for m in listing.models if m.unavailable}
                assert unavailable == {"anthropic/claude-sonnet-4-5", "anthropic/claude-haiku-4-5"}
            assert fake.requests()[1].headers["authorization"] == "Bearer sk-e2e-openai-key-0123456789"

            cli = subprocess.run(
                [sys.executable, "-m", "agentmesh.cli", "--config", str(config), "usage", "--days", "1"],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert cli.returncode == 0, cli.stderr
            lines = cli.stdout.splitlines()
            assert lines[0].split()[:4] == ["day", "agent", "provider", "model"]
            models = {(line.split()[1], line.split()[3]): line.split()[4] for line in lines[2:-2]}
            assert models == {("e2e-agent", "default"): "2", ("e2e-agent", "gpt-4o-mini"): "1"}
            assert lines[-1].split()[:2] == ["total", "3"]
            assert "0.150000" in lines[-1]
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
        log = (tmp_path / "provider.log").read_text(encoding="utf-8")
        assert "sk-e2e-openai-key" not in log
        assert "anthropic/claude-haiku-4-5 unavailable" in log
