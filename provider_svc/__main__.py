"""`python -m provider_svc [config.yaml]` starts provider_svc alone."""

import sys

from agentmesh.rpc.host import run_service
from provider_svc.server import SPEC

if __name__ == "__main__":
    sys.exit(run_service(SPEC))
