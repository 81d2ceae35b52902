"""LiteLLM's proxy as a separate process (its own venv, `.venv-litellm`, `make litellm-venv`): a real
third-party client of our OpenAI-compatible endpoint, and the gateway bench/bench_gateway.py compares with."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
LITELLM = REPO / ".venv-litellm" / "bin" / "litellm"


def available() -> bool:
    return LITELLM.exists()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiteLLMProxy:
    """`litellm --config` on a free port, routing each model name to an OpenAI-compatible base URL."""

    def __init__(self, tmp: Path, models: dict[str, tuple[str, str, str]], *, workers: int = 1) -> None:
        """`models`: name -> (upstream model, api_base, api_key)."""
        self.tmp = tmp
        self.port = free_port()
        self.master_key = "sk-" + secrets.token_hex(24)
        self.workers = workers
        config: dict[str, Any] = {
            "model_list": [
                {"model_name": name, "litellm_params": {"model": f"openai/{model}", "api_base": base, "api_key": key}}
                for name, (model, base, key) in models.items()
            ],
            "litellm_settings": {"telemetry": False, "drop_params": True},
        }
        self.config = tmp / "litellm.yaml"
        self.config.write_text(yaml.safe_dump(config), encoding="utf-8")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> LiteLLMProxy:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTMESH_", "OTEL_", "LITELLM_"))}
        env |= {
            "LITELLM_MASTER_KEY": self.master_key,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # nothing is fetched at run time
            "LITELLM_TELEMETRY": "False",
            "LITELLM_LOG": "ERROR",
        }
        log = (self.tmp / "litellm.log").open("wb")
        command = [str(LITELLM), "--config", str(self.config), "--host", "127.0.0.1", "--port", str(self.port)]
        if self.workers > 1:
            command += ["--num_workers", str(self.workers)]
        self.process = subprocess.Popen(command, cwd=self.tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"litellm exited; see {self.tmp / 'litellm.log'}")
            try:
                if httpx.get(f"{self.base_url}/health/liveliness", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"litellm did not start within {timeout_s}s; see {self.tmp / 'litellm.log'}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> LiteLLMProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
