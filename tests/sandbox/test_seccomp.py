"""The seccomp program, run through a tiny classic-BPF interpreter: which calls it refuses."""

from __future__ import annotations

import errno

from honing.sandbox import zygote as z

DENY = z.SECCOMP_RET_ERRNO | errno.EPERM
FOREIGN = z.SECCOMP_RET_ERRNO | errno.ENOSYS


def run_filter(program: list[tuple[int, int, int, int]], arch: int, nr: int) -> int:
    data = {0: nr, 4: arch}  # struct seccomp_data: nr at 0, arch at 4
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == z.BPF_LD_W_ABS:
            acc = data[k]
        elif code == z.BPF_JEQ_K:
            pc += jt if acc == k else jf
        elif code == z.BPF_JGE_K:
            pc += jt if acc >= k else jf
        elif code == z.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


def test_denied_calls_get_eperm_and_others_pass() -> None:
    program = z.seccomp_program({29: "shmget", 321: "bpf"})
    assert run_filter(program, z.AUDIT_ARCH_X86_64, 29) == DENY
    assert run_filter(program, z.AUDIT_ARCH_X86_64, 321) == DENY
    for allowed in (0, 1, 28, 30, 57, 320, 322):
        assert run_filter(program, z.AUDIT_ARCH_X86_64, allowed) == z.SECCOMP_RET_ALLOW


def test_x32_and_foreign_abis_are_refused() -> None:
    program = z.seccomp_program({29: "shmget"})
    assert run_filter(program, z.AUDIT_ARCH_X86_64, z.X32_SYSCALL_BIT + 1) == DENY
    i386 = 0x40000003
    assert run_filter(program, i386, 1) == FOREIGN


def test_the_shipped_list_is_denied_in_full() -> None:
    program = z.seccomp_program(z.DENIED_X86_64)
    assert all(run_filter(program, z.AUDIT_ARCH_X86_64, nr) == DENY for nr in z.DENIED_X86_64)
    assert {"shmget", "semget", "msgget", "ptrace", "bpf"} <= set(z.DENIED_X86_64.values())
