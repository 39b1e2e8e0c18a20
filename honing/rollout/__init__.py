"""The rollout layer: tasks in, token-faithful trajectories out.

    engines/        the Engine contract; hf (local, continuous batching), openai, scripted
    models          the embedded default model and local model directories
    chat            chat-template rendering by deltas, tool-call parsing
    agent           run_episode: one episode, token for token, with nested deadlines
    slots           priority-aware slot semaphores
    scheduler       many episodes in flight: groups, priorities, retries, staleness
    elastic         worker pools (sandbox cells, Ray actors) that grow and shrink with the queue
    simclock        an asyncio loop on a virtual clock (simulations: benchmarks/cluster_sim.py)
    offline         `honing rollout`: a task set through the scheduler into the store
    config          RolloutConfig: the settings behind `honing rollout`
    replay          a stored trajectory's actions through the current environment (re-scoring)
    template_check  `honing check-template`
    ray/            engine and env workers as Ray actors for the same scheduler

Not covered: optimisation (honing.rl, honing.trainer), the records and their store (honing.store).
"""

from honing.rollout.agent import AgentConfig, Deadlines, Gate, InfraFailure, run_episode
from honing.rollout.scheduler import Scheduler, SchedulerConfig

__all__ = [
    "AgentConfig",
    "Deadlines",
    "Gate",
    "InfraFailure",
    "Scheduler",
    "SchedulerConfig",
    "run_episode",
]
