"""The seccomp filter `run_python`'s sandbox runs under (`bwrap --seccomp FD`, docs/architecture.md §5).

A classic BPF program (an array of `struct sock_filter`, which bwrap reads from the fd to its end and
installs with `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)` just before it executes the interpreter),
assembled here in pure Python so a fresh machine needs no libseccomp. It denies with EPERM the system
calls a Python snippet never needs and that widen the kernel's attack surface or the way out of the
namespaces: debugging other processes, mounting, keyrings, eBPF, new namespaces, modules, kexec,
perf, userfaultfd, reboot, swap, chroot/pivot_root, port I/O and cross-process memory access.

    * `clone` with a CLONE_NEW* flag is denied too (it is `unshare` by another name); `clone3` answers
      ENOSYS, as its flags sit behind a pointer the filter cannot read, and glibc then falls back to
      `clone` (what Flatpak and container runtimes do).
    * x86_64: any x32-ABI call (number with bit 30, __X32_SYSCALL_BIT, set) is denied, so the x32
      numbering cannot reach a denied call under another number.
    * Any other architecture in `seccomp_data.arch` (i386 through `int 0x80` on x86_64, arm32 compat
      on aarch64) has every call denied: its numbers differ and the sandbox never runs such code.

Syscall numbers come from the kernel's tables: arch/x86/entry/syscalls/syscall_64.tbl (x86_64, "common"
and "64" entries) and include/uapi/asm-generic/unistd.h (aarch64), checked against Linux 6.1's
uapi headers (asm/unistd_64.h, asm-generic/unistd.h). `seccomp_data` and the SECCOMP_RET_* values come
from include/uapi/linux/seccomp.h, the BPF opcodes from include/uapi/linux/bpf_common.h, and the
AUDIT_ARCH_* values from include/uapi/linux/audit.h.
"""

from __future__ import annotations

import errno
import struct
from dataclasses import dataclass

# include/uapi/linux/bpf_common.h
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_ABS, BPF_K = 0x00, 0x20, 0x00
BPF_JEQ, BPF_JGE, BPF_JSET = 0x10, 0x30, 0x40

# include/uapi/linux/seccomp.h
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_DATA = 0x0000FFFF
# struct seccomp_data { int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]; }
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # low 32 bits of args[0] on a little-endian machine (both architectures below)

# include/uapi/linux/audit.h: EM_* | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000  # arch/x86/include/uapi/asm/unistd.h

# include/uapi/linux/sched.h. CLONE_NEWTIME (0x80) is left out: for clone() that bit is part of the exit
# signal (CSIGNAL); the kernel only honours it through clone3() and unshare(), both denied.
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

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

SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101,
        "personality": 135,
        "pivot_root": 155,
        "chroot": 161,
        "mount": 165,
        "umount2": 166,
        "swapon": 167,
        "swapoff": 168,
        "reboot": 169,
        "iopl": 172,
        "ioperm": 173,
        "init_module": 175,
        "delete_module": 176,
        "kexec_load": 246,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "unshare": 272,
        "perf_event_open": 298,
        "setns": 308,
        "process_vm_readv": 310,
        "process_vm_writev": 311,
        "finit_module": 313,
        "kexec_file_load": 320,
        "bpf": 321,
        "userfaultfd": 323,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "clone": 56,
        "clone3": 435,
    },
    "aarch64": {
        "umount2": 39,
        "mount": 40,
        "pivot_root": 41,
        "chroot": 51,
        "personality": 92,
        "unshare": 97,
        "kexec_load": 104,
        "init_module": 105,
        "delete_module": 106,
        "ptrace": 117,
        "reboot": 142,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "swapon": 224,
        "swapoff": 225,
        "perf_event_open": 241,
        "setns": 268,
        "process_vm_readv": 270,
        "process_vm_writev": 271,
        "finit_module": 273,
        "bpf": 280,
        "userfaultfd": 282,
        "kexec_file_load": 294,
        "open_tree": 428,
        "move_mount": 429,
        "fsopen": 430,
        "fsconfig": 431,
        "fsmount": 432,
        "fspick": 433,
        "mount_setattr": 442,
        "clone": 220,
        "clone3": 435,
    },
}

