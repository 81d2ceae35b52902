"""A scripted policy that answers differently on every call, for crash-safety tests and benchmarks.

Each reply asks `notify` (a side-effecting tool) with the next sequence number and a fresh random
nonce, `steps` times, then answers with every nonce it saw acknowledged. Because the nonce is not
derived from the prompt, regenerating a reply after a crash (instead of resuming the checkpointed
one) would send a different call: determinism cannot hide such a bug.

Configured as a scripted model: `policy: provider_svc.scenarios.nonce_chain:factory` with
`policy_args: {steps: 3, tool: notify}`, or `policy: provider_svc.scenarios.nonce_chain:policy`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from provider_svc.testing.scripted import ScriptedReply, ScriptedRequest, ScriptedToolCall, fix_last_call


def factory(steps: int = 3, tool: str = "notify") -> Callable[[ScriptedRequest], ScriptedReply]:
    def nonce_policy(req: ScriptedRequest) -> ScriptedReply:
        err = req.last_error
        if err is not None and err.is_contract and req.failed_call is not None:
            return fix_last_call(req)
        done = req.results_of(tool)
        if len(done) < steps:
            args = {"seq": len(done) + 1, "nonce": uuid.uuid4().hex}
            return ScriptedReply(tool_calls=(ScriptedToolCall(tool, json.dumps(args)),))
        return ScriptedReply(text=f"{tool} done {len(done)} times: " + "; ".join(m.content[:80] for m in done))

    return nonce_policy


policy = factory()
