"""The run_python sandbox's seccomp program (libseccomp), run through a small classic-BPF interpreter.

`fixtures/seccomp_handbuilt.hex` is the program the sandbox used before libseccomp (the hand-assembled
filter of tool_svc/seccomp.py up to this change, one `struct sock_filter` per line, little-endian). It is
the oracle: libseccomp's program must give the same verdict on every case below but one, syscall -1 on
x86_64 (see test_libseccomp_agrees_with_the_hand_built_filter).
"""

from __future__ import annotations

import asyncio
import ctypes.util
import errno
import itertools
import os
import random
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentmesh.config import ToolSandboxSettings
from agentmesh.errors import ErrorCode
from tool_svc import seccomp
from tool_svc.sandbox import Sandbox, SandboxUnavailableError
from tool_svc.seccomp import CLONE_NAMESPACES, CLONE_NEW_FLAGS, DENIED, SeccompUnavailableError, syscall_number

SOCK_FILTER = struct.Struct("<HBBI")
# include/uapi/linux/bpf_common.h, filter.h
LD_W_ABS, ALU_AND_K, ALU_OR_K, RET_K = 0x20, 0x54, 0x44, 0x06
JA, JEQ_K, JGT_K, JGE_K, JSET_K = 0x05, 0x15, 0x25, 0x35, 0x45
# include/uapi/linux/seccomp.h
ALLOW = 0x7FFF0000
EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
# include/uapi/linux/audit.h
AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64 = 0xC000003E, 0xC00000B7
AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH_RISCV64 = 0x40000003, 0x40000028, 0xC00000F3
ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
X32_SYSCALL_BIT = 0x40000000
MINUS_ONE = 0xFFFFFFFF
# clone flags of pthread_create / fork (SIGCHLD = 17): no new namespace.
THREAD_FLAGS = 0x003D0F00
FORK_FLAGS = 0x01200011
# Kernel numbers (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h), written
# out so libseccomp's tables are checked too: read, write, openat, mmap, execve, exit_group, wait4.
ORDINARY = {"x86_64": [0, 1, 257, 9, 59, 231, 61], "aarch64": [63, 64, 56, 222, 221, 94, 260]}
KERNEL = {
    "x86_64": {"ptrace": 101, "unshare": 272, "setns": 308, "mount": 165, "bpf": 321, "clone": 56, "clone3": 435},
    "aarch64": {"ptrace": 117, "unshare": 97, "setns": 268, "mount": 40, "bpf": 280, "clone": 220, "clone3": 435},
}

HANDBUILT = bytes.fromhex((Path(__file__).parent / "fixtures" / "seccomp_handbuilt.hex").read_text().replace("\n", ""))
PROGRAM = seccomp.program()


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    assert program and len(program) % SOCK_FILTER.size == 0
    return [SOCK_FILTER.unpack_from(program, i) for i in range(0, len(program), SOCK_FILTER.size)]


