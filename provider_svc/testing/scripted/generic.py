"""`GenericPolicy`: the built-in policy a scripted model runs when configured with no other.

It works out of the box on any tool set: it picks the tool whose name and description best match
the goal, fills its arguments (`filling`), fixes CONTRACT errors (`fixing`), takes an ENGINEERING
error's fallback_tool, then answers the goal with the findings. Scenarios fall back to it too.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence

from provider_svc.models.base import Role, ToolCall, ToolDef
from provider_svc.testing.scripted.filling import _from_goal, synthesize_arguments
from provider_svc.testing.scripted.fixing import _texts, fix_last_call
from provider_svc.testing.scripted.jsonio import _dump
from provider_svc.testing.scripted.policy import ScriptedReply, ScriptedRequest, ScriptedToolCall, tool_error_of

_WORD = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]")


_STOPWORDS = frozenset(
    [
        "the",
        "and",
        "for",
        "use",
        "when",
        "with",
        "this",
        "that",
        "are",
        "was",
        "you",
        "your",
        "please",
        "what",
        "where",
        "how",
        "its",
        "from",
        "into",
        "about",
        "can",
        "could",
        "would",
        "should",
        "will",
        "any",
        "all",
        "get",
        "set",
        "our",
        "out",
        "has",
        "have",
        "had",
        "not",
        "but",
        "who",
        "why",
        "which",
        "there",
    ]
)


def _stem(word: str) -> str:
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 3 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _words(text: str) -> set[str]:
    lowered = text.lower()
    tokens = {_stem(t) for t in _WORD.findall(lowered) if t not in _STOPWORDS}
    # Chinese text as character bigrams, like tool discovery does.
    han = [c for c in lowered if "\u4e00" <= c <= "\u9fff"]
    tokens.update(a + b for a, b in itertools.pairwise(han))
    return {t for t in tokens if len(t) > 2 or not t.isascii()}


def _stated_inputs(tool: ToolDef, texts: Sequence[str]) -> int:
    """How many of `tool`'s required properties `texts` state a value for."""
    props = tool.input_schema.get("properties") or {}
    count = 0
    for name in tool.input_schema.get("required") or ():
        sub = props.get(name) if isinstance(props, Mapping) else None
        if isinstance(sub, Mapping):
            kind = sub.get("type")
            kind = next((k for k in kind if k != "null"), "string") if isinstance(kind, list) else kind
            count += _from_goal(str(name), sub, kind, texts) is not None
    return count


class GenericPolicy:
    """Works out of the box: call the most relevant tool(s) with arguments it can fill, fix CONTRACT
    errors with their hints, take an ENGINEERING error's fallback_tool, then answer the goal.

    `max_tool_steps`: successful tool results after which it answers.
    """

    def __init__(self, max_tool_steps: int = 1, answer_prefix: str = "Answer") -> None:
        self.max_tool_steps = max_tool_steps
        self.answer_prefix = answer_prefix

    def __call__(self, req: ScriptedRequest) -> ScriptedReply:
        reply = self._reply(req)
        schema = req.request.response_schema
        if schema is not None and not reply.tool_calls and schema.get("type", "object") == "object":
            # Structured output (response_format json_schema / json_object): an object the schema accepts,
            # filled from the conversation like tool arguments are.
            value = synthesize_arguments(ToolDef("response", "", schema), _texts(req))
            return ScriptedReply(text=_dump(value))
        return reply

    def _reply(self, req: ScriptedRequest) -> ScriptedReply:
        choice = req.request.tool_choice
        err = req.last_error
        if err is not None and not (choice is not None and choice.mode == "none"):
            if err.is_contract and req.failed_call is not None:
                return fix_last_call(req)
            if err.is_engineering and err.fallback_tool and err.fallback_tool not in req.called_tools[-1:]:
                tool = req.tool(err.fallback_tool)
                args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
                return ScriptedReply(tool_calls=(ScriptedToolCall(err.fallback_tool, _dump(args)),))
            return ScriptedReply(text=f"I could not complete the task: {err.code}: {err.message}".strip())
        if (choice is not None and choice.mode == "none") or not req.tools:
            return ScriptedReply(text=self._answer(req))
        if choice is not None and choice.mode == "tool":
            tool = req.tool(choice.tool_name)
            args = synthesize_arguments(tool, _texts(req)) if tool is not None else {}
            return ScriptedReply(tool_calls=(ScriptedToolCall(choice.tool_name, _dump(args)),))
        done = req.succeeded_tools
        if len(done) < self.max_tool_steps or (choice is not None and choice.mode == "required"):
            tool = self._pick(req, exclude=set(done))
            if tool is not None:
                return ScriptedReply(
                    tool_calls=(ScriptedToolCall(tool.name, _dump(synthesize_arguments(tool, _texts(req)))),)
                )
        return ScriptedReply(text=self._answer(req))

    def _pick(self, req: ScriptedRequest, exclude: set[str]) -> ToolDef | None:
        goal = _words(req.goal)
        best: tuple[int, int, ToolDef] | None = None
        for tool in req.tools:
            if tool.name in exclude:
                continue
            score = len(goal & _words(f"{tool.name.replace('_', ' ')} {tool.description}"))
            # Between equally worded tools, the one whose inputs the goal states ("what is 17*23").
            stated = _stated_inputs(tool, [req.goal]) if best is None or score >= best[0] else 0
            if best is None or (score, stated) > best[:2]:
                best = (score, stated, tool)
        if best is None or (best[0] == 0 and req.succeeded_tools):
            return None
        return best[2]

    def _answer(self, req: ScriptedRequest) -> str:
        findings = [
            f"{(req.call_by_id(m.tool_call_id) or ToolCall('', m.name, '')).name}: {m.content[:300]}"
            for m in req.turn
            if m.role == Role.TOOL and tool_error_of(m) is None
        ]
        text = f"{self.answer_prefix}: {req.goal}".strip()
        if findings:
            text += "\nFindings:\n" + "\n".join(f"- {f}" for f in findings)
        return text
