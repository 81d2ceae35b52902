"""DiscoverTools ranking: 40 tools in English and Chinese; queries phrased unlike the descriptions."""

from __future__ import annotations

import pytest

from tool_svc.discovery import ToolIndex, document_tokens, split_identifier, tokenize
from tool_svc.model import ToolDef

TOOLS: dict[str, tuple[str, list[str]]] = {
    "query_logs": ("Use when investigating errors: search service logs by level, time window and text.", []),
    "restart_service": ("Use when a service is stuck or unhealthy and must be restarted (rolling restart).", []),
    "scale_deployment": ("Use to change the number of replicas of a Kubernetes deployment.", ["scale up the api"]),
    "get_metrics": ("Use when you need CPU, memory or latency metrics of a service over time.", []),
    "list_pods": ("Use to list the pods of a namespace with their status and restarts.", []),
    "describe_pod": ("Use to see the events, containers and conditions of one pod.", []),
    "rollback_release": ("Use when a deploy went bad: roll back a release to its previous version.", []),
    "deploy_history": ("Use to list recent deployments of a service with version and author.", []),
    "open_incident": ("Use to open an incident ticket and page the on-call engineer.", []),
    "send_email": ("Use to send an email message to a person or a mailing list.", []),
    "send_slack": ("Use to post a message to a Slack channel.", []),
    "calculator": ("Use when a question needs arithmetic on numbers.", ["what is 17 times 3"]),
    "currency_convert": (
        "Use to convert an amount of money between currencies at today's exchange rate.",
        ["convert 100 dollars to euro", "how much is 50 pounds in yen"],
    ),
    "weather_forecast": ("Use to get the weather forecast for a city.", ["will it rain tomorrow"]),
    "translate_text": ("Use to translate text from one language to another.", []),
    "search_docs": ("Use to search internal documentation and runbooks.", []),
    "create_user": ("Use to create a new user account with an email and a role.", []),
    "reset_password": ("Use when a user forgot their password and needs a reset link.", []),
    "refund_order": ("Use to refund a paid order fully or partially.", []),
    "get_order": ("Use to look up an order by its id: items, amount, payment status.", []),
    "dns_lookup": ("Use to resolve a hostname to IP addresses (DNS records).", []),
    "check_certificate": ("Use to check the TLS certificate of a host and when it expires.", []),
    "run_sql": ("Use to run a read-only SQL query against the analytics database.", []),
    "disk_usage": (
        "Use when a host may be running out of disk space: shows usage per mount and partition.",
        ["no space left on device", "the disk is full"],
    ),
    "cron_jobs": ("Use to list scheduled cron jobs and their last run.", []),
    # Chinese descriptions
    "cn_query_orders": ("查询订单：根据订单号查看订单金额、商品和支付状态。", []),
    "cn_refund": ("退款：对已支付的订单进行全额或部分退款。", []),
    "cn_logistics": ("物流查询：查看包裹的快递物流轨迹和预计送达时间。", []),
    "cn_coupon": ("优惠券：给用户发放优惠券或折扣码。", []),
    "cn_weather": ("天气预报：查询城市未来几天的天气情况。", []),
    "cn_translate": ("翻译：把一段文字翻译成另一种语言。", []),
    "cn_restart": ("重启服务：当服务卡死或异常时进行滚动重启。", []),
    "cn_logs": ("日志检索：按服务、级别和时间搜索错误日志。", []),
    "cn_alert": ("告警通知：给值班工程师发送告警短信和电话。", []),
    "cn_invoice": ("发票：为订单开具电子发票。", []),
    "cn_inventory": ("库存查询：查看商品在各仓库的库存数量。", []),
    "cn_member": ("会员积分：查询和调整会员的积分余额。", []),
    "cn_exchange_rate": ("汇率换算：按今日汇率把金额换算成其他货币。", []),
    "cn_address": ("地址解析：把收货地址解析成省市区和邮编。", []),
    "cn_calendar": ("日程安排：在日历中创建会议并邀请参会人。", []),
}

QUERIES: list[tuple[str, str]] = [
    ("why does payment-svc keep throwing errors since 10am", "query_logs"),
    ("the checkout service hangs, restarting it might help", "restart_service"),
    ("we need more replicas for the api during the sale", "scale_deployment"),
    ("how much memory is the gateway consuming", "get_metrics"),
    ("which pods in namespace prod are crashing", "list_pods"),
    ("yesterday's deployment broke checkout, go back to the previous version", "rollback_release"),
    ("who deployed the last version of the billing service", "deploy_history"),
    ("page whoever is on call, the site is down", "open_incident"),
    ("post an update in the #ops slack channel", "send_slack"),
    ("what's 1250 times 0.85", "calculator"),
    ("how many euros is 300 dollars", "currency_convert"),
    ("is it going to rain in Berlin tomorrow", "weather_forecast"),
    ("is there a runbook for redis failover", "search_docs"),
    ("customer cannot log in, forgot password", "reset_password"),
    ("give the customer their money back for order 42", "refund_order"),
    ("what is the payment status of order ORD-2025-0001", "get_order"),
    ("does api.example.com resolve to the right ip address", "dns_lookup"),
    ("when does the tls certificate of shop.example.com expire", "check_certificate"),
    ("the root partition on db1 is almost full", "disk_usage"),
    ("帮我查一下这个订单的支付状态", "cn_query_orders"),
    ("我的快递到哪里了", "cn_logistics"),
    ("给这位用户发一张折扣券", "cn_coupon"),
    ("明天上海会下雨吗，天气怎么样", "cn_weather"),
    ("支付服务卡死了，需要重启", "cn_restart"),
    ("搜索一下网关服务今天的错误日志", "cn_logs"),
    ("这个订单需要开发票", "cn_invoice"),
    ("仓库里这个商品还有多少库存", "cn_inventory"),
    ("一百美元按汇率换算成人民币是多少", "cn_exchange_rate"),
    ("帮我约一个明天下午的会议", "cn_calendar"),
    ("用户要求退款", "cn_refund"),
]


