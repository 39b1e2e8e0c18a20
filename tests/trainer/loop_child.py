"""Runs `honing.trainer.loop.train` with a seeded scripted engine, in a child process.

    python loop_child.py CONFIG.json [--resume] [--kill-after STEP]

The engine answers each math task "What is A + B?" through the answer tool; whether the answer is
right depends on the request's seed (so a group's samples differ and every update has signal),
and, with `forget_after` set in the config file's "test" section, additions are answered wrongly
once that many updates are done (to provoke forgetting). With `"engine": "hf"` in that section
the run's own engine plays instead: the real model, as `honing train` builds it.
`--kill-after STEP` SIGKILLs this process right after update STEP, before its evaluation or
checkpoint.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import sys
from pathlib import Path

from honing.rollout.engines.base import Prompt
from honing.rollout.engines.scripted import ScriptedEngine
from honing.rollout.models import load_tokenizer
from honing.trainer.loop import train
from honing.trainer.run_config import TrainConfig
from honing.trainer.run_dir import UpdateRecord

QUESTION = re.compile(r"What is (\d+) ([+-]) (\d+)\?")


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(name)s %(message)s")
    raw = json.loads(Path(sys.argv[1]).read_text())
    test = raw.pop("test", {})
    config = TrainConfig.model_validate(raw)
    resume = "--resume" in sys.argv
    kill_after = (
        int(sys.argv[sys.argv.index("--kill-after") + 1]) if "--kill-after" in sys.argv else None
    )
    tokenizer = load_tokenizer(Path(config.model))
    forget_after = test.get("forget_after")

    def respond(prompt: Prompt, seed: int) -> str:
        text = tokenizer.decode(prompt.token_ids or [])
        a, op, b = QUESTION.findall(text)[-1]
        value = int(a) + int(b) if op == "+" else int(a) - int(b)
        wrong = seed % 3 == 0 or (forget_after is not None and op == "+" and done[0] > forget_after)
        if wrong:
            value += 1
        return f'<tool_call>{{"name": "answer", "arguments": {{"value": "{value}"}}}}</tool_call>'

    engine = (
        None
        if test.get("engine") == "hf"
        else ScriptedEngine(respond, tokenizer=tokenizer, by_seed=True)
    )

    done = [0]

    def on_step(report: UpdateRecord) -> None:
        done[0] = report.step
        if kill_after is not None and report.step == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    result = asyncio.run(train(config, resume=resume, engine=engine, on_step=on_step))
    print(json.dumps({"steps": result.steps, "line": result.line(config.name)}))


if __name__ == "__main__":
    main()