def evaluate(insns: list[tuple[int, int, int, int]], arch: int, nr: int, *args: int) -> int:
    """What the kernel's classic-BPF interpreter returns for one call (struct seccomp_data, little-endian)."""
    full = [*args, *[0] * (6 - len(args))]
    data = struct.pack("<IIQ6Q", nr & 0xFFFFFFFF, arch, 0x7F0000001000, *(a & (2**64 - 1) for a in full))
    pc, acc = 0, 0
    while True:
        assert 0 <= pc < len(insns), f"ran off the program at {pc}"
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == LD_W_ABS:
            assert k % 4 == 0 and k + 4 <= len(data), k
            (acc,) = struct.unpack_from("<I", data, k)
        elif code == ALU_AND_K:
            acc &= k
        elif code == ALU_OR_K:
            acc |= k
        elif code == JA:
            pc += k
        elif code in (JEQ_K, JGT_K, JGE_K, JSET_K):
            taken = {JEQ_K: acc == k, JGT_K: acc > k, JGE_K: acc >= k, JSET_K: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == RET_K:
            return k
        else:
            raise AssertionError(f"opcode {code:#x} at {pc - 1} is outside this interpreter")


def cases() -> Iterator[tuple[int, int, tuple[int, ...]]]:
    """(arch, nr, args): every number below 600 and its x32 twin on each architecture, clone's flags one
    by one and combined (with high words set), odd numbers, and random arguments everywhere."""
    rng = random.Random(47)
    arches = [AUDIT_ARCH_X86_64, AUDIT_ARCH_AARCH64, AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH_RISCV64, 0, MINUS_ONE]
    odd = [MINUS_ONE, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 4294957201, 4294957202, 1024, 0xFFFF, X32_SYSCALL_BIT - 1]
    clone_args = [0, THREAD_FLAGS, FORK_FLAGS, 0x80, CLONE_NAMESPACES, MINUS_ONE, 1 << 32, 2**64 - 1 - CLONE_NAMESPACES]
    for flag in CLONE_NEW_FLAGS:
        clone_args += [flag, flag | FORK_FLAGS, flag | THREAD_FLAGS, (0xDEAD << 32) | flag, flag << 32]
    for arch in arches:
        numbers = [*range(600), *(X32_SYSCALL_BIT | n for n in range(0, 600, 7)), *odd]
        for nr in numbers:
            yield arch, nr, ()
            yield arch, nr, tuple(rng.getrandbits(64) for _ in range(6))
        for nr, arg0 in itertools.product((56, 220), clone_args):
            yield arch, nr, (arg0, rng.getrandbits(64))


def test_libseccomp_agrees_with_the_hand_built_filter() -> None:
    new, old = decode(PROGRAM), decode(HANDBUILT)
    verdicts = {ALLOW: 0, EPERM: 0, ENOSYS: 0}
    differ = []
    total = 0
    for arch, nr, args in cases():
        total += 1
        ours, theirs = evaluate(new, arch, nr, *args), evaluate(old, arch, nr, *args)
        verdicts[theirs] += 1
        if ours != theirs:
            differ.append((arch, nr, ours, theirs))
    assert total > 6000 and all(verdicts.values()), (total, verdicts)
    # The one difference: libseccomp lets syscall -1 through on x86_64 (a tracer's way to skip a call,
    # seccomp(2)), where the hand-built filter's x32 test caught it. The kernel answers -1 with ENOSYS.
    assert {(arch, nr, ours, theirs) for arch, nr, ours, theirs in differ} == {
        (AUDIT_ARCH_X86_64, MINUS_ONE, ALLOW, EPERM)
    }, differ[:20]
    named = {"ALLOW": verdicts[ALLOW], "EPERM": verdicts[EPERM], "ENOSYS": verdicts[ENOSYS]}
    print(f"{total} cases, {len(differ)} differ (syscall -1 on x86_64); hand-built verdicts {named}")


def test_the_program_is_well_formed() -> None:
    insns = decode(PROGRAM)
    assert len(PROGRAM) <= 4096 and len(insns) <= 4096  # one pipe page; BPF_MAXINSNS
    assert insns[0] == (LD_W_ABS, 0, 0, 4)  # seccomp_data.arch first
    returns = {k for code, _, _, k in insns if code == RET_K}
    assert returns == {ALLOW, EPERM, ENOSYS}, sorted(map(hex, returns))
    assert seccomp.program() == PROGRAM


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_libseccomp_numbers_are_the_kernels(arch: str) -> None:
    for name, nr in KERNEL[arch].items():
        assert syscall_number(name, arch) == nr, name
    absent = {"iopl", "ioperm"} if arch == "aarch64" else set()
    numbers = [syscall_number(name, arch) for name in DENIED if name not in absent]
    assert len(set(numbers)) == len(numbers)
    with pytest.raises(ValueError, match="not a system call on aarch64"):
        syscall_number("iopl", "aarch64")
    with pytest.raises(ValueError, match="unsupported architecture"):
        syscall_number("ptrace", "riscv64")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_denied_calls_answer_eperm_and_ordinary_ones_are_allowed(arch: str) -> None:
    insns = decode(PROGRAM)
    denied = 0
    for name in DENIED:
        try:
            nr = syscall_number(name, arch)
        except ValueError:
            assert arch == "aarch64" and name in ("iopl", "ioperm")
            continue
        assert evaluate(insns, ARCH[arch], nr, 0xFFFF) == EPERM, name
        denied += 1
    assert denied == len(DENIED) - (2 if arch == "aarch64" else 0)
    for nr in ORDINARY[arch]:
        assert evaluate(insns, ARCH[arch], nr) == ALLOW, nr


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_clone_may_not_make_namespaces_and_clone3_is_unknown(arch: str) -> None:
    insns, clone = decode(PROGRAM), KERNEL[arch]["clone"]
    assert evaluate(insns, ARCH[arch], clone, THREAD_FLAGS) == ALLOW
    assert evaluate(insns, ARCH[arch], clone, FORK_FLAGS) == ALLOW
    assert evaluate(insns, ARCH[arch], clone, FORK_FLAGS | 0x10000000) == EPERM  # CLONE_NEWUSER
    assert evaluate(insns, ARCH[arch], clone, 0x40000000 | 17) == EPERM  # CLONE_NEWNET
    assert evaluate(insns, ARCH[arch], clone, (1 << 40) | 0x20000000) == EPERM  # high word is no way round
    assert evaluate(insns, ARCH[arch], KERNEL[arch]["clone3"]) == ENOSYS


def test_the_x32_abi_and_foreign_architectures_are_denied() -> None:
    insns = decode(PROGRAM)
    assert evaluate(insns, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 0) == EPERM  # x32 read
    assert evaluate(insns, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 521) == EPERM  # x32 ptrace
    for arch in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH_RISCV64, 0):
        assert evaluate(insns, arch, 26) == EPERM  # i386 ptrace, arm ptrace is 26 as well
        assert evaluate(insns, arch, 3) == EPERM


