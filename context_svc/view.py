"""The ContextView BuildContext returns, made from the filled blocks, and its debug rendering.

`assemble_view` lays the blocks out as the messages a step sends (the system block, the summary block,
then the window's turns and tool observations in log order) with each block's tokens and budget; with
`debug` each block carries its text and the view a readable rendering of every block (`_debug_text`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from context_svc.budget import BlockBudgets
from context_svc.model import Block, BlockKind, ContextView, Message, Role
from context_svc.summary_view import SummaryView

__all__ = ["assemble_view"]


def _now() -> float:
    return time.time()


def assemble_view(
    plan: BlockBudgets,
    system_text: str,
    system_tokens: int,
    summary_view: SummaryView | None,
    kept: list[Message],
    first_kept: int,
    compacted: bool,
    debug: bool,
) -> ContextView:
    """The view of the filled blocks: the system message, the summary's, then the window's messages."""
    now = _now()
    messages = [Message(Role.SYSTEM, system_text, token_count=system_tokens, create_time=now)]
    summary_tokens = 0
    if summary_view is not None:
        summary_tokens = summary_view.tokens
        messages.append(Message(Role.SYSTEM, summary_view.text, token_count=summary_tokens, create_time=now))
    messages += kept
    recent = [m for m in kept if m.role is not Role.TOOL]
    observations = [m for m in kept if m.role is Role.TOOL]
    recent_tokens = sum(m.token_count for m in recent)
    observation_tokens = sum(m.token_count for m in observations)
    observation_budget = plan.total - system_tokens - summary_tokens - recent_tokens - plan.reply
    blocks = [
        Block(BlockKind.SYSTEM, system_tokens, plan.system, 1, system_text if debug else ""),
        Block(
            BlockKind.SUMMARY,
            summary_tokens,
            plan.summary,
            1 if summary_view else 0,
            summary_view.text if debug and summary_view else "",
        ),
        Block(
            BlockKind.RECENT,
            recent_tokens,
            plan.recent,
            len(recent),
            "\n\n".join(_render(m) for m in recent) if debug else "",
        ),
        Block(
            BlockKind.OBSERVATIONS,
            observation_tokens,
            observation_budget,
            len(observations),
            "\n\n".join(_render(m) for m in observations) if debug else "",
        ),
    ]
    summarized = first_kept if summary_view is not None else 0
    view = ContextView(
        messages=tuple(messages),
        blocks=tuple(blocks),
        total_tokens=sum(m.token_count for m in messages),
        budget_tokens=plan.total,
        summarized_messages=summarized,
        dropped_messages=first_kept - summarized,
        compacted=compacted,
    )
    if debug:
        view = replace(view, debug_text=_debug_text(view, plan, summary_view))
    return view


def _render(m: Message) -> str:
    label = m.role.value
    if m.role is Role.TOOL:
        label = f"tool {m.name} {m.tool_call_id}"
    head = f"[{label} #{m.index}] ({m.token_count} tokens)"
    body = m.content
    for call in m.tool_calls:
        body += f"\ntool_call {call.id}: {call.name}({call.arguments_json})"
    return f"{head}\n{body}".rstrip()


def _debug_text(view: ContextView, plan: BlockBudgets, summary: SummaryView | None) -> str:
    blocks = {b.kind: b for b in view.blocks}
    lines = []
    system, summary_block = blocks[BlockKind.SYSTEM], blocks[BlockKind.SUMMARY]
    lines.append(f"### SYSTEM block: {system.tokens}/{system.budget_tokens} tokens")
    lines.append(f"[system] ({view.messages[0].token_count} tokens)\n{view.messages[0].content}")
    position = 1
    if summary is not None:
        lines.append(
            f"### SUMMARY block: {summary_block.tokens}/{summary_block.budget_tokens} tokens, "
            f"covers messages 0-{summary.covered - 1}, {summary.omitted} lines only in the full summary"
        )
        lines.append(f"[system] ({summary.tokens} tokens)\n{summary.text}")
        position = 2
    recent, observations = blocks[BlockKind.RECENT], blocks[BlockKind.OBSERVATIONS]
    lines.append(
        f"### RECENT {recent.tokens}/{recent.budget_tokens} tokens ({recent.message_count} messages) + "
        f"OBSERVATIONS {observations.tokens}/{observations.budget_tokens} tokens "
        f"({observations.message_count} messages), in log order"
    )
    lines += [_render(m) for m in view.messages[position:]]
    lines.append(
        f"### total {view.total_tokens}/{view.budget_tokens} tokens ({plan.reply} held back for the reply); "
        f"{view.summarized_messages} messages summarised, {view.dropped_messages} dropped"
        + (", compacted during this build" if view.compacted else "")
    )
    return "\n\n".join(lines)
