"""benchmarks/sandbox_soak.py: its last line, its deck, its host sampler (does it see a leaked
process, fd and file?), and a 3-second soak of the real pool whose counters must be sane:
executions done, no infra error or wrong outcome, and no fd, process, temp-dir or cgroup growth.
No timing is asserted."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from benchmark_scripts import load_benchmark

LAST_LINE = re.compile(
    r"soak: (\d+) execs in ([\d.]+) min; ([\d.]+) exec/s; fds ([+-]\d+); procs ([+-]\d+); "
    r"rss ([+-]\d+\.\d) MB; tmp ([+-]\d+\.\d) MB; infra errors (\d+)"
)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("sandbox_soak")


def test_the_last_line(bench: ModuleType) -> None:
    delta = bench.Sample(fds=0, procs=-1, rss_bytes=3 * 1024 * 1024 // 2, tmp_bytes=0)
    line = bench.last_line(1200, 0.1, 6.0, delta, 0)
    assert line == (
        "soak: 1200 execs in 0.1 min; 200.0 exec/s; fds +0; procs -1; rss +1.5 MB; "
        "tmp +0.0 MB; infra errors 0"
    )
    assert LAST_LINE.fullmatch(line)


def test_the_deck_holds_the_mix_in_proportion(bench: ModuleType) -> None:
    deck = bench.deck(seed=1)
    first = [next(deck) for _ in range(1000)]
    assert {name: first.count(name) for name in bench.MIX} == {
        name: weight for name, (weight, _) in bench.MIX.items()
    }


def test_the_sampler_sees_a_leaked_process_fd_and_file(bench: ModuleType, tmp_path: Path) -> None:
    before = bench.sample(tmp_path)
    child = subprocess.Popen(
        ["sleep", "60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    leaked = open(tmp_path / "blob", "wb")  # noqa: SIM115 - held open on purpose
    try:
        leaked.write(b"x" * (2 << 20))
        leaked.flush()
        grown = bench.sample(tmp_path).minus(before)
    finally:
        leaked.close()
        child.kill()
        child.wait()
    assert grown.procs == 1
    assert grown.fds == 1 + 3  # the file here, and the child's stdin, stdout and stderr
    assert grown.tmp_bytes >= 2 << 20
    (tmp_path / "blob").unlink()
    after = bench.sample(tmp_path).minus(before)
    assert (after.procs, after.fds, after.tmp_bytes) == (0, 0, 0)


def test_a_short_soak_has_sane_counters_and_leaks_nothing(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    code = bench.main(["--minutes", "0.05", "--every", "1", "--warmup", "0.5"])
    lines = capsys.readouterr().out.strip().splitlines()
    match = LAST_LINE.fullmatch(lines[-1])
    assert match, lines[-1]
    execs, minutes, rate = int(match[1]), float(match[2]), float(match[3])
    fds, procs, tmp, infra = int(match[4]), int(match[5]), float(match[7]), int(match[8])
    assert minutes == 0.05
    assert execs > 0 and 0 < rate <= execs / (minutes * 60)  # the drain only adds time
    assert (fds, procs, tmp, infra) == (0, 0, 0.0, 0), lines[-1]
    [end] = [line for line in lines if line.startswith("end: ")]
    assert re.search(r"; cgroups \d+ \(\+0\)$", end), end  # no replaced cell's group is left
    problems = [line for line in lines if line.startswith(("wrong outcome (", "infra error ("))]
    assert not problems, problems
    assert "wrong outcomes 0 {}; infra errors 0 {}" in lines
    assert any(line.startswith("[") and "exec/s" in line for line in lines)  # progress lines
    for name in bench.MIX:  # one line per kind
        assert any(line.split()[:1] == [name] for line in lines), name
    assert code == 0
