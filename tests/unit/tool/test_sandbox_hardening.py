"""The run_python sandbox's kernel-side hardening (issue 21), checked through the real bwrap sandbox.

The snippets that probe the kernel run in a child interpreter: the prelude's audit hook (which stops
ctypes and writes outside /tmp before the kernel sees them) is absent there, so what answers is the
sandbox itself: the seccomp filter and the read-only /dev.
"""

from __future__ import annotations

import errno
import json
import os

from tests.unit.tool.test_sandbox import run, wait_no_sandboxed_processes
from tool_svc.seccomp import DENIED, syscall_number

# The host's numbers, from libseccomp's tables (checked against the kernel's in test_seccomp.py).
NR = {name: syscall_number(name, os.uname().machine) for name in (*DENIED, "clone") if name not in ("iopl", "ioperm")}


def child(source: str) -> str:
    """A snippet that runs `source` in an unhooked /usr/bin/python3 inside the sandbox, echoing its output."""
    return (
        "import subprocess, sys\n"
        f"r = subprocess.run(['/usr/bin/python3', '-I', '-S', '-c', {source!r}], capture_output=True, text=True)\n"
        "print(r.stdout, end='')\n"
        "print(r.stderr, end='', file=sys.stderr)\n"
    )


async def test_a_seccomp_filter_is_in_force() -> None:
    code = (
        "import threading\n"
        "status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
        "t = threading.Thread(target=lambda: None); t.start(); t.join()\n"  # clone3 ENOSYS -> clone fallback
        "print(status['Seccomp'].strip(), status['NoNewPrivs'].strip())\n"
    )
    value = await run(code)
    assert value["stdout"].split() == ["2", "1"], value  # type: ignore[index]


async def test_namespaces_ptrace_and_keyrings_are_denied_with_eperm() -> None:
    source = (
        "import ctypes, json\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "def call(nr, *args):\n"
        "    ctypes.set_errno(0)\n"
        "    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))\n"
        "    return [result, ctypes.get_errno()]\n"
        "print(json.dumps({\n"
        f"    'unshare_user': call({NR['unshare']}, 0x10000000),\n"
        f"    'unshare_net': call({NR['unshare']}, 0x40000000),\n"
        f"    'setns': call({NR['setns']}, 0, 0),\n"
        f"    'ptrace_traceme': call({NR['ptrace']}, 0, 0, 0, 0),\n"
        f"    'keyctl_session': call({NR['keyctl']}, 0, -3, 0),\n"  # KEYCTL_GET_KEYRING_ID, session keyring
        f"    'add_key': call({NR['add_key']}, 0, 0, 0, 0, -3),\n"
        f"    'bpf': call({NR['bpf']}, 0, 0, 0),\n"
        f"    'personality': call({NR['personality']}, 0xffffffff),\n"
        f"    'mount': call({NR['mount']}, 0, 0, 0, 0, 0),\n"
        f"    'perf_event_open': call({NR['perf_event_open']}, 0, 0, -1, -1, 0),\n"
        f"    'userfaultfd': call({NR['userfaultfd']}, 0),\n"
        f"    'clone_newuser': call({NR['clone']}, 0x10000000 | 17, 0, 0, 0, 0),\n"
        "}))\n"
    )
    value = await run(child(source))
    results = json.loads(value["stdout"])  # type: ignore[index]
    assert results == {name: [-1, errno.EPERM] for name in results}, results
    await wait_no_sandboxed_processes()


async def test_dev_cannot_be_filled() -> None:
    # 100 MiB across files smaller than the file-size limit (RLIMIT_FSIZE is tools.sandbox.tmp_size_mb).
    source = (
        "import errno, json, os\n"
        "chunk, written, error = b'\\0' * (1 << 20), 0, None\n"
        "try:\n"
        "    for i in range(10):\n"
        "        with open(f'/dev/fill{i}', 'wb') as f:\n"
        "            for _ in range(10):\n"
        "                f.write(chunk)\n"
        "                written += len(chunk)\n"
        "except OSError as exc:\n"
        "    error = exc.errno\n"
        "ok = {}\n"
        "with open('/dev/null', 'wb') as f:\n"
        "    ok['null'] = f.write(b'x')\n"
        "ok['zero'] = len(open('/dev/zero', 'rb').read(4))\n"
        "ok['urandom'] = len(os.urandom(4))\n"
        "print(json.dumps({'written': written, 'error': error, 'ok': ok, 'dev': sorted(os.listdir('/dev'))}))\n"
    )
    value = await run(child(source))
    result = json.loads(value["stdout"])  # type: ignore[index]
    assert result["written"] < 100 * 1024 * 1024, result
    assert result["written"] == 0 and result["error"] == errno.EROFS, result
    assert result["ok"] == {"null": 1, "zero": 4, "urandom": 4}
    assert not any(name.startswith("fill") for name in result["dev"]), result["dev"]
    assert {"null", "zero", "full", "random", "urandom"} <= set(result["dev"])
