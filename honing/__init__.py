"""honing: post-train language models with RL in real, verifiable environments.

The package is layered, each layer importing only those below it (docs/architecture.md, checked
by tests/test_architecture.py): records and config at the bottom, then observe and the store, the
sandbox, tasks, environments, rollout, evaluation, the trainer, export and the report; `honing.cli`
is the only module that wires layers together for a command.
"""

__version__ = "0.1.0"
