"""The seccomp filter `run_python`'s sandbox runs under (`bwrap --seccomp FD`, docs/design.md §5).

Built with libseccomp (through `pyseccomp`, a ctypes binding to the system's libseccomp.so.2) and
exported as the classic BPF program bwrap reads from the fd and installs just before it executes the
interpreter. libseccomp owns what was hand-written before: the per-architecture syscall tables, the
architecture check, the x32 guard, 64-bit argument comparisons and the jump layout. The policy: deny
with EPERM the calls a Python snippet never needs and that widen the kernel's attack surface or the way
out of the namespaces (debugging other processes, mounting, keyrings, eBPF, new namespaces, modules,
kexec, perf, userfaultfd, reboot, swap, chroot/pivot_root, port I/O, cross-process memory access).

    * `clone` with a CLONE_NEW* flag is denied too (it is `unshare` by another name); `clone3` answers
      ENOSYS, as its flags sit behind a pointer the filter cannot read, and glibc then falls back to
      `clone` (what Flatpak and container runtimes do).
    * The filter carries x86_64, aarch64 and the host's own architecture. Any other in
      `seccomp_data.arch` (i386 through `int 0x80`, arm32 compat) gets EPERM for every call (the
      bad-architecture action), and on x86_64 so does any x32-ABI number (bit 30 set): libseccomp adds
      that guard when x32 is absent. It lets syscall -1 through to the default action on x86_64 (a
      tracer's "skip this call", seccomp(2)); the kernel answers it ENOSYS, and it reaches no denied call.

Without libseccomp (the shared library or the binding) `program()` raises SeccompUnavailableError and
the sandbox refuses to run code (SANDBOX_UNAVAILABLE): never a sandbox without the filter.
"""

from __future__ import annotations

import errno
import functools
import tempfile
from types import ModuleType

# include/uapi/linux/sched.h. CLONE_NEWTIME (0x80) is left out: for clone() that bit is part of the exit
# signal (CSIGNAL); the kernel only honours it through clone3() and unshare(), both denied.
CLONE_NEW_FLAGS = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
CLONE_NAMESPACES = functools.reduce(lambda a, b: a | b, CLONE_NEW_FLAGS)

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "unshare",
    "setns",
    "personality",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "perf_event_open",
    "userfaultfd",
    "reboot",
    "swapon",
    "swapoff",
    "iopl",
    "ioperm",
)
"""Denied with EPERM wherever the architecture has the call (aarch64 has no iopl or ioperm)."""

ARCHES = ("x86_64", "aarch64")
"""The architectures the filter answers for (`uname -m` spelling) besides the host's; others get EPERM."""

_NO_SUCH_NAME = -1  # libseccomp's __NR_SCMP_ERROR: a name it does not know (other negatives are pseudo-calls)


class SeccompUnavailableError(RuntimeError):
    """libseccomp (the shared library or its `pyseccomp` binding) is missing or cannot build the filter."""


def _libseccomp() -> ModuleType:
    """The binding, loaded on first use: pyseccomp opens libseccomp.so.2 when it is imported."""
    try:
        import pyseccomp
    except ImportError as exc:
        raise SeccompUnavailableError(f"the pyseccomp package is not installed ({exc})") from None
    except (RuntimeError, OSError, AttributeError) as exc:  # no libseccomp.so, or one too old to load
        raise SeccompUnavailableError(
            f"libseccomp cannot be loaded ({exc}); install libseccomp2 (Debian/Ubuntu) or libseccomp (Fedora)"
        ) from None
    module: ModuleType = pyseccomp
    return module


def _arch_token(lib: ModuleType, arch: str) -> int:
    return int(getattr(lib.Arch, arch.upper()))


def syscall_number(name: str, arch: str) -> int:
    """The call's number on `arch` (x86_64, aarch64), from libseccomp's tables; ValueError if it has none."""
    lib = _libseccomp()
    if arch not in ARCHES:
        raise ValueError(f"unsupported architecture {arch!r}; expected one of {', '.join(ARCHES)}")
    nr = int(lib.resolve_syscall(_arch_token(lib, arch), name))
    if nr < 0:
        raise ValueError(f"{name} is not a system call on {arch}")
    return nr


def _resolve(lib: ModuleType, name: str) -> int:
    # Native numbering (libseccomp translates it per architecture); a pseudo-call number (< -1) is fine:
    # libseccomp leaves it out on architectures without the call.
    nr = int(lib.resolve_syscall(lib.Arch.NATIVE, name))
    if nr == _NO_SUCH_NAME:
        raise SeccompUnavailableError(f"this libseccomp does not know the system call {name}; 2.5.2 or newer is needed")
    return nr


def _build(lib: ModuleType) -> bytes:
    eperm, enosys = lib.ERRNO(errno.EPERM), lib.ERRNO(errno.ENOSYS)
    syscalls = lib.SyscallFilter(lib.ALLOW)
    syscalls.set_attr(lib.Attr.ACT_BADARCH, eperm)
    for arch in ARCHES:
        if not syscalls.exist_arch(_arch_token(lib, arch)):
            syscalls.add_arch(_arch_token(lib, arch))
    for name in DENIED:
        syscalls.add_rule(eperm, _resolve(lib, name))
    clone = _resolve(lib, "clone")
    for flag in CLONE_NEW_FLAGS:  # rules on one call are OR-ed: any namespace flag denies
        syscalls.add_rule(eperm, clone, lib.Arg(0, lib.MASKED_EQ, flag, flag))
    syscalls.add_rule(enosys, _resolve(lib, "clone3"))
    with tempfile.TemporaryFile() as out:
        syscalls.export_bpf(out)
        out.seek(0)
        return out.read()


@functools.cache
def _program() -> bytes:
    lib = _libseccomp()
    try:
        return _build(lib)
    except OSError as exc:  # a libseccomp call failed (e.g. an architecture this build lacks)
        raise SeccompUnavailableError(f"libseccomp could not build the filter: {exc}") from None


def program() -> bytes:
    """The filter as bwrap's `--seccomp FD` reads it: packed `struct sock_filter`s, nothing else.

    Built once per process (an error is not cached, so a fixed installation is picked up on the next call).
    """
    return _program()
