"""The seccomp program of the run_python sandbox, run through a small classic-BPF interpreter."""

from __future__ import annotations

import errno
import struct

import pytest

from tool_svc import seccomp
from tool_svc.seccomp import (
    AUDIT_ARCH_AARCH64,
    AUDIT_ARCH_X86_64,
    BPF_ABS,
    BPF_JEQ,
    BPF_JGE,
    BPF_JMP,
    BPF_JSET,
    BPF_K,
    BPF_LD,
    BPF_RET,
    BPF_W,
    CLONE_NEWUSER,
    DENIED,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SOCK_FILTER,
    SYSCALLS,
    X32_SYSCALL_BIT,
    Insn,
    assemble,
)

EPERM = SECCOMP_RET_ERRNO | errno.EPERM
ENOSYS = SECCOMP_RET_ERRNO | errno.ENOSYS
LOAD = BPF_LD | BPF_W | BPF_ABS
JUMPS = {BPF_JMP | op | BPF_K for op in (BPF_JEQ, BPF_JGE, BPF_JSET)}
RET = BPF_RET | BPF_K
ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
AUDIT_ARCH_I386 = 0x40000003
AUDIT_ARCH_ARM = 0x40000028
# clone flags of pthread_create / fork (SIGCHLD = 17): no new namespace.
THREAD_FLAGS = 0x003D0F00
FORK_FLAGS = 0x01200011
# Calls every interpreter makes: read, write, openat, mmap, execve, exit_group, wait4.
ORDINARY = {
    "x86_64": [0, 1, 257, 9, 59, 231, 61],
    "aarch64": [63, 64, 56, 222, 221, 94, 260],
}


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    assert len(program) % SOCK_FILTER.size == 0
    return [SOCK_FILTER.unpack_from(program, i) for i in range(0, len(program), SOCK_FILTER.size)]


def evaluate(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the kernel's classic-BPF interpreter returns for one call (struct seccomp_data, LE)."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = decode(program)
    pc, acc = 0, 0
    for _ in range(len(insns)):
        code, jt, jf, k = insns[pc]
        if code == LOAD:
            assert k % 4 == 0 and k + 4 <= len(data)
            (acc,) = struct.unpack_from("<I", data, k)
            pc += 1
        elif code == BPF_JMP | BPF_JEQ | BPF_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == BPF_JMP | BPF_JGE | BPF_K:
            pc += 1 + (jt if acc >= k else jf)
        elif code == BPF_JMP | BPF_JSET | BPF_K:
            pc += 1 + (jt if acc & k else jf)
        elif code == RET:
            return int(k)
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")
    raise AssertionError("the program ran past its end")


PROGRAM = seccomp.program()


def test_the_program_is_well_formed() -> None:
    insns = decode(PROGRAM)
    assert 0 < len(insns) <= 4096  # BPF_MAXINSNS
    assert insns[0] == (LOAD, 0, 0, 4)  # seccomp_data.arch first
    assert insns[-1][0] == RET  # every path ends in a return
    for i, (code, jt, jf, k) in enumerate(insns):
        assert code in {LOAD, RET} | JUMPS, (i, code)
        if code in JUMPS:
            assert i + 1 + max(jt, jf) < len(insns), f"instruction {i} jumps past the end"
        else:
            assert jt == jf == 0
        if code == RET:
            assert k in (SECCOMP_RET_ALLOW, EPERM, ENOSYS), (i, hex(k))
        if code == LOAD:
            assert k in (0, 4, 16), (i, k)  # nr, arch, low word of args[0]
    assert seccomp.program() == PROGRAM  # deterministic


def test_every_denied_name_has_a_number_on_each_architecture() -> None:
    for arch, table in SYSCALLS.items():
        missing = {name for name in DENIED if name not in table}
        assert missing <= {"iopl", "ioperm"} and (arch == "aarch64" or not missing), (arch, missing)
        assert len(set(table.values())) == len(table), f"{arch}: a number appears twice"


@pytest.mark.parametrize("arch", list(SYSCALLS))
def test_denied_calls_answer_eperm_and_ordinary_ones_are_allowed(arch: str) -> None:
    table = SYSCALLS[arch]
    for name in DENIED:
        if name in table:
            assert evaluate(PROGRAM, ARCH[arch], table[name]) == EPERM, name
    for nr in ORDINARY[arch]:
        assert evaluate(PROGRAM, ARCH[arch], nr) == SECCOMP_RET_ALLOW, nr
    for name in ("ptrace", "unshare", "keyctl", "mount", "bpf", "setns"):
        assert table[name] in {table[n] for n in DENIED if n in table}


@pytest.mark.parametrize("arch", list(SYSCALLS))
def test_clone_may_not_make_namespaces_and_clone3_is_unknown(arch: str) -> None:
    clone = SYSCALLS[arch]["clone"]
    assert evaluate(PROGRAM, ARCH[arch], clone, THREAD_FLAGS) == SECCOMP_RET_ALLOW
    assert evaluate(PROGRAM, ARCH[arch], clone, FORK_FLAGS) == SECCOMP_RET_ALLOW
    assert evaluate(PROGRAM, ARCH[arch], clone, FORK_FLAGS | CLONE_NEWUSER) == EPERM
    assert evaluate(PROGRAM, ARCH[arch], clone, 0x40000000 | 17) == EPERM  # CLONE_NEWNET
    assert evaluate(PROGRAM, ARCH[arch], SYSCALLS[arch]["clone3"]) == ENOSYS


def test_the_x32_abi_and_foreign_architectures_are_denied() -> None:
    assert evaluate(PROGRAM, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 0) == EPERM  # x32 read
    assert evaluate(PROGRAM, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 521) == EPERM  # x32 ptrace
    assert evaluate(PROGRAM, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 101) == EPERM
    for arch in (AUDIT_ARCH_I386, AUDIT_ARCH_ARM, 0):
        assert evaluate(PROGRAM, arch, 26) == EPERM  # i386 ptrace, arm ptrace is 26 as well
        assert evaluate(PROGRAM, arch, 3) == EPERM


def test_the_assembler_resolves_labels_and_refuses_bad_jumps() -> None:
    ok = assemble([Insn(BPF_JMP | BPF_JEQ | BPF_K, "b", 0, 1), Insn(RET, k=0), Insn(RET, k=1, label="b")])
    assert ok[0] == (BPF_JMP | BPF_JEQ | BPF_K, 1, 0, 1)
    with pytest.raises(ValueError, match="out of range"):
        assemble([Insn(RET, label="a"), Insn(BPF_JMP | BPF_JEQ | BPF_K, "a", 0, 1)])  # backwards
    with pytest.raises(ValueError, match="twice"):
        assemble([Insn(RET, label="a"), Insn(RET, label="a")])
    far = [Insn(BPF_JMP | BPF_JEQ | BPF_K, "end", 0, 1), *[Insn(RET)] * 256, Insn(RET, label="end")]
    with pytest.raises(ValueError, match="out of range"):
        assemble(far)
