"""The `agentmesh run` sub-command's arguments and dispatch: a task (`run AGENT GOAL`, run_view) or a
workflow run (`run --workflow NAME [--input ...]`, workflow_run_view)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from agentmesh.config import Settings
from agentmesh.errors import ErrorCode

_TASK_ONLY = ("approve", "deny", "token_budget", "max_steps", "task_id", "session", "output_schema", "approver_token")


def _usage_error(message: str) -> int:
    print(f"agentmesh run: {ErrorCode.INVALID_REQUEST.name}: {message}", file=sys.stderr)
    return 2


def _task_options_given(args: argparse.Namespace) -> list[str]:
    defaults = {"approve": False, "deny": False, "token_budget": 0, "max_steps": 0, "task_id": "", "session": ""}
    defaults.update({"output_schema": "", "approver_token": None})
    return ["--" + name.replace("_", "-") for name in _TASK_ONLY if getattr(args, name) != defaults[name]]


def cmd_run(settings: Settings, configs: list[Path], args: argparse.Namespace) -> int:
    """Starts a task (or, with --workflow, a workflow run) and streams its events; 0 when it SUCCEEDED."""
    from agentmesh.cli.supervisor import wait_serving

    if args.workflow is not None:
        if args.agent is not None:
            return _usage_error(f"give --workflow {args.workflow} or an agent ({args.agent}), not both")
        if not args.workflow.strip():
            return _usage_error("--workflow: must not be empty")
        if given := _task_options_given(args):
            return _usage_error(f"{', '.join(given)}: for an agent's task, not with --workflow")
    elif args.agent is None or args.goal is None:  # argparse made them optional for --workflow
        return _usage_error("give an agent and a goal (`agentmesh run AGENT GOAL`), or --workflow NAME")
    elif args.input or args.run_id:
        return _usage_error("--input and --run-id go with --workflow")

    def waiting(target: str) -> None:
        print(f"waiting up to {args.wait:g}s for dispatcher_svc at {target} ...", file=sys.stderr, flush=True)

    if args.wait > 0:
        wait_serving(settings, "dispatcher", args.wait, waiting)
    if args.workflow is not None:
        from agentmesh.cli.workflow_run_view import workflow_command

        return workflow_command(settings, args.workflow, args.input, run_id=args.run_id)

    from agentmesh.cli.run_view import run_command

    approve = "yes" if args.approve else "no" if args.deny else "ask"
    return run_command(
        settings,
        str(args.agent),
        str(args.goal),
        approve=approve,
        token_budget=args.token_budget,
        max_steps=args.max_steps,
        task_id=args.task_id,
        session_id=args.session,
        output_schema_json=_schema_text(args.output_schema),
        approver_token=args.approver_token,
    )


def _schema_text(given: str) -> str:
    """--output-schema: inline JSON, or @FILE holding it."""
    if given.startswith("@"):
        try:
            return Path(given[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            print(f"agentmesh run: --output-schema {given}: {exc.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
    return given


def add_parser(sub: Any) -> None:
    """`agentmesh run` on the sub-command parsers `sub`."""
    run = sub.add_parser(
        "run",
        help="run an agent on a goal, or a workflow (--workflow), and stream its events",
        usage="agentmesh run AGENT GOAL [options] | agentmesh run --workflow NAME [--input ...] [--run-id ID]",
    )
    run.add_argument("agent", nargs="?", default=None, help="agent id (see agents: in agentmesh.yaml)")
    run.add_argument("goal", nargs="?", default=None, help="what the agent should do")
    run.add_argument(
        "--workflow", default=None, metavar="NAME", help="run this workflow (see workflows: in agentmesh.yaml) instead"
    )
    run.add_argument(
        "--input",
        action="extend",
        nargs="+",
        default=[],
        metavar="ITEM",
        help="--workflow: the run's input: a JSON object, @FILE holding one, or key=value (a string) and "
        "key:=JSON items, merged into one object",
    )
    run.add_argument(
        "--run-id", default="", help="--workflow: the run's id (idempotent: an existing run's id follows that run)"
    )
    decide = run.add_mutually_exclusive_group()
    decide.add_argument("--approve", action="store_true", help="approve every approval request of the task")
    decide.add_argument("--deny", action="store_true", help="deny every approval request of the task")
    run.add_argument("--token-budget", type=int, default=0, help="token budget (default: the agent's)")
    run.add_argument("--max-steps", type=int, default=0, help="step limit (default: the agent's)")
    run.add_argument("--task-id", default="", help="task id (idempotent; resumes a FAILED task)")
    run.add_argument(
        "--session", default="", help="continue this session (the next turn of a conversation; printed by run)"
    )
    run.add_argument(
        "--output-schema",
        default="",
        metavar="JSON|@FILE",
        help="a JSON Schema the final answer must follow (narrows the agent's output_schema); printed as JSON",
    )
    run.add_argument(
        "--approver-token",
        default=None,
        help="a second operator's token to resolve approvals with (the task's creator may not; "
        "in environment dev one is minted for <user>-approver without it)",
    )
    run.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wait this long for the dispatcher to be SERVING first, e.g. right after `agentmesh up &` (0: not)",
    )
    run.set_defaults(func=cmd_run)