@pytest.fixture(scope="module")
def index() -> ToolIndex:
    tools = [
        ToolDef(name=name, description=text, examples=tuple(examples), input_schema={"type": "object"})
        for name, (text, examples) in TOOLS.items()
    ]
    assert len(tools) == 40
    return ToolIndex(tools)


@pytest.mark.parametrize(("query", "expected"), QUERIES, ids=[q for q, _ in QUERIES])
def test_the_right_tool_is_in_the_top_5(index: ToolIndex, query: str, expected: str) -> None:
    top = [s.tool.name for s in index.search(query, 5)]
    assert expected in top, f"{query!r} -> {top}"


def test_top_1_precision_is_high(index: ToolIndex) -> None:
    hits = sum(index.search(query, 1)[0].tool.name == expected for query, expected in QUERIES)
    assert hits >= len(QUERIES) * 0.7


def test_chinese_is_tokenized_as_bigrams_and_english_is_stemmed() -> None:
    assert tokenize("重启服务") == ["重启", "启服", "服务"]
    assert tokenize("库") == ["库"]
    assert tokenize("Restarting the services") == ["restart", "servic"]
    assert tokenize("réservation café") == ["reserv", "cafe"]  # not cut at the accents
    assert tokenize("payment-svc 日志") == ["payment", "svc", "日志"]


def test_k_and_filter(index: ToolIndex) -> None:
    assert len(index.search("order", 3)) == 3
    assert len(index.search("order", 0)) == 5
    assert len(index.search("order", 500)) == 40
    only_cn = index.search("order refund", 10, allow=lambda t: t.name.startswith("cn_"))
    assert only_cn and all(s.tool.name.startswith("cn_") for s in only_cn)
    assert index.search("", 3)  # an empty goal still answers (all scores equal)


def _tool(
    name: str, description: str, schema: dict[str, object] | None = None, examples: tuple[str, ...] = ()
) -> ToolDef:
    return ToolDef(name=name, description=description, input_schema=schema or {"type": "object"}, examples=examples)


def test_parameter_names_and_descriptions_are_matched() -> None:
    # Neither name nor description says "coconut" or "sweetness": only the input schema does (issue 51).
    drink = _tool(
        "change_drink",
        "Modifies an existing order.",
        {
            "type": "object",
            "properties": {
                "preferences": {
                    "type": "object",
                    "properties": {
                        "sweetness_level": {"type": "string", "description": "How sweet."},
                        "milk_type": {"type": "string", "enum": ["soy", "coconut"]},
                    },
                }
            },
        },
    )
    food = _tool("change_food", "Modifies an existing order.", {"type": "object", "properties": {"dish": {}}})
    index = ToolIndex([food, drink])
    assert index.search("coconut milk please", 1)[0].tool.name == "change_drink"
    assert index.search("less sweetness", 1)[0].tool.name == "change_drink"
    assert "dish" in document_tokens(food) and "sweet" in document_tokens(drink)


def test_examples_are_matched() -> None:
    index = ToolIndex(
        [_tool("a_tool", "Does one thing."), _tool("b_tool", "Does one thing.", examples=("is my parcel late",))]
    )
    assert index.search("where is my parcel", 1)[0].tool.name == "b_tool"


def test_identifier_parts_of_names_are_words() -> None:
    assert split_identifier("ChaDri.change_drink") == "Cha Dri change drink"
    assert split_identifier("getHTTPResponse") == "get HTTP Response"


def test_two_tools_are_told_apart_by_a_word_of_one() -> None:
    # Classic idf gave a word in one tool of two a weight of 0: ties fell back to alphabetical order.
    index = ToolIndex(
        [_tool("alpha_order", "Changes the food order."), _tool("zeta_order", "Changes the drink order.")]
    )
    assert index.search("change my drink", 1)[0].tool.name == "zeta_order"
    assert index.search("change my food", 1)[0].tool.name == "alpha_order"


def test_ties_are_deterministic_and_not_alphabetical() -> None:
    names = [f"{letter}_tool" for letter in "abcdefghij"]
    tools = [_tool(n, "Same words.") for n in names]
    first = [s.tool.name for s in ToolIndex(tools).search("same", 10)]
    assert first == [s.tool.name for s in ToolIndex(list(reversed(tools))).search("same", 10)]  # order-free
    assert first != sorted(names)
