"""One rank of a `train` run for test_sharded_train.py (torchrun's RANK, WORLD_SIZE, MASTER_*
in the environment; none for one process), with a seeded scripted engine.

    python sharded_child.py CONFIG.json [--resume]

loop_child.py's engine (an answer right or wrong by the request's seed), reporting each token's
logprob as the tiny random model's (near uniform, ln 1/49152): the importance weights are near
1, so every update's gradient is well above AdamW's epsilon and two runs compare in fp32.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from loop_child import QUESTION

from honing.rollout.engines.base import Generation, Prompt, SamplingParams
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig


class UniformScripted(ScriptedEngine):
    async def generate(
        self, prompts: Sequence[Prompt], sampling: SamplingParams
    ) -> list[Generation]:
        out = await super().generate(prompts, sampling)
        assert self.tokenizer is not None
        uniform = -math.log(len(self.tokenizer))
        return [dataclasses.replace(g, logprobs=[uniform] * len(g.logprobs)) for g in out]


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    config = TrainConfig.model_validate(json.loads(Path(sys.argv[1]).read_text()))
    tokenizer = load_tokenizer(Path(config.model))

    def respond(prompt: Prompt, seed: int) -> str:
        a, op, b = QUESTION.findall(tokenizer.decode(prompt.token_ids or []))[-1]
        value = (int(a) + int(b) if op == "+" else int(a) - int(b)) + (seed % 3 == 0)
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    engine = UniformScripted(respond, tokenizer=tokenizer, by_seed=True)
    result = asyncio.run(train(config, resume="--resume" in sys.argv, engine=engine))
    print(json.dumps({"steps": result.steps}))


if __name__ == "__main__":
    main()
