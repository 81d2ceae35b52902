"""What runs inside the sandbox before the code (docs/design.md §5, §9): the prelude and the setuid trampoline.

Both are Python source run with `python -c` (the prelude by the sandbox's interpreter, isolated, `-I -S -B`), so
they are strings here: the prelude sets the hard limits, installs the audit hook that reports attempts to leave
the sandbox on the report fd, then runs the code read from stdin. `tool_svc.sandbox` starts them.
"""

from __future__ import annotations

__all__ = ["PRELUDE", "SETUID_TRAMPOLINE"]

# Runs inside the sandbox as `python -I -S -c PRELUDE <report fd> <limits json>`; the code comes on stdin.
PRELUDE = r"""
import errno, json, os, resource, sys

def _agentmesh_main():
    report_fd = int(sys.argv[1])
    limits = json.loads(sys.argv[2])

    def report(kind, **fields):
        try:
            os.write(report_fd, (json.dumps(dict(kind=kind, **fields)) + "\n").encode())
        except OSError:
            pass

    report("started")
    for name, value in (
        ("RLIMIT_CPU", limits["cpu_s"]),
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_NPROC", limits["max_processes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_NOFILE", 64),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    code = sys.stdin.read()
    sys.stdin.close()
    sys.stdin = open(os.devnull)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="replace")

    read_ok = ("/usr/", "/tmp/", "/proc/self/", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
    write_ok = ("/tmp/", "/dev/null")
    max_processes = limits["max_processes"]
    busy = [False]

    def where(path):
        if isinstance(path, int) or path is None:
            return None
        path = os.fsdecode(os.fspath(path))
        try:
            base = os.getcwd()
        except OSError:
            base = "/tmp"
        return os.path.normpath(os.path.join(base, path))

    def inside(path, roots):
        return any(path == r.rstrip("/") or path.startswith(r) for r in roots)

    def violation(what, detail):
        report("violation", what=what, detail=str(detail)[:300])
        raise PermissionError(errno.EACCES, "agentmesh sandbox: " + what)

    def live_processes():
        try:
            return sum(1 for name in os.listdir("/proc") if name.isdigit())
        except OSError:
            return 0

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    changes = ("os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.replace", "os.chmod", "os.chown",
               "os.symlink", "os.link", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile")
    spawns = ("os.fork", "os.forkpty", "subprocess.Popen", "os.posix_spawn", "os.spawn", "os.system", "os.exec")
    network = ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
               "socket.gethostbyname", "socket.gethostbyaddr")

    def hook(event, args):
        if busy[0]:
            return
        busy[0] = True
        try:
            if event == "open":
                path = where(args[0])
                if path is None:
                    return
                mode, flags = args[1] or "", args[2] or 0
                if any(c in mode for c in "wax+") or flags & write_flags:
                    if not inside(path, write_ok):
                        violation("write outside the sandbox's temp dir", path)
                elif not inside(path, read_ok):
                    violation("read outside the sandbox's temp dir", path)
            elif event in ("os.listdir", "os.scandir"):
                path = where(args[0] if args and args[0] is not None else ".")
                if path is not None and not inside(path, read_ok):
                    violation("read outside the sandbox's temp dir", path)
            elif event in changes:
                path = where(args[0]) if args else None
                if path is not None and not inside(path, write_ok):
                    violation("write outside the sandbox's temp dir", path)
            elif event == "socket.__new__":
                family = args[1] if len(args) > 1 else None
                if family is not None and family != 1:
                    violation("open a network socket", family)
            elif event in network:
                violation("use the network", event)
            elif event in spawns:
                if live_processes() >= max_processes:
                    violation("fork without bound", event)
            elif event.startswith("ctypes."):
                violation("load native code", event)
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    status = 0
    try:
        exec(compile(code, "<run_python>", "exec"), namespace)
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int) and exc.code is not None:
            print(exc.code, file=sys.stderr)
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.errno == errno.EAGAIN:
            report("violation", what="fork without bound", detail=str(exc)[:300])
        import traceback
        traceback.print_exc()
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    report("exit", status=status)
    os._exit(status)

_agentmesh_main()
"""


# Drops to an unprivileged uid, then becomes bwrap: `python -c TRAMPOLINE <uid> <gid> bwrap args...`.
SETUID_TRAMPOLINE = """
import os, sys
uid, gid = int(sys.argv[1]), int(sys.argv[2])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
os.execv(sys.argv[3], sys.argv[3:])
"""