AUDIT_ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}

# struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; } in the machine's byte order.
SOCK_FILTER = struct.Struct("=HBBI")
DENY = SECCOMP_RET_ERRNO | (errno.EPERM & SECCOMP_RET_DATA)
NO_SUCH_CALL = SECCOMP_RET_ERRNO | (errno.ENOSYS & SECCOMP_RET_DATA)


@dataclass(frozen=True)
class Insn:
    code: int
    jt: int | str = 0
    jf: int | str = 0
    k: int = 0
    label: str | None = None
    """Names this instruction as a jump target."""


def _load(offset: int, label: str | None = None) -> Insn:
    return Insn(BPF_LD | BPF_W | BPF_ABS, k=offset, label=label)


def _jump(op: int, k: int, jt: int | str = 0, jf: int | str = 0, label: str | None = None) -> Insn:
    return Insn(BPF_JMP | op | BPF_K, jt, jf, k, label)


def _ret(k: int, label: str | None = None) -> Insn:
    return Insn(BPF_RET | BPF_K, k=k, label=label)


def _arch_block(arch: str, next_label: str) -> list[Insn]:
    table = SYSCALLS[arch]
    denied = sorted(table[name] for name in DENIED if name in table)
    block = [_jump(BPF_JEQ, AUDIT_ARCH[arch], 0, next_label, label=f"{arch}"), _load(OFFSET_NR)]
    if arch == "x86_64":
        block.append(_jump(BPF_JGE, X32_SYSCALL_BIT, f"{arch}.deny", 0))
    block += [
        _jump(BPF_JEQ, table["clone"], f"{arch}.clone", 0),
        _jump(BPF_JEQ, table["clone3"], f"{arch}.enosys", 0),
        *(_jump(BPF_JEQ, nr, f"{arch}.deny", 0) for nr in denied),
        _ret(SECCOMP_RET_ALLOW),
        _load(OFFSET_ARG0_LOW, label=f"{arch}.clone"),
        _jump(BPF_JSET, CLONE_NAMESPACES, f"{arch}.deny", 0),
        _ret(SECCOMP_RET_ALLOW),
        _ret(NO_SUCH_CALL, label=f"{arch}.enosys"),
        _ret(DENY, label=f"{arch}.deny"),
    ]
    return block


def assemble(insns: list[Insn]) -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) tuples with labels resolved to the forward offsets BPF jumps take."""
    where = {insn.label: i for i, insn in enumerate(insns) if insn.label is not None}
    if len(where) != sum(1 for insn in insns if insn.label is not None):
        raise ValueError("a label is used twice")
    out = []
    for i, insn in enumerate(insns):
        offsets = []
        for target in (insn.jt, insn.jf):
            offset = where[target] - i - 1 if isinstance(target, str) else target
            if not 0 <= offset <= 255:
                raise ValueError(f"instruction {i}: jump offset {offset} out of range")
            offsets.append(offset)
        out.append((insn.code, offsets[0], offsets[1], insn.k & 0xFFFFFFFF))
    return out


def instructions() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k): architecture check, then per-architecture denials."""
    arches = list(SYSCALLS)
    insns = [_load(OFFSET_ARCH)]
    for arch, following in zip(arches, [*arches[1:], "other"], strict=True):
        insns += _arch_block(arch, following)
    insns.append(_ret(DENY, label="other"))
    return assemble(insns)


def program() -> bytes:
    """The filter as bwrap's `--seccomp FD` reads it: packed `struct sock_filter`s, nothing else."""
    return b"".join(SOCK_FILTER.pack(*insn) for insn in instructions())
