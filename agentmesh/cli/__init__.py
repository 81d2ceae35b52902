"""The `agentmesh` command: `up`, `status`, `token`, `demo`, `run` (a task or a workflow), `settle`, `tasks`,
`approvals`, `trace`, `init`, `config show`, ...

Every sub-command reads the configuration `find_config` finds (`--config`, before or after the
sub-command and more than once for overlays, else $AGENTMESH_CONFIG, else ./agentmesh.yaml), on top of
the packaged production-safe defaults, and exits 2 naming the files and key on a bad one (`NO_AUTH_KEY`
and the files read when there is no usable auth key); `up` hands the same files to every service it
starts. `up --demo` and `demo` add the demo overlay, agentmesh.demo.yaml (`demo_config`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from agentmesh.cli.supervisor import SERVICES, Supervisor, health_status, health_target
from agentmesh.cli.token_mint import token_command
from agentmesh.config import (
    NO_AUTH_KEY,
    ConfigError,
    FoundConfig,
    NoAuthKeyError,
    Settings,
    find_config,
    read_layers,
    settings_from_layers,
)

DEMO_CONFIG_FILE = "agentmesh.demo.yaml"
"""The overlay with the demo's tools and agents; never part of the image or the base ConfigMap."""


class _Stop(Exception):
    """Raised by the signal handler to leave `up`'s wait loop."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def _print_status(settings: Settings) -> bool:
    all_serving = True
    for name in ("dispatcher", "context", "tool", "provider"):
        target = health_target(settings, name)
        status = health_status(target)
        all_serving &= status == "SERVING"
        print(f"{name + '_svc':<16} {target:<24} {status}")
    return all_serving


def demo_config(configs: list[Path], given: Path | None = None) -> Path:
    """The demo overlay: `given`, else agentmesh.demo.yaml beside the base configuration file, else in
    the working directory. FileNotFoundError naming where it looked."""
    if given is not None:
        if not given.is_file():
            raise FileNotFoundError(f"demo configuration {given} not found")
        return given
    places = [*(p.parent / DEMO_CONFIG_FILE for p in configs[:1]), Path(DEMO_CONFIG_FILE)]
    for place in places:
        if place.is_file():
            return place
    raise FileNotFoundError(
        f"no {DEMO_CONFIG_FILE} in {' or '.join(str(p.parent) for p in places)}; pass --demo-config PATH"
    )


def with_demo(configs: list[Path], args: argparse.Namespace) -> tuple[Settings, list[Path]]:
    """The configuration files plus the demo overlay, and the settings they make."""
    files = [*configs, demo_config(configs, args.demo_config)]
    return settings_from_layers(read_layers(files)), files


def cmd_up(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Starts every service and a local Redis (when none is configured) until Ctrl-C or SIGTERM.

    `--demo` adds the demo overlay (the demo's ops tools and agent `ops`) and starts what its tools call:
    the fake ops API on 127.0.0.1 and the demo's service log (agentmesh.cli.demo_ops)."""
    extra_env: dict[str, str] = {}
    ops = None
    if args.demo:
        try:
            settings, configs = with_demo(configs, args)
        except (FileNotFoundError, ConfigError) as exc:
            print(f"agentmesh up --demo: {exc}", file=sys.stderr)
            return 2
        from agentmesh.cli.demo_ops import LOGS_DIR_ENV, OPS_URL_ENV, OpsApi, write_service_log

        ops = OpsApi().start()
        logs_dir = Path(tempfile.mkdtemp(prefix="agentmesh-demo-logs-"))
        write_service_log(logs_dir)
        extra_env = {OPS_URL_ENV: ops.url, LOGS_DIR_ENV: str(logs_dir)}
        print(f"demo             {' + '.join(str(p) for p in configs)}; fake ops API {ops.url}")
    supervisor = Supervisor(settings, config_files=configs, extra_env=extra_env)
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
        if ops is not None:
            ops.stop()
        if codes:
            print("stopped: " + ", ".join(f"{name}_svc={code}" for name, code in codes.items()), flush=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_status(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """One line per service with its health; exit 1 unless all are SERVING."""
    return 0 if _print_status(settings) else 1


def cmd_token(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Prints a signed token for an operator or admin."""
    try:
        token = token_command(
            settings,
            role=args.role,
            subject=args.subject,
            ttl_s=args.ttl,
            agent_id=args.agent,
            permissions=args.permission,
        )
    except (ValueError, ConfigError) as exc:
        print(f"agentmesh token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


def cmd_demo(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Starts everything with the demo overlay, shows it serving and answering, stops everything."""
    from agentmesh.cli.demo import run_demo

    try:
        settings, configs = with_demo(configs, args)
    except (FileNotFoundError, ConfigError) as exc:
        print(f"agentmesh demo: {exc}", file=sys.stderr)
        return 2
    return run_demo(settings, configs, scenario=args.scenario)


def cmd_probe(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """gRPC health check of one address for container health checks: exit 0 only when SERVING."""
    from agentmesh.cli.probe import run_probe

    code, line = run_probe(args.addr, service=args.service, timeout_s=args.timeout, settings=settings)
    print(line, file=sys.stdout if code == 0 else sys.stderr)
    return code


def cmd_trace(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Draws a request's trace as a terminal waterfall from a Jaeger v2 query service or the span file."""
    from agentmesh.cli.trace_view import trace_command

    query_url = settings.telemetry.trace_query_url if args.query_url is None else args.query_url
    return trace_command(
        args.span_file or settings.telemetry.span_file, args.request_id, width=args.width, query_url=query_url
    )


def cmd_context(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Prints the exact context BuildContext assembles for a session, with tokens per block; with --task
    and --step, the provider request that step of the task sent."""
    if args.task is not None or args.step is not None:
        if args.task is None or args.step is None or args.session_id is not None:
            print("agentmesh context: give a session id, or --task T --step N (not both)", file=sys.stderr)
            return 2
        from agentmesh.cli.prompt_view import step_prompt_command

        return step_prompt_command(settings, args.task, args.step, as_json=args.json)
    if args.session_id is None:
        print("agentmesh context: give a session id, or --task T --step N", file=sys.stderr)
        return 2
    from agentmesh.cli.context_view import context_command

    return context_command(settings, args.session_id, budget_tokens=args.budget, as_json=args.json)


def cmd_settle(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Settles a call whose outcome was unknown: RAN (recorded, not re-sent) or NOT_RAN (sent once more)."""
    from agentmesh.cli.settle import settle_command

    return settle_command(settings, args.task_id, ran=args.ran, reason=args.reason, token=args.token)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def cmd_mcp_serve(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Serves agentmesh's governed tools to MCP clients (stdio or streamable HTTP)."""
    from agentmesh.mcpserve.command import serve_command

    return serve_command(
        settings, transport=args.transport, host=args.host, port=args.port, token=args.token, timeout_s=args.timeout
    )


def cmd_init(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Writes a starter agentmesh.yaml (one agent, one tool) and the tool (tools.py) into the folder."""
    from agentmesh.cli.config_view import init_command

    return init_command(Path.cwd(), force=args.force)


def cmd_config_show(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Prints the effective configuration, each value with where it came from."""
    from agentmesh.cli.config_view import show_command

    found: FoundConfig = args.found_config
    return show_command(
        settings, found, args.config_layers, as_json=args.json, key=args.prefix, flags=_tls_overrides(args)
    )


def _date_arg(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text!r}") from None


def cmd_usage(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Prints recorded model usage and cost per agent, provider, model and day."""
    from agentmesh.cli.usage_report import usage_command

    return usage_command(
        settings, agent=args.agent, days=args.days, start=args.since, end=args.until, as_json=args.json, by=args.by
    )


def cmd_audit(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Prints the audit stream: who started, cancelled, approved, settled, registered or was refused."""
    from agentmesh.cli.audit_view import audit_command
    from agentmesh.cli.supervisor import local_redis_url

    if settings.redis.url is None and (url := local_redis_url(settings)):
        # No Redis configured: the one a running `agentmesh up` of this configuration started.
        settings = settings.model_copy(update={"redis": settings.redis.model_copy(update={"url": url})})

    return audit_command(
        settings, since=args.since, subject=args.subject, action=args.action, limit=args.limit, as_json=args.json
    )


def _add_tls_arguments(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--ca", type=Path, default=default, help="CA bundle (PEM): dial the services over TLS")
    parser.add_argument("--cert", type=Path, default=default, help="client certificate (PEM) for mTLS")
    parser.add_argument("--key", type=Path, default=default, help="the client certificate's private key (PEM)")


_TLS_FLAGS = (("ca", "ca_file"), ("cert", "cert_file"), ("key", "key_file"))


def _tls_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """`--ca/--cert/--key` as configuration: they turn TLS on for this command's channels."""
    given = {name: getattr(args, flag, None) for flag, name in _TLS_FLAGS}
    if not any(value is not None for value in given.values()):
        return {}
    return {"tls": {"enabled": True, **{name: str(value) for name, value in given.items() if value is not None}}}


def _tls_file_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a `--ca/--cert/--key` file (one line), before anything reads it."""
    for flag, _ in _TLS_FLAGS:
        path = getattr(args, flag, None)
        if path is None:
            continue
        if not path.exists():
            return f"--{flag} {path}: no such file"
        if not path.is_file():
            return f"--{flag} {path}: not a file"
        try:
            with path.open("rb"):
                pass
        except OSError as exc:
            return f"--{flag} {path}: cannot read it: {exc.strerror or exc}"
    return None


_CONFIG_HELP = (
    "a configuration file adding to the packaged defaults; repeat for more, each an overlay of the ones "
    "before (default: $AGENTMESH_CONFIG, else ./agentmesh.yaml)"
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of `agentmesh`."""
    parser = argparse.ArgumentParser(prog="agentmesh", description="agentmesh: a runtime for LLM agents.")
    parser.add_argument("--config", type=Path, action="append", default=None, metavar="FILE", help=_CONFIG_HELP)
    _add_tls_arguments(parser, None)
    # `--config` and the TLS flags work after the sub-command too (`agentmesh probe ADDR --ca ca.pem`,
    # `agentmesh run ... --config mine.yaml`). A sub-command's parser would overwrite the main one's list,
    # so its `--config` files land in `config_after` and are appended (`_config_files`).
    common = argparse.ArgumentParser(add_help=False)
    _add_tls_arguments(common, argparse.SUPPRESS)
    common.add_argument(
        "--config", dest="config_after", type=Path, action="append", default=argparse.SUPPRESS, metavar="FILE",
        help=_CONFIG_HELP,
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser = sub.add_parser

    def add_with_common(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return add_parser(name, parents=[common], **kwargs)

    sub.add_parser = add_with_common  # type: ignore[method-assign]

    up = sub.add_parser("up", help=f"start {', '.join(s + '_svc' for s in SERVICES)} (and Redis)")
    up.add_argument("--ready-timeout", type=float, default=60.0, help="seconds to wait for SERVING")
    up.add_argument(
        "--demo",
        action="store_true",
        help=f"add the demo overlay ({DEMO_CONFIG_FILE}: ops tools and agent `ops`, calling a local fake ops API)",
    )
    up.add_argument("--demo-config", type=Path, default=None, help=f"the demo overlay (default: {DEMO_CONFIG_FILE})")
    up.set_defaults(func=cmd_up)

    init = sub.add_parser(
        "init", help="write a starter agentmesh.yaml (an agent and its tool) and tools.py into this folder"
    )
    init.add_argument("--force", action="store_true", help="overwrite the files if they exist")
    init.set_defaults(func=cmd_init)

    config = sub.add_parser("config", help="the configuration in effect")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser(
        "show", parents=[common], help="print the effective configuration, each value with its source"
    )
    show.add_argument(
        "prefix", nargs="?", default="", metavar="KEY", help="only keys under this, e.g. agents or tools.registry"
    )
    show.add_argument("--json", action="store_true", help="one JSON object: key -> {value, source}")
    show.set_defaults(func=cmd_config_show)

    status = sub.add_parser("status", help="health of each service")
    status.set_defaults(func=cmd_status)

    token = sub.add_parser("token", help="print a signed token (agent, operator or admin; dev tokens)")
    token.add_argument(
        "--role", choices=["agent", "operator", "admin"], default=None, help="default: agent with --agent"
    )
    token.add_argument("--agent", default="", help="the agent the token acts as (e.g. ops)")
    token.add_argument(
        "--permission",
        action="append",
        default=[],
        metavar="GRANT",
        help="a grant env:group:access, repeatable (e.g. 'dev:ops.*:read', 'dev:agent.ops:run')",
    )
    token.add_argument("--subject", default=None, help="who the token names (default: the agent, else login name)")
    token.add_argument("--ttl", type=int, default=None, help="lifetime in seconds")
    token.set_defaults(func=cmd_token)

    demo = sub.add_parser("demo", help="start everything with the demo overlay, show it working, stop everything")
    demo.add_argument("scenario", nargs="?", choices=["ops", "relay"], default="ops", help="relay: 5 agents, handoffs")
    demo.add_argument("--demo-config", type=Path, default=None, help=f"the demo overlay (default: {DEMO_CONFIG_FILE})")
    demo.set_defaults(func=cmd_demo)

    usage = sub.add_parser("usage", help="model usage and cost per agent, provider, model and day")
    usage.add_argument("--agent", default="", help="only this agent")
    usage.add_argument("--days", type=int, default=None, help="the last N days (UTC), today included")
    usage.add_argument("--since", type=_date_arg, default=None, help="first day, YYYY-MM-DD (UTC)")
    usage.add_argument("--until", type=_date_arg, default=None, help="last day, YYYY-MM-DD (default: today)")
    usage.add_argument("--json", action="store_true", help="rows as JSON")
    usage.add_argument(
        "--by",
        choices=["agent", "key", "model", "day", "tag"],
        default=None,
        help="one line per agent, API key, model, day or task tag (default: every row)",
    )
    usage.set_defaults(func=cmd_usage)

    context = sub.add_parser(
        "context", help="print the context built for a session, per block; or the request a task's step sent"
    )
    context.add_argument("session_id", nargs="?", default=None, help="the session whose context to build now")
    context.add_argument("--budget", type=int, default=0, help="budget in tokens (default: the session's)")
    context.add_argument("--task", default=None, help="a task: with --step, print the provider request it sent")
    context.add_argument("--step", type=_positive_int, default=None, help="the step of --task (from 1)")
    context.add_argument("--json", action="store_true", help="the whole view as JSON; with --task, the raw request")
    context.set_defaults(func=cmd_context)

    from agentmesh.cli.probe import positive_seconds

    probe = sub.add_parser("probe", help="gRPC health check of an address (exit 0 only when SERVING)")
    probe.add_argument("addr", help="host:port (or any gRPC target) to check")
    probe.add_argument("--service", default="", help="service name to check, e.g. agentmesh.v1.ToolService")
    probe.add_argument("--timeout", type=positive_seconds, default=2.0, help="seconds to wait for the answer")
    probe.set_defaults(func=cmd_probe)

    from agentmesh.cli.run_args import add_parser as run_parser

    run_parser(sub)  # `run AGENT GOAL`, `run --workflow NAME`

    settle = sub.add_parser("settle", help="say whether a call with an unknown outcome ran (the task waits)")
    settle.add_argument("task_id", help="the task waiting for a settlement")
    found = settle.add_mutually_exclusive_group(required=True)
    found.add_argument("--ran", action="store_true", help="the effect happened: record it, do not re-send")
    found.add_argument("--not-ran", action="store_true", help="no effect: send the call once more, same key")
    settle.add_argument("--reason", default="", help="what you checked (recorded with the settlement)")
    settle.add_argument(
        "--token",
        default=None,
        help="an operator token other than the task's creator's (default: in environment dev one minted for "
        "<user>-approver, else the login name's)",
    )
    settle.set_defaults(func=cmd_settle)

    trace = sub.add_parser("trace", help="draw a request's trace as a terminal waterfall")
    trace.add_argument("request_id", help="the request id (printed by `agentmesh run`), or a task id")
    trace.add_argument("--span-file", type=Path, default=None, help="JSONL span file (default: telemetry.span_file)")
    trace.add_argument("--width", type=int, default=40, help="width of the time bars")
    trace.add_argument(
        "--query-url",
        default=None,
        help="a Jaeger v2 query service to read the trace from, e.g. http://localhost:16686 "
        "(default: telemetry.trace_query_url; '' reads the span file only)",
    )
    trace.set_defaults(func=cmd_trace)

    audit = sub.add_parser("audit", help="who did what: the audit stream, one line per entry")
    audit.add_argument("--since", default=None, help="ISO date/time (UTC) or a duration: 15m, 2h, 7d (default: 24h)")
    audit.add_argument("--subject", default="", help="only entries of this subject")
    audit.add_argument("--action", default="", help="only actions starting with this, e.g. task. or approval.")
    audit.add_argument("--limit", type=int, default=1000, help="at most this many entries (oldest first)")
    audit.add_argument("--json", action="store_true", help="one JSON object per line")
    audit.set_defaults(func=cmd_audit)

    from agentmesh.cli.keys_view import add_parsers as keys_parsers
    from agentmesh.cli.list_view import add_parsers as list_parsers

    keys_parsers(sub)  # `keys create|list|revoke`
    list_parsers(sub)  # `tasks`, `approvals`

    mcp = sub.add_parser("mcp", help="Model Context Protocol: serve agentmesh's tools to MCP clients")
    mcp_sub = mcp.add_subparsers(dest="mcp_command", required=True)
    serve = mcp_sub.add_parser(
        "serve",
        parents=[common],
        help="serve the tools your token may use over MCP (stdio or streamable HTTP), each call through the gateway",
    )
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="http: address to listen on")
    serve.add_argument("--port", type=int, default=8765, help="http: port (the endpoint is /mcp)")
    serve.add_argument(
        "--token",
        default=None,
        help="the agentmesh token to act as (default $AGENTMESH_TOKEN); http: for requests without "
        "Authorization: Bearer, on a loopback --host only. Tools are listed by its grants: an agent's token, "
        "e.g. `agentmesh token --agent assistant --permission 'dev:builtin.*:read'`",
    )
    serve.add_argument("--timeout", type=positive_seconds, default=120.0, help="seconds one tool call may take")
    serve.set_defaults(func=cmd_mcp_serve)
    return parser


def _config_files(args: argparse.Namespace) -> list[Path] | None:
    """Every `--config`, before the sub-command and after it, in order (None: none given)."""
    files = [*(args.config or ()), *getattr(args, "config_after", ())]
    return files or None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agentmesh` console script."""
    args = build_parser().parse_args(argv)
    problem = _tls_file_problem(args)
    if problem is not None:
        print(f"agentmesh: {problem}", file=sys.stderr)
        return 2
    found = find_config(_config_files(args))
    configs = found.files
    try:
        layers = read_layers(configs)
        settings = settings_from_layers(layers, overrides=_tls_overrides(args))
    except NoAuthKeyError:
        print(NO_AUTH_KEY, file=sys.stderr)
        print(f"  configuration read: {found.describe()}; {_key_hint()}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        message = str(exc)
        print(f"agentmesh: {message}", file=sys.stderr)
        if not all(str(file) in message for file in configs):
            print(f"  configuration read: {found.describe()}", file=sys.stderr)
        return 2
    # What `agentmesh config show` reports on: which files, and what each set.
    args.found_config, args.config_layers = found, layers
    code: int = args.func(settings, configs, args)
    return code


def _key_hint() -> str:
    """Why the key read (if any) is not usable: outside environment dev the development default is refused."""
    import os

    if os.environ.get("AGENTMESH_AUTH_KEY"):
        return "AGENTMESH_AUTH_KEY is set but refused (the development key outside environment dev?)"
    return "AGENTMESH_AUTH_KEY is not set (outside environment dev the development default key is refused)"


if __name__ == "__main__":
    sys.exit(main())
