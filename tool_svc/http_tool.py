"""The executor of registered HTTP tools: send the arguments to the tool's endpoint with its method.

POST, PUT and PATCH send the arguments as a JSON body; GET and DELETE send them as query parameters
(a string as is, any other value as canonical JSON text) after the endpoint's own query. The answer is
mapped as every HTTP answer is (`tool_svc.http`: status_error, body_output). Every request carries the
`Idempotency-Key` derived from the call's idempotency key (`tool_svc.http.idempotency_key_value`), the
same on every retry, so an upstream that honours it (`upstream_idempotency_key`) runs the call once.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from tool_svc.http import HttpTransport, body_output, status_error
from tool_svc.model import Invocation, Produced, canonical_json

QUERY_METHODS = frozenset({"GET", "DELETE"})


def query_url(url: str, arguments: Any) -> str:
    """`url` with the arguments' top-level fields appended as query parameters, in key order."""
    if not isinstance(arguments, dict) or not arguments:
        return url
    pairs = [(k, v if isinstance(v, str) else canonical_json(v)) for k, v in sorted(arguments.items())]
    parts = urllib.parse.urlsplit(url)
    query = "&".join(q for q in (parts.query, urllib.parse.urlencode(pairs)) if q)
    return urllib.parse.urlunsplit(parts._replace(query=query))


class HttpToolExecutor:
    """Runs a registered HTTP tool (ToolDef.executor == "http") with its `http_method`."""

    def __init__(self, transport: HttpTransport) -> None:
        self.transport = transport

    async def __call__(self, call: Invocation) -> Produced:
        tool = call.tool
        method = tool.http_method or "POST"
        if method in QUERY_METHODS:
            url = query_url(tool.endpoint_url, call.arguments)
            body = await self.transport.request(
                tool, method, url, timeout_s=call.timeout_s, idempotency_key=call.idempotency_key
            )
        else:
            body = await self.transport.request(
                tool,
                method,
                tool.endpoint_url,
                timeout_s=call.timeout_s,
                json_body=call.arguments,
                idempotency_key=call.idempotency_key,
            )
        if not 200 <= body.status < 300:
            raise status_error(tool, body)
        return body_output(tool, body)
