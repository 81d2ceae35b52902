"""What a value is the value of: labels, negations, corrections, in English and Chinese (§4, issue 23).

A fact's label is read only from the words right before it in its own clause, and only when they
end in a known label noun ("order amount is", "退款上限为", "the deadline:"): a label is never guessed
from further away, so "the refund cap for an order amount of 300 USD is 200 USD" labels 300 USD the
order amount and leaves 200 USD unlabelled (entities.py then quotes its clause instead of inventing
a key). Chinese and English label words map to one canonical English key ("订单金额" and "order
amount" are both `order amount`), so a mixed session updates one fact, not two.

The markers decide what is current: a value right after "not", "instead of", "rather than", "不是",
"而不是", "并非" is rejected; a value after "from" / "从" is the one being replaced; "to" / "改为"
after it names the replacement; a clause that says "correction", "actually", "更正", "改为" corrects
what was said before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

__all__ = [
    "Segment",
    "canonical",
    "compatible",
    "is_change",
    "is_correction",
    "is_question",
    "label_before",
    "read_segment",
]

_EN_HEADS: Final = {
    "amount": "amount", "total": "total", "price": "price", "cost": "cost", "budget": "budget", "cap": "cap",
    "limit": "limit", "ceiling": "cap", "floor": "floor", "refund": "refund", "discount": "discount", "fee": "fee",
    "deadline": "deadline", "date": "date", "time": "time", "host": "host", "hostname": "host", "service": "service",
    "owner": "owner", "contact": "contact", "port": "port", "version": "version", "quota": "quota",
    "threshold": "threshold", "timeout": "timeout", "count": "count", "replicas": "replicas", "rate": "rate",
    "balance": "balance", "ticket": "ticket", "address": "address", "region": "region", "ratio": "ratio",
    "latency": "latency", "payment": "payment", "charge": "charge", "deposit": "deposit", "target": "target",
    "capacity": "capacity", "duration": "duration", "window": "window", "eta": "eta", "id": "id", "number": "number",
    "percentage": "percentage", "tax": "tax", "salary": "salary", "bonus": "bonus", "size": "size",
}  # fmt: skip
_EN_MODIFIERS: Final = {
    "order": "order", "refund": "refund", "payment": "payment", "shipping": "shipping", "late": "late",
    "service": "service", "monthly": "monthly", "daily": "daily", "weekly": "weekly", "annual": "annual",
    "yearly": "annual", "max": "max", "maximum": "max", "min": "min", "minimum": "min", "total": "total",
    "start": "start", "end": "end", "due": "due", "effective": "effective", "release": "release",
    "launch": "launch", "delivery": "delivery", "cutoff": "cutoff", "renewal": "renewal", "contract": "contract",
    "invoice": "invoice", "error": "error", "retry": "retry", "request": "request", "connection": "connection",
    "memory": "memory", "cpu": "cpu", "disk": "disk", "exchange": "exchange", "unit": "unit", "base": "base",
    "account": "account", "incident": "incident", "database": "database", "db": "database", "primary": "primary",
    "backup": "backup", "rollback": "rollback", "maintenance": "maintenance", "migration": "migration",
    "p99": "p99", "p95": "p95", "pod": "pod", "replica": "replica", "transfer": "transfer", "credit": "credit",
    "approval": "approval", "budget": "budget",
}  # fmt: skip
_CN_HEADS: Final = {
    "总金额": "total", "金额": "amount", "数额": "amount", "总额": "total", "总价": "total", "合计": "total",
    "价格": "price", "单价": "price", "售价": "price", "费用": "cost", "成本": "cost", "预算": "budget",
    "上限": "cap", "封顶": "cap", "限额": "limit", "额度": "limit", "下限": "floor", "退款": "refund",
    "折扣": "discount", "优惠": "discount", "手续费": "fee", "运费": "shipping fee", "截止日期": "deadline",
    "截止时间": "deadline", "期限": "deadline", "日期": "date", "时间": "time", "开始日期": "start date",
    "起始日期": "start date", "结束日期": "end date", "生效日期": "effective date", "生效时间": "effective date",
    "到期日": "due date", "到期时间": "due date", "主机名": "host", "主机": "host", "服务名": "service",
    "服务": "service", "负责人": "owner", "联系人": "contact", "端口": "port", "版本号": "version", "版本": "version",
    "配额": "quota", "阈值": "threshold", "超时时间": "timeout", "超时": "timeout", "数量": "count",
    "副本数": "replicas", "税率": "tax rate", "余额": "balance", "工单号": "ticket", "工单": "ticket",
    "订单号": "order id", "地址": "address", "区域": "region", "比例": "ratio", "汇率": "exchange rate",
    "延迟": "latency", "错误率": "error rate", "费率": "rate", "押金": "deposit", "付款": "payment",
    "容量": "capacity", "时长": "duration", "窗口": "window", "目标": "target",
}  # fmt: skip
_CN_MODIFIERS: Final = {
    "订单": "order", "退款": "refund", "付款": "payment", "支付": "payment", "每月": "monthly", "月度": "monthly",
    "每日": "daily", "最高": "max", "最大": "max", "最低": "min", "最小": "min", "开始": "start", "结束": "end",
    "维护": "maintenance", "发布": "release", "上线": "launch", "交付": "delivery", "迁移": "migration",
    "回滚": "rollback", "数据库": "database", "主库": "primary", "备份": "backup", "内存": "memory",
    "合同": "contract", "发票": "invoice", "账户": "account", "事故": "incident", "转账": "transfer",
    "审批": "approval", "服务": "service", "重试": "retry", "请求": "request", "连接": "connection",
}  # fmt: skip

_MONEY = frozenset({"amount", "number"})
_NUMERIC = frozenset({"number", "percent", "id", "amount", "time"})
# Which kinds of value a label noun can take: "at the same time 5 pods" does not make 5 a time.
_KINDS_BY_HEAD: Final = {
    **dict.fromkeys(("amount", "total", "price", "cost", "budget", "cap", "limit", "floor", "refund", "fee",
                     "payment", "charge", "deposit", "balance", "salary", "bonus", "tax"), _MONEY),
    "discount": frozenset({"discount", "percent"}),
    **dict.fromkeys(("deadline", "date", "eta", "time"), frozenset({"date", "datetime", "time"})),
    "host": frozenset({"name", "id", "ip", "service"}),
    "service": frozenset({"service", "name", "id"}),
    "address": frozenset({"ip", "url", "name", "id"}),
    "region": frozenset({"id", "name"}),
    **dict.fromkeys(("owner", "contact"), frozenset({"person"})),
    **dict.fromkeys(("port", "count", "replicas", "quota", "threshold", "capacity", "size", "number", "duration",
                     "timeout", "latency", "window", "target"), _NUMERIC),
    **dict.fromkeys(("rate", "ratio", "percentage"), frozenset({"percent", "number", "discount"})),
    **dict.fromkeys(("version", "id", "ticket"), frozenset({"id", "number"})),
}  # fmt: skip

_EN_FILLER = (
    r"(?:is|was|are|were|will\s+be|would\s+be|should\s+be|must\s+be|has\s+been|had\s+been|be|becomes?|became|"
    r"=|:|of|to|at|now|still|about|around|approximately|roughly|exactly|only|just|set\s+to|changed\s+to|"
    r"updated\s+to|capped\s+at|fixed\s+at|equals?|stays?|remains?|is\s+now|confirmed\s+as|actually|really)"
)
_CN_FILLER = (
    r"(?:是|为|：|:|=|改为|改成|调整为|设为|设置为|定为|变为|变成|应该是|应为|应是|约|大约|大概|现在是|仍是|仍然是|"
    r"确认为|就是|在)"
)
_TAIL_FILLER = re.compile(rf"(?:\s*(?:(?<![A-Za-z]){_EN_FILLER}(?![A-Za-z])|{_CN_FILLER}))*\s*$", re.IGNORECASE)
_TAIL_CHARS = 64
"""A label and its markers are read from this many characters before a value at most."""
_JOIN_CHARS = 24
_EN_LAST_TWO = re.compile(r"(?:([A-Za-z][A-Za-z0-9]*)\s+)?([A-Za-z][A-Za-z0-9]*)\s*$")
_CN_HEAD_RE = re.compile("(?:" + "|".join(sorted(_CN_HEADS, key=len, reverse=True)) + ")$")
_CN_MOD_RE = re.compile("(?:" + "|".join(sorted(_CN_MODIFIERS, key=len, reverse=True)) + ")的?$")

_NEG = (
    r"(?:\bnot\b|n't\b|\bnever\b|\bno\s+longer\b|\brather\s+than\b|\binstead\s+of\b|\bother\s+than\b|"
    r"\bnor\b|而不是|不是|并非|而非|不再是|不要|不应该是|不应是|别用|不用)"
)
# A rejecting marker at the end of the words before a value (a label noun or two may sit between:
# "not the order amount 500 USD" is still "not").
_NEG_TAIL = re.compile(rf"{_NEG}(?:\s*(?:the|a|an|原来的|之前的|那个))?\s*(?:[A-Za-z]+\s*){{0,2}}$", re.IGNORECASE)
_FROM_TAIL = re.compile(r"(?:\bfrom\b|从|由)\s*(?:the\s+old\s+|the\s+previous\s+|原来的|之前的|原先的)?\s*$", re.I)
_TO_HEAD = re.compile(r"^\s*[,，]?\s*(?:to|into|->|→|=>|改为|改成|调整为|变为|变成|换成|降到|升到|到|为)\s*$", re.I)
_BUT_HEAD = re.compile(
    r"^\s*[,，;；]?\s*(?:but|but\s+rather|rather|而是|是|it'?s|it\s+is|but\s+it'?s|but\s+is|use|用)\s*$", re.I
)
_OR_HEAD = re.compile(r"^\s*[,，]?\s*(?:or|or\s+maybe|还是|或者|或是|或)\s*$", re.I)
_CORRECTION = re.compile(
    r"\bcorrection\b|\bcorrect(?:ed|ing)?\s+(?:that|this|it|myself)\b|\bactually\b|\bI\s+meant\b|\bsorry\b|"
    r"\bscratch\s+that\b|\bchanged?\s+(?:it\s+)?to\b|\bupdated?\s+(?:it\s+)?to\b|\brevised\b|\bmake\s+it\b|"
    r"更正|纠正|修正|改为|改成|更改为|调整为|不对|说错|应该是|应为|改一下",
    re.IGNORECASE,
)
# "from X" replaces X only when the clause says something changed ("change the discount from 8折 to
# 85折", "从8折改为85折"); "went from", "came from", "Alice from billing-svc" correct nothing (issue 37).
_CHANGE = re.compile(
    r"\b(?:chang(?:e|es|ed|ing)|updat(?:e|es|ed|ing)|correct(?:s|ed|ing)?|correction|fix(?:es|ed)?|"
    r"adjust(?:s|ed)?|revis(?:e|es|ed)|amend(?:s|ed)?|modif(?:y|ies|ied)|switch(?:es|ed)?|lower(?:s|ed)?|"
    r"rais(?:e|es|ed)|reduc(?:e|es|ed)|increas(?:e|es|ed)|decreas(?:e|es|ed)|mov(?:e|es|ed)|bump(?:s|ed)?|"
    r"cut|set)\b|改|调整|更正|纠正|修正|修改|变更|调到|降到|升到|降为|升为",
    re.IGNORECASE,
)
# "refund amount" is the refund: a head noun that is itself a money value, followed by "amount",
# is one key, not two (issue 37).
_SAME_AS_HEAD = frozenset({"amount", "total", "value", "sum"})
_QUESTION = re.compile(r"[?？]\s*$|[吗呢么]\s*[。.!！]?\s*$|^\s*(?:是否|能否|能不能|请问)")


@dataclass(frozen=True, slots=True)
class Segment:
    """What the words between the previous value (or the clause start) and a value say about it."""

    label: str
    """The canonical key of a label right before the value ("" when there is none)."""
    negated: bool = False
    """Rejected: "not X", "instead of X", "不是X"."""
    replaced: bool = False
    """The value being replaced: "from X", "从X"."""
    joins: str = ""
    """How it joins the value before it: "to" (from X to Y), "but" (not X but Y), "neg" (Y, not X:
    the rejected one shares the label of the value before), "or" (X or Y: neither is certain)."""


def canonical(modifier: str, head: str) -> str:
    """The key of a modifier and a head noun: "refund amount" is "refund", "order amount" stays."""
    if head in _SAME_AS_HEAD and _KINDS_BY_HEAD.get(modifier) == _MONEY:
        return modifier
    return f"{modifier} {head}" if modifier != head else head


def _en_label(text: str) -> str:
    words = _EN_LAST_TWO.search(text)
    if words is None:
        return ""
    head = _EN_HEADS.get(words.group(2).lower())
    if head is None:
        return ""
    before = text[: words.start(2)]
    # "order amount", "refund cap": one known modifier right before the head noun.
    modifier = re.search(r"([A-Za-z][A-Za-z0-9]*)(?:'s)?\s+$", before)
    mod = _EN_MODIFIERS.get(modifier.group(1).lower()) if modifier else None
    return canonical(mod, head) if mod else head


def _cn_label(text: str) -> str:
    head = _CN_HEAD_RE.search(text)
    if head is None:
        return ""
    key = _CN_HEADS[head.group()]
    modifier = _CN_MOD_RE.search(text[: head.start()])
    if modifier is not None and " " not in key:
        mod = _CN_MODIFIERS[modifier.group().rstrip("的")]
        return canonical(mod, key)
    return key


def label_before(text: str) -> str:
    """The canonical key of the label the words `text` end with (after copulas and fillers), or ""."""
    text = text[-_TAIL_CHARS:]
    body = text[: _TAIL_FILLER.search(text).start()]  # type: ignore[union-attr]  # matches at least ""
    body = body.rstrip(" \t'\"“”‘’「」")
    if not body:
        return ""
    if "\u4e00" <= body[-1] <= "\u9fff":
        return _cn_label(body)
    return _en_label(body)


def read_segment(text: str) -> Segment:
    """What `text` (the words right before a value, from the previous value on) says about it."""
    if len(text) <= _JOIN_CHARS:
        if _OR_HEAD.match(text):
            return Segment("", joins="or")
        if _TO_HEAD.match(text):
            return Segment("", joins="to")
        if _BUT_HEAD.match(text):
            return Segment("", joins="but")
    # Markers and labels sit right before the value: only the tail is read (and the tail-anchored
    # patterns stay linear on a long run of prose).
    cut = max(0, len(text) - _TAIL_CHARS)
    tail = text[cut:]
    negation = _NEG_TAIL.search(tail)
    if negation is not None:
        label = label_before(tail[: negation.start()])
        lead = text[: cut + negation.start()].strip(" ,，;；")
        # "300 USD, not 500 USD": nothing but the marker since the last value.
        return Segment(label, negated=True, joins="" if label or lead else "neg")
    replaced = _FROM_TAIL.search(tail)
    if replaced is not None:
        return Segment(label_before(tail[: replaced.start()]), replaced=True)
    return Segment(label_before(tail))


def compatible(key: str, kind: str) -> bool:
    """Whether a value of `kind` can be the value of label `key` (by its head noun, the last word)."""
    return kind in _KINDS_BY_HEAD.get(key.rsplit(" ", 1)[-1], frozenset())


def is_correction(text: str) -> bool:
    """Whether `text` (a clause's opening, or the words before a value) corrects something said before."""
    return _CORRECTION.search(text[-_TAIL_CHARS:]) is not None


def is_change(clause: str) -> bool:
    """Whether a clause says a value changed (then its "from X" is the value replaced)."""
    return _CHANGE.search(clause) is not None


def is_question(clause: str) -> bool:
    """A question states nothing: its values are asked about, not known."""
    return _QUESTION.search(clause) is not None
