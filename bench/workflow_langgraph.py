"""bench_workflow's LangGraph arm: the same 10-node graph as a StateGraph with AsyncSqliteSaver, in this process.

Send for the fan-out, a conditional edge for the condition, a waiting edge for the join; agent nodes call a fake
chat model (GenericFakeChatModel), tool nodes the same calculator function (`tool_svc.builtin.calculator`).
"""

from __future__ import annotations

import itertools
import operator
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench.bench_peer import timed
from bench.workflow_graph import Sample, run_input
from tool_svc.builtin.calculator import evaluate

__all__ = ["LangGraph", "RunState"]


class RunState(TypedDict):
    """The state of one LangGraph run: the input, each node's output, the fan-out's outputs."""

    question: str
    expression: str
    parts: list[str]
    outputs: Annotated[dict[str, Any], operator.or_]
    part_results: Annotated[list[Any], operator.add]


class LangGraph:
    """The same graph as a StateGraph with AsyncSqliteSaver, in this process."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "langgraph.sqlite"
        self.graph: Any = None
        self.saver_cm: Any = None

    async def start(self) -> None:
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        model = GenericFakeChatModel(messages=itertools.cycle([AIMessage(content="ANSWER")]))

        def agent(name: str, goal: Callable[[RunState], str]) -> Any:  # Any: StateGraph.add_node's overloads
            async def node(state: RunState) -> dict[str, Any]:
                reply = await model.ainvoke([HumanMessage(content=goal(state))])
                return {"outputs": {name: f"{reply.content} {goal(state)[:60]}"}}

            return node

        def calc(expression: str) -> dict[str, Any]:
            return {"expression": expression, "result": evaluate(expression)}

        async def total(state: RunState) -> dict[str, Any]:
            return {"outputs": {"total": calc(state["expression"])}}

        async def part(item: dict[str, str]) -> dict[str, Any]:
            return {"part_results": [calc(item["expression"])]}

        async def evidence(state: RunState) -> dict[str, Any]:
            return {"outputs": {"evidence": {"total": state["outputs"]["total"], "parts": state["part_results"]}}}

        async def big(state: RunState) -> dict[str, Any]:
            return {"outputs": {"big": {"value": float(state["outputs"]["total"]["result"]) > 100.0}}}

        async def answered(state: RunState) -> dict[str, Any]:
            return {"outputs": {"answered": True}}

        async def check(state: RunState) -> dict[str, Any]:
            return {"outputs": {"check": calc(f"{state['expression']} - 1")}}

        builder = StateGraph(RunState)
        builder.add_node("intake", agent("intake", lambda s: f"classify: {s['question']}"))
        builder.add_node("total", total)
        builder.add_node("part", part)  # type: ignore[arg-type]
        builder.add_node("evidence", evidence)
        builder.add_node("big", big)
        builder.add_node("detail", agent("detail", lambda s: f"explain in detail: {s['outputs']['total']}"))
        builder.add_node("brief", agent("brief", lambda s: f"explain briefly: {s['outputs']['total']}"))
        builder.add_node("answered", answered)
        builder.add_node("check", check)
        builder.add_node("summary", agent("summary", lambda s: f"sum up: {s['outputs']['check']}"))
        builder.add_edge(START, "intake")
        builder.add_edge("intake", "total")
        builder.add_conditional_edges(
            "intake", lambda s: [Send("part", {"expression": p}) for p in s["parts"]], ["part"]
        )
        builder.add_edge(["total", "part"], "evidence")
        builder.add_edge("evidence", "big")
        builder.add_conditional_edges(
            "big", lambda s: "detail" if s["outputs"]["big"]["value"] else "brief", ["detail", "brief"]
        )
        builder.add_edge("detail", "answered")
        builder.add_edge("brief", "answered")
        builder.add_edge("answered", "check")
        builder.add_edge("check", "summary")
        builder.add_edge("summary", END)
        self.saver_cm = AsyncSqliteSaver.from_conn_string(str(self.path))
        saver = await self.saver_cm.__aenter__()
        self.graph = builder.compile(checkpointer=saver)

    async def stop(self) -> None:
        if self.saver_cm is not None:
            await self.saver_cm.__aexit__(None, None, None)

    async def run(self, n: int, concurrency: int, tag: str) -> Sample:
        failed: list[str] = []

        async def one(i: int) -> None:
            config = {"configurable": {"thread_id": f"{tag}-{i}"}}
            state = {**run_input(i), "outputs": {}, "part_results": []}
            out = await self.graph.ainvoke(state, config)
            if "summary" not in out["outputs"] or len(out["part_results"]) != 3:
                failed.append(str(out)[:300])

        before = resource.getrusage(resource.RUSAGE_SELF)
        latencies, wall = await timed(one, n, concurrency)
        after = resource.getrusage(resource.RUSAGE_SELF)
        if failed:
            raise RuntimeError(f"langgraph: {len(failed)} of {n} runs failed, e.g. {failed[0]}")
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        return Sample(latencies, wall, cpu)