@pytest.fixture
def no_cached_program() -> Iterator[None]:
    seccomp._program.cache_clear()
    yield
    seccomp._program.cache_clear()


@pytest.mark.usefixtures("no_cached_program")
def test_without_the_binding_the_filter_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # `import pyseccomp` raises ImportError
    with pytest.raises(SeccompUnavailableError, match="pyseccomp package is not installed"):
        seccomp.program()


@pytest.mark.usefixtures("no_cached_program")
def test_without_the_shared_library_the_filter_is_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a machine without libseccomp.so.2 looks like to the binding: the loader finds no library.
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None if name == "seccomp" else real(name))
    monkeypatch.delitem(sys.modules, "pyseccomp")
    with pytest.raises(SeccompUnavailableError, match=r"libseccomp cannot be loaded .*install libseccomp2"):
        seccomp.program()
    monkeypatch.undo()
    assert seccomp.program() == PROGRAM  # the error was not cached


@pytest.mark.usefixtures("no_cached_program")
def test_a_library_that_will_not_load_is_a_typed_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    broken = tmp_path / "libseccomp.so.2"
    broken.write_bytes(b"not an ELF file")
    real = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: str(broken) if name == "seccomp" else real(name))
    monkeypatch.delitem(sys.modules, "pyseccomp")
    with pytest.raises(SeccompUnavailableError, match="libseccomp cannot be loaded"):
        seccomp.program()


@pytest.mark.usefixtures("no_cached_program")
def test_a_call_libseccomp_does_not_know_is_a_typed_error_not_a_hole(monkeypatch: pytest.MonkeyPatch) -> None:
    # An older libseccomp lacks newer names (mount_setattr came in 2.5.2): refuse rather than leave it out.
    monkeypatch.setattr(seccomp, "DENIED", (*DENIED, "no_such_call"))
    with pytest.raises(SeccompUnavailableError, match="does not know the system call no_such_call"):
        seccomp.program()


@pytest.mark.usefixtures("no_cached_program")
async def test_the_sandbox_fails_closed_without_libseccomp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyseccomp", None)
    spawned: list[object] = []

    async def spawn(*args: object, **kwargs: object) -> None:
        spawned.append(args)
        raise AssertionError("a process was started without the seccomp filter")

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn)
    fds = len(os.listdir("/proc/self/fd"))
    marker = tmp_path / "ran"
    with pytest.raises(SandboxUnavailableError) as caught:
        await Sandbox(ToolSandboxSettings()).run(f"open({str(marker)!r}, 'w').write('x')")
    assert caught.value.code == ErrorCode.SANDBOX_UNAVAILABLE
    assert "no seccomp filter: the pyseccomp package is not installed" in caught.value.message
    assert not spawned and not marker.exists()
    assert len(os.listdir("/proc/self/fd")) == fds  # no pipe left open


def test_system_call_zero_is_a_number_not_an_error_and_an_unsupported_architecture_is_named() -> None:
    # Number 0 is a real call (read on x86_64, io_setup on aarch64): only negative numbers mean "none".
    assert syscall_number("read", "x86_64") == 0
    assert syscall_number("io_setup", "aarch64") == 0
    with pytest.raises(ValueError) as info:
        syscall_number("ptrace", "riscv64")
    assert str(info.value) == "unsupported architecture 'riscv64'; expected one of x86_64, aarch64"
