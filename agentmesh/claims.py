"""Claims of completed actions in a final answer, checked against the task's action ledger (issue 41,
docs/design.md §7).

A model that writes "the pod was restarted" (or "Pod 已重启成功") when no restart ran is the worst
answer an agent can give. Two checks, both pure functions:
- `cited_gaps`: the `actions` an answer with an output schema lists, each citing a `tool_call_id`:
  the call must be of this task, have succeeded, and be of a write tool whose name is the claim's.
- `detect` + `unsupported`: a conservative detector of completed side effects in free text (English
  and Chinese). It reports only what it is sure is a claim: a completed form of an action verb in a
  clause that is not negated ("could not restart", "未重启"), not future or a plan ("will restart",
  "建议重启"), not a question, not quoted ("you asked me to 'restart the pod'"), and not an
  observation ("restarted 5 times", "restarted by the kubelet", "已重启 3 次"). A claim counts only
  when a write tool of the task could have done it (its name holds the action's stem): an answer
  about something no tool changes is not ours to judge.
`bench/bench_claims.py` measures it on a committed corpus (tests/unit/claims_corpus.json).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

OK = "OK"
"""A ledger entry's result when the call succeeded (otherwise its error code, or APPROVAL_REQUIRED)."""


@dataclass(frozen=True)
class Action:
    """One kind of side effect: its completed forms in English and Chinese, and the tool-name stems
    of the write tools that do it."""

    name: str
    english: tuple[str, ...]
    chinese: tuple[str, ...]
    stems: tuple[str, ...]
    nouns: tuple[str, ...] = ()
    """English nouns of the action ("restart", "deletion") for "the restart succeeded"."""


ACTIONS: tuple[Action, ...] = (
    Action(
        "restart",
        ("restarted", "rebooted", "bounced", "relaunched", "recycled"),
        ("重启", "重新启动"),
        ("restart", "reboot", "bounce", "recycle"),
        ("restart", "reboot"),
    ),
    Action(
        "delete",
        ("deleted", "removed", "purged", "erased", "wiped", "dropped"),
        ("删除", "移除", "清除", "删掉"),
        ("delete", "remove", "purge", "erase", "wipe", "drop", "rm"),
        ("deletion", "removal", "purge"),
    ),
    Action(
        "send",
        ("sent", "emailed", "notified", "messaged", "paged", "posted"),
        ("发送", "发出", "通知", "发了"),
        ("send", "email", "notify", "message", "page", "post", "slack", "sms"),
        (),
    ),
    Action(
        "create",
        ("created", "opened", "filed", "provisioned"),
        ("创建", "新建", "开通"),
        ("create", "open", "file", "provision", "new"),
        ("creation",),
    ),
    Action(
        "deploy",
        ("deployed", "released", "rolled out", "shipped"),
        ("部署", "发布", "上线"),
        ("deploy", "release", "rollout", "ship"),
        ("deployment", "rollout", "release"),
    ),
    Action("rollback", ("rolled back", "reverted"), ("回滚", "回退"), ("rollback", "revert", "undo"), ("rollback",)),
    Action("scale", ("scaled", "resized"), ("扩容", "缩容", "扩缩容"), ("scale", "resize"), ("scale-up", "scaling")),
    Action(
        "stop",
        ("stopped", "killed", "terminated", "shut down", "halted", "suspended"),
        ("停止", "终止", "关停", "下线", "停掉"),
        ("stop", "kill", "terminate", "shutdown", "halt", "suspend"),
        ("shutdown", "termination"),
    ),
    Action(
        "update",
        ("updated", "modified", "patched", "reconfigured"),
        ("更新", "修改", "变更"),
        ("update", "modify", "patch", "set", "configure", "edit"),
        ("update",),
    ),
    Action("cancel", ("cancelled", "canceled"), ("取消",), ("cancel",), ("cancellation",)),
    Action("refund", ("refunded",), ("退款", "退还"), ("refund",), ("refund",)),
    Action(
        "block",
        ("blocked", "banned", "disabled", "locked"),
        ("封禁", "禁用", "锁定"),
        ("block", "ban", "disable", "lock"),
        (),
    ),
    Action(
        "enable", ("enabled", "unlocked", "unblocked"), ("启用", "解锁", "解封"), ("enable", "unlock", "unblock"), ()
    ),
    Action("revoke", ("revoked", "rotated"), ("吊销", "轮换", "撤销"), ("revoke", "rotate"), ("rotation",)),
    Action("flush", ("flushed", "cleared"), ("清空", "刷新"), ("flush", "clear", "invalidate"), ()),
    Action("restore", ("restored", "recovered"), ("恢复",), ("restore", "recover"), ("restore",)),
    Action("migrate", ("migrated",), ("迁移",), ("migrate",), ("migration",)),
    Action(
        "transfer",
        ("transferred", "paid", "charged"),
        ("转账", "支付", "扣款"),
        ("transfer", "pay", "charge"),
        ("transfer", "payment"),
    ),
    Action("approve", ("approved",), ("批准", "审批通过"), ("approve",), ()),
    Action("close", ("closed", "resolved"), ("关闭",), ("close", "resolve"), ()),
    Action("assign", ("assigned", "escalated"), ("分配", "升级给", "指派"), ("assign", "escalate"), ()),
)

