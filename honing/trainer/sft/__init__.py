"""Supervised fine-tuning on chat data, with the RL learner: the warm start before `honing train`.

    data      ChatExample, load_chat_data, parse_example, SftDataError: rows read and checked
    tokenize  agent_messages, tool_call_text, tokenize_example -> SftSequence, tokenize_all
    update    sft_update -> SftStats (one optimiser step), sft_loss (no step)
    run       SftConfig, run_sft -> SftResult, save_model, sft_main (`honing sft CONFIG`)

Every name other modules use is re-exported here (`from honing.trainer.sft import run_sft`).
Not covered: packing several examples into one row, periodic checkpoints and resume, evaluation
during SFT, multi-GPU.
"""

from __future__ import annotations

from honing.trainer.sft.data import (
    MAX_PROBLEMS_SHOWN,
    ROLES,
    ChatExample,
    ChatMessage,
    ChatToolCall,
    FunctionCall,
    Problem,
    SftDataError,
    load_chat_data,
    parse_example,
)
from honing.trainer.sft.run import (
    SftConfig,
    SftResult,
    batches,
    epoch_order,
    run_sft,
    save_model,
    sft_main,
)
from honing.trainer.sft.tokenize import (
    SftSequence,
    agent_messages,
    tokenize_all,
    tokenize_example,
    tool_call_text,
)
from honing.trainer.sft.update import SftStats, sft_loss, sft_update
from honing.trainer.sft.update import _assistant_logits as _assistant_logits  # for tests
from honing.trainer.sft.update import _micro_batches as _micro_batches  # for tests

__all__ = [
    "MAX_PROBLEMS_SHOWN",
    "ROLES",
    "ChatExample",
    "ChatMessage",
    "ChatToolCall",
    "FunctionCall",
    "Problem",
    "SftConfig",
    "SftDataError",
    "SftResult",
    "SftSequence",
    "SftStats",
    "agent_messages",
    "batches",
    "epoch_order",
    "load_chat_data",
    "parse_example",
    "run_sft",
    "save_model",
    "sft_loss",
    "sft_main",
    "sft_update",
    "tokenize_all",
    "tokenize_example",
    "tool_call_text",
]
