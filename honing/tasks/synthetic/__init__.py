"""Seeded synthetic task sets: where a small model is weak, but tools and feedback can help.

    code     generate_code_tasks(n, seed)          short functions checked by `assert` tests
    repair   generate_code_repair_tasks(n, seed)   a code family's function with one token broken;
                                                   phrasings="heldout" words about half as
                                                   training never does
    (the other domains' generators are theirs: `honing.domains.<name>.generate`)
    common   what the domains share: `generate`, tags and metadata, held-out wordings
    (`as_taskset`, typed tasks as a validated set, is `honing.tasks.load`'s)

The same `(n, seed)` gives the same tasks with the same ids on any machine; every task has a
reference whose expected values are computed here, independently of the environments (tasks do
not import `honing.envs`). docs/tasks.md ("The modules in detail") has the rest. Not covered:
checking the references (the tests run them through the real environments).
"""

from honing.tasks.load import as_taskset
from honing.tasks.synthetic.code import CODE_FAMILIES, WORDS, generate_code_tasks
from honing.tasks.synthetic.common import (
    TWO_DIGITS,
    UNSEEN_SHARE,
    UNSEEN_TAG,
    Phrasings,
)
from honing.tasks.synthetic.repair import generate_code_repair_tasks

__all__ = [
    "CODE_FAMILIES",
    "TWO_DIGITS",
    "UNSEEN_SHARE",
    "UNSEEN_TAG",
    "WORDS",
    "Phrasings",
    "as_taskset",
    "generate_code_repair_tasks",
    "generate_code_tasks",
]
