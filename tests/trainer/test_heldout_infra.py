"""An evaluation where more than a tenth of the episodes failed for infrastructure (an engine
that could not hold its KV cache, a sandbox that crashed) warns that its figure counts the
judged episodes only, with the most frequent cause; below that share, or with none, it says
nothing."""

from __future__ import annotations

from collections import Counter

from honing.envs import FailureReason, Observation, StepInfo, StepResult
from honing.envs.base import Action
from honing.eval.metrics import Episode, Step
from honing.trainer.heldout import _EvalProgress, infra_warning

OBS = Observation(text="state")


def episode(task: str, failure: FailureReason | None = None, detail: str = "",
            error: str = "") -> Episode:  # fmt: skip
    result = StepResult(observation=OBS, reward=0.0, components={"outcome": 0.0}, done=True,
                        info=StepInfo(failure=failure, detail=detail))  # fmt: skip
    return Episode(task, "tools", (), 0, (Step(OBS, Action(), result),), error=error)


def test_the_cause_comes_from_the_episode_error_or_its_infrastructure_step() -> None:
    assert episode("a", error="sandbox\n  crashed").infra_cause == "sandbox crashed"
    assert episode("b", FailureReason.SANDBOX_ERROR, "cell lost").infra_cause == "cell lost"
    assert episode("c", FailureReason.SANDBOX_ERROR).infra_cause == "sandbox_error"
    reason = episode("d", error="hf engine decode failed: " + "x" * 400).infra_cause
    assert reason.startswith("hf engine decode failed: xxx") and len(reason) == 200
    assert reason.endswith("...")


def test_an_evaluation_mostly_failed_for_infrastructure_warns_with_its_cause() -> None:
    progress = _EvalProgress("tools", 10)
    kv = "the KV cache would grow to 1024 positions for each of 128 slots"
    for i in range(3):
        progress(episode(f"k{i}", error=kv))
    progress(episode("s", FailureReason.SANDBOX_ERROR, "sandbox crashed"))
    for i in range(6):
        progress(episode(f"j{i}"))  # judged, failed
    assert progress.infra == 4 and len(progress.outcomes) == 6
    warning = infra_warning("held-out tools (warm start)", 10, progress.infra_reasons)
    assert warning is not None
    assert warning.startswith(
        "held-out tools (warm start): 4 of 10 episodes failed for infrastructure (most often, "
        f"3 of them: {kv}); its success counts the 6 judged episodes only"
    )


def test_a_few_infrastructure_failures_or_none_say_nothing() -> None:
    assert infra_warning("x", 10, Counter({"sandbox crashed": 1})) is None
    assert infra_warning("x", 0, Counter()) is None
    assert infra_warning("x", 10, Counter({"sandbox crashed": 2})) is not None
