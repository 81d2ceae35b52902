"""A generated long ops session (English and Chinese) for the faithfulness tests and the bench.

Every user and assistant turn carries facts of the kinds docs/design.md §4 names (amounts, discounts
like 85折 vs 8折, dates in both forms, pod names, order ids, hosts, IPs); each step records the
fact strings it put in, so tests check the summary against what was generated, not against the
extractor under test. Tool outputs are produced as a tool would: small JSON, 200-line logs, and a
few large ones (a 300 KB log, a 5,000-row JSON result).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

__all__ = ["Step", "big_json_rows", "big_log", "ops_session"]


@dataclass(frozen=True)
class Step:
    """One step: a user or assistant text turn, or an assistant tool call with its output."""

    kind: str
    """"user", "assistant" or "tool"."""
    text: str = ""
    facts: tuple[str, ...] = ()
    """Fact strings this step's user/assistant text or tool arguments contain."""
    call_id: str = ""
    tool: str = ""
    arguments: dict[str, object] = field(default_factory=dict)
    output: str = ""
    structured: bool = False


def big_log(lines: int = 3000, *, errors: tuple[int, ...] = (), seed: int = 1, width: int = 100) -> str:
    """An INFO log of `lines` lines with ERROR lines at the given 0-based positions."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        ts = f"2025-06-01T{8 + i // 3600 % 12:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"
        if i in errors:
            out.append(
                f"{ts} ERROR checkout-7d9f8b6c5-q{i % 10}x2z payment gateway timeout after 30000ms "
                f"order=ORD-2025-{9000 + i % 1000:04d} upstream=10.0.{i % 250}.{i % 200 + 1}:8443"
            )
            continue
        cart, took = rng.randint(1000, 9999), rng.randint(3, 90)
        body = f"{ts} INFO checkout-7d9f8b6c5-q{i % 10}x2z GET /api/cart/{cart} 200 {took}ms"
        out.append(body.ljust(width, "."))
    return "\n".join(out)


def big_json_rows(rows: int = 5000, *, empty_first: int = 0, seed: int = 2) -> str:
    """A JSON result {"items": [...], "total": rows}; the first `empty_first` records are empty."""
    rng = random.Random(seed)
    items: list[object] = []
    for i in range(rows):
        if i < empty_first:
            items.append({} if i % 2 else {"order_id": None, "amount": None})
            continue
        items.append(
            {
                "order_id": f"ORD-2025-{i:04d}",
                "amount": round(rng.uniform(10, 5000), 2),
                "status": rng.choice(["paid", "refunded", "pending"]),
                "discount": rng.choice(["85折", "8折", "9折", None]),
            }
        )
    return json.dumps({"items": items, "total": rows}, ensure_ascii=False)


_EN_USER = [
    "Order {order} was charged {amount} on {date_iso}; the customer says the discount should be {disc}. Check it?",
    "Pod {pod} on host {host} keeps restarting since {date_iso}, error rate {pct}. What is going on?",
    "Please compare refunds for {order} and {order2}: {amount} vs {amount2}.",
    "Latency on {ip} is above {pct} of the SLO; the incident INC-{inc} was opened {date_iso}.",
]
_CN_USER = [
    "订单{order}的折扣是{disc}还是{disc2}？金额{amount_cn}，{date_cn}下单。",
    "{date_cn}起{pod}一直重启，主机{host}，请排查。",
    "客户说退款{amount_cn}还没到账，订单{order}，预计{date_md}到账吗？",
    "把{order}的折扣从{disc2}改成{disc}，从{date_cn}开始生效，影响大约{cn_number}个订单。",
]
_ASSISTANT = [
    "Order {order}: {amount} charged on {date_iso} with {disc}; the refund of {amount2} is pending.",
    "已确认：{pod}在{host}上因OOMKilled重启，内存上限512Mi，已建议调整到1Gi。",
    "Checked {order2}: discount {disc2}, amount {amount_cn}, shipped {date_cn}.",
]
_DISCOUNTS = ["85折", "8折", "9折", "75折", "七五折", "八五折", "95折"]
_CN_AMOUNTS = ["三千元", "两千五百元", "一万二千元", "五百元", "3000元", "1,250元"]
_CN_NUMBERS = ["三千", "两百", "一千五百", "十五"]


def _values(rng: random.Random, step: int) -> dict[str, str]:
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    return {
        "order": f"ORD-2025-{rng.randint(0, 9999):04d}",
        "order2": f"ORD-2025-{rng.randint(0, 9999):04d}",
        "amount": f"¥{rng.randint(1, 99)},{rng.randint(0, 999):03d}",
        "amount2": f"${rng.randint(10, 999)}.{rng.randint(0, 99):02d}",
        "amount_cn": rng.choice(_CN_AMOUNTS),
        "disc": rng.choice(_DISCOUNTS),
        "disc2": rng.choice(_DISCOUNTS),
        "date_iso": f"2025-{month:02d}-{day:02d}",
        "date_cn": f"2025年{month}月{day}日",
        "date_md": f"{month}月{day}日",
        "pod": f"checkout-{rng.randrange(16**9):09x}-{rng.randrange(36**5):05x}"[:32],
        "host": f"db-{rng.randint(1, 9):02d}.prod.internal",
        "ip": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
        "pct": f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%",
        "inc": str(4000 + step),
        "cn_number": rng.choice(_CN_NUMBERS),
    }


def _fill(template: str, values: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    text = template.format(**values)
    used = tuple(dict.fromkeys(v if k != "inc" else f"INC-{v}" for k, v in values.items() if "{" + k + "}" in template))
    return text, used


def ops_session(turns: int = 120, *, seed: int = 7, big: bool = True) -> list[Step]:
    """`turns` rounds of user question, tool call(s) and assistant answer; with `big`, three 300 KB
    logs and a 5,000-row JSON result among the tool outputs."""
    rng = random.Random(seed)
    steps: list[Step] = []
    big_at = {turns // 5: "log", turns // 2: "json", (3 * turns) // 4: "log", turns - 3: "log"} if big else {}
    for t in range(turns):
        values = _values(rng, t)
        template = (_CN_USER if t % 2 else _EN_USER)[t // 2 % 4]
        text, facts = _fill(template, values)
        steps.append(Step("user", text, facts))
        kind = big_at.get(t)
        call = f"call_{t}_0"
        if kind == "log":
            args: dict[str, object] = {"pod": values["pod"], "since": values["date_iso"], "tail": 3000}
            output = big_log(3000, errors=(1234 + t, 2900), seed=t)
            steps.append(Step("tool", call_id=call, tool="kubectl_logs", arguments=args, output=output,
                              facts=(values["pod"], values["date_iso"])))  # fmt: skip
        elif kind == "json":
            args = {"since": values["date_iso"], "limit": 5000}
            steps.append(Step("tool", call_id=call, tool="query_orders", arguments=args,
                              output=big_json_rows(5000, seed=t), structured=True,
                              facts=(values["date_iso"],)))  # fmt: skip
        elif t % 3 == 0:
            args = {"namespace": "prod", "selector": "app=checkout"}
            pods = [{"name": f"checkout-7d9f8b6c5-q{i}x2z", "restarts": rng.randint(0, 40), "ready": i % 4 != 0}
                    for i in range(8)]  # fmt: skip
            steps.append(Step("tool", call_id=call, tool="kubectl_get_pods", arguments=args,
                              output=json.dumps({"items": pods}), structured=True))  # fmt: skip
        elif t % 3 == 1:
            args = {"order_id": values["order"]}
            row = {"order_id": values["order"], "amount": values["amount"], "discount": values["disc"],
                   "paid_at": values["date_iso"]}  # fmt: skip
            steps.append(Step("tool", call_id=call, tool="query_orders", arguments=args,
                              output=json.dumps(row, ensure_ascii=False), structured=True,
                              facts=(values["order"],)))  # fmt: skip
        else:
            args = {"pod": values["pod"], "tail": 200}
            steps.append(Step("tool", call_id=call, tool="kubectl_logs", arguments=args,
                              output=big_log(200, errors=(150,), seed=t, width=80),
                              facts=(values["pod"],)))  # fmt: skip
        text, facts = _fill(_ASSISTANT[t % 3], _values(rng, t))
        steps.append(Step("assistant", text, facts))
    return steps
