"""bench/bench_workflow.py runs end to end at tiny sizes (issue 46): the workflow, the same nodes as plain
tasks and the LangGraph graph all finish every run, and the table and ratios print. No speed is asserted."""

from __future__ import annotations

import pytest

from bench import bench_workflow, workflow_graph

pytestmark = pytest.mark.e2e


def test_bench_workflow_runs_at_tiny_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--rounds", "1", "--c1-runs", "1", "--c16-runs", "2", "--warmup", "0", "--poll-s", "0.02"]
    assert bench_workflow.main(args) == 0
    out = capsys.readouterr().out
    for name in ("workflow", "tasks", "langgraph+sqlite"):
        assert f"\n{name} " in out, out
    assert "workflow / tasks:" in out and "workflow / langgraph+sqlite:" in out, out


def test_the_graph_has_ten_nodes_and_takes_both_branches() -> None:
    assert len(workflow_graph.NODES) == workflow_graph.NODE_COUNT == 10
    # Even runs go `detail` (result > 100), odd runs `brief`: both branches of the condition are exercised.
    from tool_svc.builtin.calculator import evaluate

    assert evaluate(workflow_graph.run_input(0)["expression"]) > 100
    assert evaluate(workflow_graph.run_input(1)["expression"]) <= 100
