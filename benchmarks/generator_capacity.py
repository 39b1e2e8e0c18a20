"""How many held-out tasks each synthetic generator keeps once training has seen 512 of its tasks.

    .venv/bin/python benchmarks/generator_capacity.py [--train 512] [--heldout 256] [--need 128]

For every registered generator (`honing.tasks.domains.generators`), the quickstart's pattern: a
training source of `--train` tasks (seed 11) and a held-out source of `--heldout` tasks (seed 12,
loaded as a held-out set, so in its held-out phrasings), the held-out one cut by
`without_overlap` exactly as `heldout_sets` does. Reported: the held-out tasks kept, by
difficulty tag and how many are worded as training never is (`phrasing-unseen`), and last the
number of generators that keep at least `--need`. Generation only:
no sandbox, no reference checks (`honing tasks check` does those).
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter

from honing.errors import ConfigError
from honing.tasks import domains
from honing.tasks.synthetic import UNSEEN_TAG
from honing.trainer.run_config import SYNTHETIC_PREFIX, TaskSource
from honing.trainer.sources import load_source, without_overlap

DIFFICULTIES = ("easy", "medium", "hard")
TRAIN_SEED, HELDOUT_SEED = 11, 12  # examples/quickstart.yaml's train and held-out seeds


def kept(key: str, train: int, heldout: int) -> tuple[int, Counter[str]]:
    """Held-out tasks of generator `key` left after `train` training tasks, and their count by
    difficulty tag ("untagged": none of `DIFFICULTIES`) and by `UNSEEN_TAG`."""
    tasks = SYNTHETIC_PREFIX + key
    seen = load_source("train", TaskSource(tasks=tasks, count=train, seed=TRAIN_SEED))
    source = TaskSource(tasks=tasks, count=heldout, seed=HELDOUT_SEED)
    try:
        left = without_overlap(load_source("heldout", source, heldout=True), [seen]).tasks
    except ConfigError:  # every held-out task is also a training task
        left = []
    by_tag = Counter(next((d for d in DIFFICULTIES if d in t.tags), "untagged") for t in left)
    by_tag[UNSEEN_TAG] = sum(UNSEEN_TAG in t.tags for t in left)
    return len(left), by_tag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", type=int, default=512)
    parser.add_argument("--heldout", type=int, default=256)
    parser.add_argument("--need", type=int, default=128)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    keys = sorted(domains.generators())
    enough = 0
    for key in keys:
        count, by_tag = kept(key, args.train, args.heldout)
        tags = ", ".join(f"{d} {by_tag[d]}" for d in DIFFICULTIES)
        if by_tag["untagged"]:
            tags += f", untagged {by_tag['untagged']}"
        tags += f", {UNSEEN_TAG} {by_tag[UNSEEN_TAG]}"
        print(
            f"capacity {key}: train {args.train}, held-out kept {count} of {args.heldout} "
            f"(tags: {tags})"
        )
        enough += count >= args.need
    print(f"generator_capacity: {enough}/{len(keys)} generators keep >= {args.need} held-out")


if __name__ == "__main__":
    main()
