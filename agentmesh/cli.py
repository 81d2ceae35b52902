"""The `agentmesh` command: `up`, `status`, `token`, `demo`.

Every sub-command reads the same configuration as the services (`--config`, else
$AGENTMESH_CONFIG, else ./agentmesh.yaml), and exits 2 with the file and key on a bad one.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from agentmesh.auth import token_command
from agentmesh.config import ConfigError, Settings, config_path, load_settings
from agentmesh.supervisor import SERVICES, Supervisor, health_status


class _Stop(Exception):
    """Raised by the signal handler to leave `up`'s wait loop."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _print_status(settings: Settings) -> bool:
    all_serving = True
    for name in ("dispatcher", "context", "tool", "provider"):
        target = settings.services.endpoint(name).dial_target
        status = health_status(target)
        all_serving &= status == "SERVING"
        print(f"{name + '_svc':<16} {target:<24} {status}")
    return all_serving


def cmd_up(settings: Settings, config: Path | None, args: argparse.Namespace) -> int:
    """Starts every service and a local Redis (when none is configured) until Ctrl-C or SIGTERM."""
    supervisor = Supervisor(settings, config_file=config)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        supervisor.start(ready_timeout_s=args.ready_timeout)
        print(f"redis            {supervisor.redis_url}")
        _print_status(settings)
        print("agentmesh is up; Ctrl-C stops every service.", flush=True)
        while True:
            exited = supervisor.exited()
            if exited:
                print(f"service exited unexpectedly: {exited}; stopping the rest", file=sys.stderr)
                return 1
            time.sleep(0.2)
    except _Stop:
        return 0
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"agentmesh up: {exc}", file=sys.stderr)
        return 1
    finally:
        # A second signal during the drain must not abandon children half-stopped.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        codes = supervisor.stop()
        if codes:
            print("stopped: " + ", ".join(f"{name}_svc={code}" for name, code in codes.items()), flush=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_status(settings: Settings, config: Path | None, args: argparse.Namespace) -> int:
    """One line per service with its health; exit 1 unless all are SERVING."""
    return 0 if _print_status(settings) else 1


def cmd_token(settings: Settings, config: Path | None, args: argparse.Namespace) -> int:
    """Prints a signed token for an operator or admin."""
    print(token_command(settings, role=args.role, subject=args.subject, ttl_s=args.ttl))
    return 0


def cmd_demo(settings: Settings, config: Path | None, args: argparse.Namespace) -> int:
    """Starts everything, shows it serving and answering, stops everything."""
    from agentmesh.demo import run_demo

    return run_demo(settings, config)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `agentmesh`."""
    parser = argparse.ArgumentParser(prog="agentmesh", description="agentmesh: a runtime for LLM agents.")
    parser.add_argument("--config", type=Path, default=None, help="agentmesh.yaml to use")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help=f"start {', '.join(s + '_svc' for s in SERVICES)} (and Redis)")
    up.add_argument("--ready-timeout", type=float, default=60.0, help="seconds to wait for SERVING")
    up.set_defaults(func=cmd_up)

    status = sub.add_parser("status", help="health of each service")
    status.set_defaults(func=cmd_status)

    token = sub.add_parser("token", help="print a signed operator/admin token")
    token.add_argument("--role", choices=["operator", "admin"], required=True)
    token.add_argument("--subject", default=None, help="who the token names (default: the role)")
    token.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")
    token.set_defaults(func=cmd_token)

    demo = sub.add_parser("demo", help="start everything, show it working, stop everything")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentmesh` console script."""
    args = build_parser().parse_args(argv)
    config = config_path(args.config)
    try:
        settings = load_settings(config)
    except ConfigError as exc:
        print(f"agentmesh: {exc}", file=sys.stderr)
        return 2
    code: int = args.func(settings, config, args)
    return code


if __name__ == "__main__":
    sys.exit(main())
