"""Infrastructure errors cross process boundaries (Ray workers) as themselves."""

from __future__ import annotations

import pickle

from honing.errors import DeadlineExceeded
from honing.records import Trajectory
from honing.rollout.agent import InfraFailure


def test_infrastructure_errors_survive_pickling() -> None:
    deadline = pickle.loads(pickle.dumps(DeadlineExceeded("step", 2.5)))
    assert isinstance(deadline, DeadlineExceeded)
    assert (deadline.stage, deadline.seconds, str(deadline)) == (
        "step",
        2.5,
        "step deadline of 2.5s exceeded",
    )
    partial = Trajectory(task_id="t", domain="math")
    failure = pickle.loads(pickle.dumps(InfraFailure("generate", "EngineError: down", partial)))
    assert isinstance(failure, InfraFailure)
    assert (failure.stage, failure.cause) == ("generate", "EngineError: down")
    assert failure.trajectory == partial
