"""What a request may cost before it is sent: the reserve budgets are held against, and the price a
`choose: cheapest` route compares (docs/design.md §6).

The input is estimated from the request's bytes (UTF-8 bytes / 3: above tiktoken's count for English,
about one token per character for CJK text, so the estimate errs high, as a reserve should), plus a
few tokens per message. The output is the request's `max_tokens`, else the model's configured
`max_tokens`, else the backend's for Anthropic (which always sends one), else
`gateway.reserve_output_tokens`. Domain code only: no grpc, no stubs.
"""

from __future__ import annotations

import json

from agentmesh.config import GatewaySettings
from provider_svc.models.base import ModelRequest
from provider_svc.routing import ResolvedModel
from provider_svc.usage import Prices

__all__ = ["estimate_input_tokens", "output_limit", "prices_of", "reserve_usd"]

_PER_MESSAGE = 8


def estimate_input_tokens(request: ModelRequest) -> int:
    """An upper-leaning estimate of the request's prompt tokens."""
    size = 0
    for m in request.messages:
        size += len(m.content.encode("utf-8"))
        for call in m.tool_calls:
            size += len(call.name) + len(call.arguments_json.encode("utf-8"))
        size += 3 * _PER_MESSAGE
    for tool in request.tools:
        size += len(tool.name) + len(tool.description.encode("utf-8")) + len(json.dumps(dict(tool.input_schema)))
    if request.response_schema is not None:
        size += len(json.dumps(dict(request.response_schema)))
    return size // 3 + _PER_MESSAGE


def output_limit(request: ModelRequest, model: ResolvedModel, gateway: GatewaySettings) -> int:
    """The most output tokens the reply may take (what is reserved for it)."""
    if request.sampling.max_tokens is not None:
        return request.sampling.max_tokens
    listed = model.settings
    if listed is not None and listed.max_tokens:
        return listed.max_tokens
    if model.backend.type == "anthropic":
        return model.backend.max_tokens
    return gateway.reserve_output_tokens


def prices_of(model: ResolvedModel) -> Prices:
    listed = model.settings
    return Prices(listed.input_price_per_mtok, listed.output_price_per_mtok) if listed is not None else Prices()


def reserve_usd(input_tokens: int, output_tokens: int, prices: Prices) -> float:
    """The cost of `input_tokens` in and `output_tokens` out at `prices`."""
    return (input_tokens * prices.input_per_mtok + output_tokens * prices.output_per_mtok) / 1_000_000
