"""honing: post-train language models with RL in real, verifiable environments.

The package is layered (see docs/architecture in ../shared/ARCHITECTURE.md): `sandbox` executes
untrusted code in isolation; later layers (tasks, envs, rollout, rl, trainer, eval, observe,
export) build on it. `honing.cli` is the only module that wires layers together for a command.
"""

__version__ = "0.1.0"
