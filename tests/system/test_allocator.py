"""The allocator a training command restarts under (electra.system.allocator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from electra.system import allocator

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def no_tcmalloc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)


def test_auto_prefers_tcmalloc_then_tuned_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "is_glibc", lambda: True)
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: "/usr/lib/libtcmalloc_minimal.so.4")
    assert allocator.choose({}) == "tcmalloc"
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: None)
    assert allocator.choose({}) == "glibc-tuned"
    assert allocator.choose({"ELECTRA_NO_TCMALLOC": "1"}) == "default"  # the older switch
    monkeypatch.setattr(allocator, "is_glibc", lambda: False)  # musl, macOS: nothing to tune
    assert allocator.choose({}) == "default"


def test_the_users_choice_is_checked(no_tcmalloc: None) -> None:
    assert allocator.choose({allocator.ENV: "default"}) == "default"
    with pytest.raises(allocator.AllocatorError, match="ELECTRA_ALLOCATOR='jemalloc'"):
        allocator.choose({allocator.ENV: "jemalloc"})
    with pytest.raises(allocator.AllocatorError, match="libtcmalloc-minimal4"):
        allocator.choose({allocator.ENV: "tcmalloc"})


def test_tuned_environment_keeps_the_users_own_tunables() -> None:
    env = allocator.environment(
        "glibc-tuned", {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0:glibc.cpu.x=1", "A": "b"}
    )
    items = dict(i.split("=", 1) for i in env["GLIBC_TUNABLES"].split(":"))
    assert items["glibc.malloc.hugetlb"] == "0"  # the user's value wins
    assert items["glibc.cpu.x"] == "1"
    assert items["glibc.malloc.mmap_threshold"] == str(1 << 30)
    assert items["glibc.malloc.trim_threshold"] == str(1 << 32)  # both: see the module
    assert env["A"] == "b" and env["ELECTRA_ALLOCATOR_SET"] == "glibc-tuned"


def test_tcmalloc_is_preloaded_before_other_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "find_tcmalloc", lambda: "/x/libtcmalloc_minimal.so.4")
    env = allocator.environment("tcmalloc", {"LD_PRELOAD": "/y/other.so"})
    assert env["LD_PRELOAD"] == "/x/libtcmalloc_minimal.so.4:/y/other.so"


# What the restarted process sees: its allocator, and whether a 64 MiB block came
# from the heap (glibc counts mmap'ed blocks in mallinfo2().hblks).
CHILD = """
import ctypes, os
from electra import allocator
libc = ctypes.CDLL("libc.so.6")
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
before = libc.mallinfo2().hblks
p = libc.malloc(64 << 20)
mmapped = libc.mallinfo2().hblks - before
libc.free(ctypes.c_void_p(p))
print(allocator.current(), os.getpid(), mmapped)
"""


@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc tunables")
@pytest.mark.parametrize("choice", ["glibc-tuned", "default"])
def test_restart_applies_the_tunables(choice: str) -> None:
    # Restarts into CHILD, or (nothing to change) runs CHILD in this process.
    launcher = f"from electra import allocator; allocator.reexec_for_speed(['-c', {CHILD!r}])\n"
    launcher += CHILD
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELECTRA_", "GLIBC_"))}
    env.update(PYTHONPATH=str(SRC), ELECTRA_ALLOCATOR=choice)
    env.pop("LD_PRELOAD", None)
    out = subprocess.run(
        [sys.executable, "-c", launcher], env=env, capture_output=True, text=True, check=True
    )
    name, _pid, mmapped = out.stdout.split()
    assert name == choice
    # Untuned glibc mmaps a 64 MiB block (and unmaps it on free: faults again next
    # step); tuned, it comes from the heap and stays there.
    assert int(mmapped) == (0 if choice == "glibc-tuned" else 1)


def test_training_commands_restart_and_others_do_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from electra import cli

    calls: list[list[str]] = []
    monkeypatch.setattr(cli, "reexec_for_speed", lambda args: calls.append(list(args)))
    monkeypatch.setattr(sys, "argv", ["electra", "flops", "--preset", "small"])
    assert cli.main() == 0  # argv from the shell, like the console script
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["electra", "pretrain", "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    assert calls == [["-m", "electra.cli", "pretrain", "--help"]]


def test_an_unknown_allocator_is_a_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from electra import cli

    monkeypatch.delenv("ELECTRA_ALLOCATOR_SET", raising=False)
    monkeypatch.setenv("ELECTRA_ALLOCATOR", "bogus")
    monkeypatch.setattr(sys, "argv", ["electra", "finetune", "--help"])
    assert cli.main() == 2
    assert "electra finetune: error: ELECTRA_ALLOCATOR='bogus'" in capsys.readouterr().err
