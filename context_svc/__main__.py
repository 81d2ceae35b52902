"""`python -m context_svc [config.yaml]` starts context_svc alone."""

import sys

from agentmesh.rpc.host import run_service
from context_svc.server import SPEC

if __name__ == "__main__":
    sys.exit(run_service(SPEC))
