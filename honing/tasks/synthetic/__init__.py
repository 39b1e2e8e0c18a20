"""What the domains' seeded generators share (each domain's generator is its own:
`honing.domains.<name>.generate`).

    common   drawing `n` distinct tasks from families in turn (`generate`, `generate_phrased`),
             the tags and metadata every task carries, the held-out wordings (`Wording`,
             `phrase`, `UNSEEN_TAG`)
    (`as_taskset`, typed tasks as a validated set, is `honing.tasks.load`'s; re-exported here)

The same `(n, seed)` gives the same tasks with the same ids on any machine; every task has a
reference whose expected values are computed by its generator, independently of the
environments. docs/tasks.md ("The modules in detail") has the rest.
"""

from honing.tasks.load import as_taskset
from honing.tasks.synthetic.common import (
    TWO_DIGITS,
    UNSEEN_SHARE,
    UNSEEN_TAG,
    Phrasings,
)

__all__ = [
    "TWO_DIGITS",
    "UNSEEN_SHARE",
    "UNSEEN_TAG",
    "Phrasings",
    "as_taskset",
]