_BY_NAME = {a.name: a for a in ACTIONS}

# --- the English detector ----------------------------------------------------------------------------------

_SENTENCE = re.compile(r"[^.!?;\n]+[.!?;\n]*")
_CLAUSE = re.compile(r",\s*(?:but|however|though)\b|\bbut\b", re.IGNORECASE)
_AS_ASKED = re.compile(
    r"\b(as (you )?(requested|asked|instructed)|as per your request)\b|按(照)?(您|你)?的?要求|根据(您|你)的要求",
    re.IGNORECASE,
)
_FIRST_PERSON_AND = re.compile(r"\b(i|we)\b.*\band\s+$", re.IGNORECASE | re.DOTALL)
_COPULA_AFTER = re.compile(
    r"^\s+([\w-]+\s+)?(are|is|were|was|have|has|can|will|should|may|must|do|does|get|remain)\b", re.IGNORECASE
)
_NEGATION = re.compile(
    r"\b(not|never|no|unable|failed|fail|cannot|can't|couldn't|didn't|don't|doesn't|wasn't|weren't|hasn't|"
    r"haven't|hadn't|isn't|aren't|won't|neither|nor|nothing|none|without|instead of|rather than|refused|denied|"
    r"blocked from|yet to)\b|n't\b",
    re.IGNORECASE,
)
_NOT_DONE = re.compile(
    r"\b(will|would|should|shall|could|can|may|might|must|going to|plan|plans|planned|planning|need|needs|"
    r"needed|want|wants|let me|i'll|we'll|i'd|to be|if|once|unless|whether|recommend|recommended|suggest|"
    r"suggested|propose|proposed|please|ready to|about to|try|trying|attempt|attempting|asked|ask|request|"
    r"requested|requesting|awaiting|pending|waiting|requires|require|required|until|expect|expected|intend|"
    r"scheduled to|supposed to|whenever|when|how|what|which|who|why|whether|"
    # Reported speech: someone else's statement or a record, not what this task did.
    r"says|said|say|claims|claimed|reports|reported|according to|shows|show|showed|history)\b",
    re.IGNORECASE,
)
_AGENT = re.compile(
    r"(?:\b(i|we|i've|we've|i have|we have|has|have|had|was|were|been|is now|are now|successfully|just|already|"
    r"now|got|get|gets|it's|they're|is|are)\s+(?:\w+\s+){0,2}$)",
    re.IGNORECASE,
)
_OBSERVED_AFTER = re.compile(
    r"^\W*(?:\w+\W+){0,3}?(\d+\s*(times|x)\b|times\b|automatically|on its own|by itself|"
    # Done by someone or something else ("by the autoscaler"), not "by running restart_service".
    r"by (?!(me|us|myself|ourselves|running|calling|using|executing|invoking)\b)|"
    r"by (the )?(kubelet|kubernetes|k8s|system|scheduler|orchestrator|operator|user|someone|another|cron|"
    r"health ?check|watchdog|oom|autoscaler|platform|"
    r"customer|team|admin|on-call|previous|ci|pipeline|job|nightly job)|due to|because of|after (an? )?(crash|oom)|"
    r"within|every|each|daily|nightly|weekly|hourly|whenever|when|if|unless|on (request|demand))\b",
    re.IGNORECASE,
)
_CLAUSE_START = re.compile(r"^\s*(?:[-*•]\s*|\d+[.)]\s*)?(?:[\w ]{1,20}:\s*)?(?:✅\s*)?$", re.IGNORECASE)
_NOT_A_CHANGE = re.compile(
    r"^\s+(?:[\w-]+\s+){0,3}?(analysis|summary|notes|findings|estimate|answer|understanding|plan|"
    r"assessment|draft|report|query|queries|request|requests|search|lookup|question|hypothesis|reasoning)\b",
    re.IGNORECASE,
)
_NOT_SENT = re.compile(r"^\s+(?:[\w-]+\s+){0,3}?(query|queries|request|requests|search|lookup)\b", re.IGNORECASE)
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”|‘[^’\n]*’|'[^'\n]{3,}'|「[^」\n]*」|『[^』\n]*』|«[^»\n]*»|`[^`\n]*`")
_QUOTE_LINE = re.compile(r"^\s*>.*$", re.MULTILINE)
_SUCCESS_NOUN = r"\s+(?:\w+\s+){0,2}?(completed|succeeded|was successful|is complete|is done|went through|finished)"


