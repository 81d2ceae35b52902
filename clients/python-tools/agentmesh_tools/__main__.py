"""`python -m agentmesh_tools FILE.py [--transport http --port N]`: serves the @tool functions of a file."""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Sequence

from agentmesh_tools._tool import registered, serve


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentmesh-tools", description=__doc__)
    parser.add_argument("file", help="a Python file whose functions are decorated with @tool")
    parser.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1", help="http: address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="http: port (the endpoint is /mcp)")
    args = parser.parse_args(argv)
    # Not as __main__: a file's own `if __name__ == "__main__": serve()` must not run here too.
    runpy.run_path(args.file, run_name="agentmesh_tools_file")
    if not registered():
        print(f"agentmesh-tools: {args.file} defines no @tool function", file=sys.stderr)
        return 2
    serve(transport=args.transport, host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
