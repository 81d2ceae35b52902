"""Seeded long sessions (English, Chinese, mixed) that plant facts with a known truth (issue 23).

A session is ops chatter (user questions about pods and orders, tool calls with JSON and log
outputs, near-identical assistant narration) with planted statements about labelled facts:
plain statements, values rejected in the same sentence ("X, not Y", "不是Y", "而不是", "instead of"),
later corrections ("Correction: ...", "更正：...改为...", "from X to Y"), values in words ("three
thousand dollars", "八五折", "June first", "百分之五", "下午三点"), easily confused labels (order amount,
refund amount, refund cap), a sentence whose second value has no certain label, and unlabelled
numbers in words. `Truth` is what the generator planted, computed here and never by the code
under test: the current value of each planted key, the values rejected or replaced, the message
that said it last.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from tests.unit.context.ops_session import big_log

__all__ = ["Event", "GenSession", "Message", "Planted", "Slot", "generate"]

LANGS = ("en", "zh", "mixed")


@dataclass(frozen=True)
class Slot:
    key: str
    en: str
    zh: str
    kind: str


SLOTS = (
    Slot("order amount", "order amount", "订单金额", "money"),
    Slot("refund", "refund amount", "退款金额", "money"),
    Slot("refund cap", "refund cap", "退款上限", "money"),
    Slot("discount", "discount", "折扣", "discount"),
    Slot("deadline", "deadline", "截止日期", "date"),
    Slot("start time", "start time", "开始时间", "time"),
    Slot("primary host", "primary host", "主库主机", "host"),
    Slot("service", "service", "服务", "service"),
    Slot("owner", "owner", "负责人", "person"),
    Slot("error rate", "error rate", "错误率", "percent"),
    Slot("ticket", "ticket", "工单号", "ticket"),
)

_EN_SMALL = ["", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
             "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]  # fmt: skip
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_EN_ORD = {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh", 8: "eighth",
           9: "ninth", 10: "tenth", 11: "eleventh", 12: "twelfth", 15: "fifteenth", 20: "twentieth",
           21: "twenty-first", 22: "twenty-second", 23: "twenty-third", 25: "twenty-fifth"}  # fmt: skip
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]  # fmt: skip
_CN_DIGIT = "零一二三四五六七八九"
_PEOPLE = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy", "Mallory", "Niaj",
           "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor", "Walter", "Wendy"]  # fmt: skip
_SERVICES = [f"{a}-{b}" for a in ("payment", "checkout", "billing", "ledger", "notify", "search", "refund", "order")
             for b in ("svc", "api", "worker", "gateway", "proxy")]  # fmt: skip


def en_words(n: int) -> str:
    """English words for 1 <= n < 1,000,000 ("three thousand two hundred")."""
    parts = []
    if n >= 1000:
        parts.append(en_words(n // 1000) + " thousand")
        n %= 1000
    if n >= 100:
        parts.append(_EN_SMALL[n // 100] + " hundred")
        n %= 100
    if n >= 20:
        parts.append(_EN_TENS[n // 10] + (f"-{_EN_SMALL[n % 10]}" if n % 10 else ""))
    elif n:
        parts.append(_EN_SMALL[n])
    return " ".join(parts)


def cn_words(n: int) -> str:
    """Chinese numerals for 1 <= n < 100,000 (三千二百, 十五)."""
    units = [(10000, "万"), (1000, "千"), (100, "百"), (10, "十")]
    out, zero = "", False
    for unit, name in units:
        digit = n // unit
        n %= unit
        if digit:
            if zero:
                out += "零"
            out += ("" if unit == 10 and digit == 1 and not out else _CN_DIGIT[digit]) + name
            zero = False
        elif out:
            zero = True
    if n:
        out += ("零" if zero else "") + _CN_DIGIT[n]
    return out


@dataclass(frozen=True)
class Value:
    """A planted value: how it is written and what it means (`norm`, computed here)."""

    text: str
    norm: str


def _value(rng: random.Random, kind: str, lang: str, avoid: set[str]) -> Value | None:
    for _ in range(50):
        value = _draw(rng, kind, lang)
        if value.norm not in avoid:
            return value
    return None


def _draw(rng: random.Random, kind: str, lang: str) -> Value:
    words = rng.random() < 0.4
    if kind == "money":
        n = rng.randrange(1, 99) * 100 + rng.choice([0, 0, 50])
        if lang == "zh":
            cny = rng.random() < 0.7
            code = "CNY" if cny else "USD"
            if words:
                return Value(cn_words(n) + ("元" if cny else "美元"), f"{n} {code}")
            return Value(rng.choice([f"{n}元", f"¥{n:,}"]) if cny else f"{n}美元", f"{n} {code}")
        if words:
            return Value(en_words(n) + " dollars", f"{n} USD")
        return Value(rng.choice([f"{n} USD", f"${n:,}", f"USD {n}"]), f"{n} USD")
    if kind == "discount":
        pay = rng.choice([95, 90, 85, 80, 75, 70, 65])
        off = f"{100 - pay}% off"
        if lang == "zh":
            digits = str(pay // 10) if pay % 10 == 0 else str(pay)
            text = "".join(_CN_DIGIT[int(d)] for d in digits) + "折" if words else digits + "折"
            return Value(text, off)
        return Value(f"{en_words(100 - pay)} percent off" if words else off, off)
    if kind == "date":
        month, day = rng.randint(1, 12), rng.choice(sorted(_EN_ORD))
        norm = f"{month:02d}-{day:02d}"
        if lang == "zh":
            if words:
                return Value(f"{cn_words(month)}月{cn_words(day)}日", norm)
            return Value(rng.choice([f"2025年{month}月{day}日", f"{month}月{day}日"]), norm)
        if words:
            return Value(f"{_MONTHS[month - 1]} {_EN_ORD[day]}", norm)
        return Value(rng.choice([f"{_MONTHS[month - 1]} {day}", f"{_MONTHS[month - 1]} {day}, 2025"]), norm)
    if kind == "time":
        hour = rng.randint(1, 11)
        norm = f"{hour + 12:02d}:00"
        if lang == "zh":
            return Value(f"下午{cn_words(hour)}点" if words else f"下午{hour}点", norm)
        return Value(f"{en_words(hour)} pm" if words else f"{hour} pm", norm)
    if kind == "percent":
        n = rng.randint(3, 40)
        if lang == "zh" and words:
            return Value(f"百分之{cn_words(n)}", f"{n}%")
        return Value(f"{en_words(n)} percent" if words else f"{n}%", f"{n}%")
    if kind == "host":
        name = f"db-{rng.randint(1, 99):02d}.{rng.choice(['prod', 'stage'])}.internal"
        return Value(name, name)
    if kind == "service":
        name = rng.choice(_SERVICES)
        return Value(name, name)
    if kind == "person":
        name = rng.choice(_PEOPLE)
        return Value(name, name)
    ticket = f"INC-{rng.randint(1000, 9999)}"
    return Value(ticket, ticket)


@dataclass(frozen=True)
class Message:
    role: str
    """"user", "assistant" (text), "call" (an assistant tool call) or "tool"."""
    text: str = ""
    call_id: str = ""
    tool: str = ""
    arguments: str = ""


@dataclass
class Planted:
    """The truth about one planted key."""

    slot: Slot
    current: Value | None = None
    rejected: dict[str, Value] = field(default_factory=dict)
    """norm -> value: rejected in a sentence or replaced by a correction (and not current again)."""
    corrected_from: Value | None = None
    """Set when the latest statement was a correction."""
    index: int = -1
    """The message that said it last."""
    ambiguous: bool = False
    lines: list[int] = field(default_factory=list)
    """Messages that planted it."""


@dataclass(frozen=True)
class Event:
    index: int
    key: str
    kind: str


@dataclass
class GenSession:
    seed: int
    lang: str
    goal: str
    messages: list[Message] = field(default_factory=list)
    truth: dict[str, Planted] = field(default_factory=dict)
    facts: list[tuple[int, Value]] = field(default_factory=list)
    """Unlabelled planted facts (numbers in words, amounts): (message index, value)."""
    events: list[Event] = field(default_factory=list)


def _label(slot: Slot, lang: str) -> str:
    return slot.zh if lang == "zh" else slot.en


class _Writer:
    """Statements about planted keys, in the language of the message."""

    def __init__(self, rng: random.Random, session: GenSession) -> None:
        self.rng = rng
        self.s = session

    def lang(self) -> str:
        return self.rng.choice(["en", "zh"]) if self.s.lang == "mixed" else self.s.lang

    def _draw_value(self, planted: Planted, lang: str, *also: Value) -> Value:
        avoid = {v.norm for p in self.s.truth.values() for v in ((p.current,) if p.current else ())}
        must = avoid | {v.norm for v in also}
        # Never a value rejected before if it can be helped (a small pool may force a repeat).
        value = _value(self.rng, planted.slot.kind, lang, must | set(planted.rejected))
        value = value or _value(self.rng, planted.slot.kind, lang, must)
        assert value is not None, "could not draw a distinct value"
        return value

    def statement(self, planted: Planted, index: int) -> str:
        """A statement about `planted`'s key; updates the truth."""
        lang, rng, slot = self.lang(), self.rng, planted.slot
        label = _label(slot, lang)
        new = self._draw_value(planted, lang)
        old = planted.current
        choice = rng.random()
        rejected: Value | None = None
        corrected: Value | None = None
        if old is not None and choice < 0.35:
            corrected = old
            kind = "correction"
            if lang == "zh":
                text = rng.choice([f"更正：{label}改为{new.text}。", f"{label}从{old.text}改为{new.text}。",
                                   f"更正一下，{label}应该是{new.text}。"])  # fmt: skip
            else:
                text = rng.choice([f"Correction: the {label} is {new.text}.",
                                   f"Change the {label} from {old.text} to {new.text}.",
                                   f"Sorry, the {label} should be {new.text}."])  # fmt: skip
        elif choice < 0.7:
            rejected = self._draw_value(planted, lang, new)
            kind = "negation"
            if lang == "zh":
                text = rng.choice([f"{label}是{new.text}，不是{rejected.text}。",
                                   f"{label}是{new.text}而不是{rejected.text}。",
                                   f"{label}不是{rejected.text}，而是{new.text}。"])  # fmt: skip
            else:
                text = rng.choice([f"The {label} is {new.text}, not {rejected.text}.",
                                   f"The {label} is {new.text} instead of {rejected.text}.",
                                   f"The {label} is not {rejected.text} but {new.text}."])  # fmt: skip
        else:
            kind = "state"
            text = f"{label}是{new.text}。" if lang == "zh" else f"The {label} is {new.text}."
        if rejected is not None:
            planted.rejected[rejected.norm] = rejected
        if old is not None and old.norm != new.norm:
            planted.rejected[old.norm] = old
        planted.rejected.pop(new.norm, None)
        planted.current, planted.corrected_from, planted.index = new, corrected, index
        planted.lines.append(index)
        self.s.events.append(Event(index, slot.key, kind))
        return text

    def ambiguous(self, index: int) -> str | None:
        """'The refund cap for an order amount of X is Y': Y has no certain label (two fresh keys)."""
        free = [k for k in ("order amount", "refund cap") if k not in self.s.truth]
        if len(free) < 2:
            return None
        lang = self.lang()
        slots = {s.key: s for s in SLOTS}
        amount, cap = Planted(slots["order amount"], ambiguous=True), Planted(slots["refund cap"], ambiguous=True)
        amount.current = self._draw_value(amount, lang)
        self.s.truth["order amount"] = amount
        cap.current = self._draw_value(cap, lang)
        self.s.truth["refund cap"] = cap
        for planted in (amount, cap):
            planted.index = index
            planted.lines.append(index)
        self.s.events.append(Event(index, "order amount+refund cap", "ambiguous"))
        assert amount.current is not None and cap.current is not None
        if lang == "zh":
            return f"订单金额为{amount.current.text}的那笔退款，上限是{cap.current.text}。"
        return f"The refund cap for an order amount of {amount.current.text} is {cap.current.text}."

    def number_in_words(self, index: int) -> str:
        n = self.rng.randrange(3, 99) * 100 + self.rng.randrange(1, 99)
        if self.lang() == "zh":
            value = Value(cn_words(n), str(n))
            text = f"昨天大约有{value.text}个请求失败了。"
        else:
            value = Value(en_words(n), str(n))
            text = f"Yesterday about {value.text} requests failed."
        self.s.facts.append((index, value))
        self.s.events.append(Event(index, "", "number"))
        return text