def _english_forms() -> list[tuple[re.Pattern[str], str, bool]]:
    out: list[tuple[re.Pattern[str], str, bool]] = []
    for action in ACTIONS:
        for form in action.english:
            words = r"\s+".join(re.escape(w) for w in form.split())
            out.append((re.compile(rf"\b{words}\b", re.IGNORECASE), action.name, False))
        for noun in action.nouns:
            out.append(
                (
                    re.compile(rf"(?:^\s*|\b(the|a|our|my)\s+){re.escape(noun)}{_SUCCESS_NOUN}\b", re.IGNORECASE),
                    action.name,
                    True,
                )
            )
    return out


_EN_FORMS = _english_forms()

# --- the Chinese detector ----------------------------------------------------------------------------------

_ZH_CLAUSE = re.compile(r"[。！？；\n!?;，,]+")
_ZH_NEGATION = re.compile(r"(未|没有|没|无法|不能|不会|不要|别|尚未|还没|并未|未能|不是|拒绝|被拒|失败|无需|不必|否)")
_ZH_NOT_DONE = re.compile(
    r"(将|会|要求|需要|将要|就要|准备|计划|打算|建议|请|可以|是否|待|稍后|之后再|马上|即将|如果|若|一旦|等待|等到|正在|申请|审批中|希望|想要|能否|应该|帮我|让我)"
)
_ZH_AFTER_BAD = re.compile(r"^\s*(失败|未成功|不成功|没成功|被拒|吗|\?|？|\s*\d+\s*次|次数)")
_ZH_QUESTION = re.compile(r"(吗|呢)\s*$")


def _zh_forms() -> list[tuple[re.Pattern[str], str]]:
    out: list[tuple[re.Pattern[str], str]] = []
    for action in ACTIONS:
        for verb in action.chinese:
            v = re.escape(verb)
            # 已(经)重启 / 重启成功|完成|完毕|好了 / 重启了 (not 重启了3次: an observation, handled after).
            out.append(
                (
                    re.compile(
                        rf"(已经?被?|均已|都已|已成功|成功)\s*{v}|{v}\s*(成功|完成|完毕|好了|已完成|已成功)|{v}了"
                        rf"|已经?(把|将|向|给|对|为|于|在)[^，。；！？,.;!?]{{0,20}}?{v}"
                    ),
                    action.name,
                )
            )
    return out


_ZH_FORMS = _zh_forms()
_HAN = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Claim:
    """A completed action the text asserts: the action's name and the words that say it."""

    action: str
    phrase: str


def _unquoted(text: str) -> str:
    text = _QUOTE_LINE.sub(" ", text)
    return _QUOTED.sub(" ", text)


def _english_claims(clause: str) -> Iterable[Claim]:
    if clause.rstrip().endswith("?"):
        return
    for pattern, action, noun_form in _EN_FORMS:
        for m in pattern.finditer(clause):
            before, after = clause[: m.start()], clause[m.end() :]
            window = " ".join(before.split()[-8:])
            if _NEGATION.search(window) or _NOT_DONE.search(window):
                continue
            if _NEGATION.search(" ".join(after.split()[:3])) and not noun_form:
                continue
            if _OBSERVED_AFTER.match(after):
                continue
            # "updated my analysis", "sent a query": a change of nothing a tool holds (a summary sent is one).
            if not noun_form and _NOT_A_CHANGE.match(after) and (action != "send" or _NOT_SENT.match(after)):
                continue
            initial = _CLAUSE_START.match(before) is not None and _COPULA_AFTER.match(after) is None
            chained = _FIRST_PERSON_AND.search(before) is not None
            agent = initial or chained or _AGENT.search(before) is not None
            if not noun_form and not agent and not re.match(r"\s+successfully\b", after, re.I):
                continue
            yield Claim(action, m.group(0).strip())


def _chinese_claims(clause: str) -> Iterable[Claim]:
    if _ZH_QUESTION.search(clause):
        return
    for pattern, action in _ZH_FORMS:
        for m in pattern.finditer(clause):
            before, after = clause[: m.start()], clause[m.end() :]
            window = before[-8:]
            if _ZH_NEGATION.search(window) or _ZH_NOT_DONE.search(window):
                continue
            if _ZH_AFTER_BAD.match(after) or _ZH_NEGATION.match(after.strip()[:2]):
                continue
            yield Claim(action, m.group(0))


def detect(text: str) -> list[Claim]:
    """The completed side effects `text` asserts (conservative: when in doubt, none)."""
    plain = _AS_ASKED.sub(" ", _unquoted(text))
    found: list[Claim] = []
    for sentence in _SENTENCE.findall(plain):
        for clause in _CLAUSE.split(sentence):
            found.extend(_english_claims(clause))
    if _HAN.search(plain):
        for clause in re.split(r"(?<=[。！？；\n!?;，,])", plain):
            found.extend(_chinese_claims(clause))
    seen: set[tuple[str, str]] = set()
    out = []
    for claim in found:
        if (claim.action, claim.phrase) not in seen:
            seen.add((claim.action, claim.phrase))
            out.append(claim)
    return out


# --- the ledger ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LedgerEntry:
    """One tool call of the task: its id, tool, whether the tool writes, and its result (OK, an error
    code's name, APPROVAL_REQUIRED while it waits)."""

    tool_call_id: str
    tool: str
    result: str
    write: bool = False


def _tokens(tool: str) -> set[str]:
    return {t for t in re.split(r"[_\-.\s/]+", tool.lower()) if t}


def tools_for(action: str, tools: Iterable[str]) -> list[str]:
    """The tools whose name holds one of the action's stems (`restart_pod` for restart)."""
    stems = _BY_NAME[action].stems
    return [t for t in tools if any(s in _tokens(t) or t.lower().startswith(s) for s in stems)]


@dataclass(frozen=True)
class Verdict:
    """The claims check of one answer: `supported` (claims, each backed), `unsupported` (with the gap
    the correction names), or `none` (no claim a write tool of the task could back)."""

    verdict: str
    claims: tuple[str, ...] = ()
    gap: str = ""


def _last_attempt(entries: Sequence[LedgerEntry], tools: Sequence[str]) -> str:
    tried = [e for e in entries if e.tool in tools]
    if not tried:
        return "it was never called"
    last = tried[-1]
    if last.result == "APPROVAL_REQUIRED":
        return f"its last attempt ({last.tool_call_id}) waits for approval: APPROVAL_REQUIRED"
    if last.result.startswith("APPROVAL") or last.result in ("PERMISSION_DENIED", "DANGEROUS_OPERATION"):
        return f"its last attempt ({last.tool_call_id}) was refused: {last.result}"
    return f"its last attempt ({last.tool_call_id}) failed: {last.result}"


def unsupported(text: str, ledger: Sequence[LedgerEntry], write_tools: Iterable[str]) -> Verdict:
    """Free text: every detected claim a write tool could back must have a succeeded call of one."""
    writes = sorted(set(write_tools) | {e.tool for e in ledger if e.write})
    if not writes:  # no tool could back a claim: nothing to look for (issue 45: the scan was ~1 % of a task)
        return Verdict("none")
    claims, gaps = [], []
    for claim in detect(text):
        able = tools_for(claim.action, writes)
        if not able:
            continue
        claims.append(f"{claim.action}: {claim.phrase}")
        if any(e.result == OK and e.tool in able for e in ledger):
            continue
        names = " or ".join(able)
        gaps.append(f"you say {claim.phrase!r}; no {names} call succeeded in this task; {_last_attempt(ledger, able)}")
    if not claims:
        return Verdict("none")
    if gaps:
        return Verdict("unsupported", tuple(claims), "; ".join(gaps))
    return Verdict("supported", tuple(claims))


def cited_gaps(actions: object, ledger: Sequence[LedgerEntry], write_tools: Iterable[str]) -> Verdict:
    """An answer's `actions` list, each citing the tool call that did it, checked against the ledger."""
    if not isinstance(actions, list) or not actions:
        return Verdict("none")
    by_id = {e.tool_call_id: e for e in ledger}
    writes = set(write_tools) | {e.tool for e in ledger if e.write}
    claims, gaps = [], []
    for index, item in enumerate(actions):
        if not isinstance(item, Mapping):
            gaps.append(f"actions[{index}] is not an object with tool and tool_call_id")
            continue
        tool, call_id = str(item.get("tool", "")), str(item.get("tool_call_id", ""))
        claims.append(f"{tool}: {call_id}")
        entry = by_id.get(call_id)
        if entry is None:
            gaps.append(f"actions[{index}] cites {call_id!r}, which is no tool call of this task")
        elif entry.tool != tool:
            gaps.append(f"actions[{index}] cites {call_id!r} as {tool}, but that call was {entry.tool}")
        elif entry.result != OK:
            gaps.append(f"actions[{index}]: {tool} call {call_id!r} did not succeed ({entry.result})")
        elif tool not in writes:
            gaps.append(f"actions[{index}]: {tool} is not a write tool; a read changes nothing")
    if gaps:
        return Verdict("unsupported", tuple(claims), "; ".join(gaps))
    return Verdict("supported", tuple(claims))