def _noise_user(rng: random.Random, lang: str, t: int) -> str:
    pod = f"checkout-{rng.randrange(16**8):08x}-{rng.randrange(36**5):05x}"[:28]
    order = f"ORD-2025-{rng.randint(0, 9999):04d}"
    if lang == "zh":
        return rng.choice(
            [f"{pod}一直重启，请排查。", f"订单{order}的状态怎么样？", f"帮我看一下节点node-{t % 7}上的日志。"]
        )
    return rng.choice([f"Pod {pod} keeps restarting. What is going on?", f"Can you check order {order}?",
                       f"Please look at the logs on node-{t % 7}."])  # fmt: skip


def _narration(rng: random.Random, lang: str) -> str:
    pod = f"checkout-{rng.randrange(16**8):08x}-{rng.randrange(36**5):05x}"[:28]
    if lang == "zh":
        return f"已确认：{pod}因OOMKilled重启{rng.randint(2, 40)}次，内存{rng.choice([256, 512, 768])}Mi。"
    return (f"Checked pod {pod}: restarted {rng.randint(2, 40)} times, memory {rng.choice([256, 512, 768])}Mi, "
            f"last restart {rng.randint(1, 12)}:{rng.randint(10, 59)}.")  # fmt: skip


def generate(seed: int, *, lang: str = "mixed", turns: int = 40, plants: int = 8) -> GenSession:
    """A session of `turns` rounds (user, tool call and result most rounds, assistant narration) with
    about `plants` planted statements, mostly in its first half (so they end up summarised)."""
    rng = random.Random(seed)
    session = GenSession(seed, lang, rng.choice(["fix checkout payment failures", "排查 checkout 下单失败并核对退款"]))
    writer = _Writer(rng, session)
    keys = rng.sample([s for s in SLOTS], k=min(len(SLOTS), max(3, plants // 2)))
    plant_turns = sorted(rng.sample(range(turns), k=min(turns, plants)), key=lambda t: (t > turns // 2, t))
    planned = dict.fromkeys(sorted(plant_turns))
    msgs = session.messages
    for t in range(turns):
        msg_lang = writer.lang()
        text = _noise_user(rng, msg_lang, t)
        if t in planned:
            roll = rng.random()
            if roll < 0.1 and (amb := writer.ambiguous(len(msgs))) is not None:
                text = amb
            elif roll < 0.22:
                text = writer.number_in_words(len(msgs))
            else:
                slot = rng.choice(keys)
                planted = session.truth.get(slot.key)
                if planted is None or planted.ambiguous:
                    if planted is not None:
                        slot = next((s for s in keys if s.key not in session.truth), slot)
                    planted = session.truth.setdefault(slot.key, Planted(slot))
                if not planted.ambiguous:
                    text = writer.statement(planted, len(msgs))
        msgs.append(Message("user", text))
        if rng.random() < 0.7:
            call = f"call_{seed}_{t}"
            if rng.random() < 0.5:
                pods = [{"name": f"checkout-7d9f8b6c5-q{i}x2z", "restarts": rng.randint(0, 40)} for i in range(6)]
                msgs.append(Message("call", call_id=call, tool="kubectl_get_pods", arguments='{"namespace": "prod"}'))
                msgs.append(Message("tool", json.dumps({"items": pods}), call_id=call, tool="kubectl_get_pods"))
            else:
                log = big_log(rng.choice([40, 80, 160]), errors=(7,), seed=seed * 1000 + t, width=80)
                msgs.append(Message("call", call_id=call, tool="kubectl_logs", arguments='{"tail": 200}'))
                msgs.append(Message("tool", log, call_id=call, tool="kubectl_logs"))
        msgs.append(Message("assistant", _narration(rng, msg_lang)))
    return session
