"""Supervised fine-tuning on chat data, with the RL learner: the warm start before `honing train`.

    config = SftConfig(data="traces.jsonl", out=Path("runs/sft"))
    result = run_sft(config)                 # -> runs/sft/model (`model: runs/sft/model`)
    examples = load_chat_data("data.jsonl")  # validated rows; every bad row named, none dropped
    seq = tokenize_example(examples[0], ChatFormat.of(tokenizer))
    stats = sft_update(learner, [seq, ...])  # one optimiser step of masked cross-entropy

Covered: the data format, rendering exactly as the agent loop renders, the loss mask on assistant
tokens, overlong examples, and the update (docs/training.md, "The modules in detail"). Of
`LearnerConfig` it uses the optimiser, schedule, batching, LoRA and dtype settings; the RL fields
are ignored. Not covered: packing several examples into one row, periodic checkpoints and resume
(a run is short; the learner's save/load apply to it), evaluation during SFT, multi-GPU.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, PrivateAttr, ValidationError
from torch import Tensor

from honing.config import StrictModel
from honing.envs.base import Observation, ToolResult
from honing.errors import ConfigError
from honing.rollout.chat import ChatFormat, Message, observation_messages, system_message
from honing.trainer.batching import pack, shared_prefix
from honing.trainer.config import LearnerConfig
from honing.trainer.learner import Learner

log = logging.getLogger(__name__)

MAX_PROBLEMS_SHOWN = 20
ROLES = ("system", "user", "assistant", "tool")


# -- the data --------------------------------------------------------------------------------
class FunctionCall(StrictModel):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str = Field(
        default_factory=dict, description="A JSON object, or a string holding one (OpenAI)."
    )


class ChatToolCall(StrictModel):
    """A tool call in OpenAI's chat shape."""

    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[ChatToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name, on a tool message


class ChatExample(StrictModel):
    """One training conversation; `source` is where it came from (`FILE:LINE`)."""

    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    id: str | None = None
    _source: str = PrivateAttr("")

    @property
    def source(self) -> str:
        return self._source

    def at(self, source: str) -> ChatExample:
        """This example, remembering where it came from (for error messages)."""
        self._source = source
        return self


_ALLOWED = {
    "": "messages, tools, id",
    "messages[]": "role, content, tool_calls, tool_call_id, name",
    "messages[].tool_calls[]": "id, type, function",
    "messages[].tool_calls[].function": "name, arguments",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one row."""

    source: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        field = f" field '{self.field}':" if self.field else ""
        return f"{where}:{field} {self.message}"


class SftDataError(ConfigError):
    """Rows of an SFT data file that are not valid examples; `problems` lists them all."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {p}" for p in problems[:MAX_PROBLEMS_SHOWN])
        more = len(problems) - MAX_PROBLEMS_SHOWN
        tail = f"\n  ... and {more} more" if more > 0 else ""
        super().__init__(
            f"{source}: {len(problems)} problem(s) in the SFT data; fix or remove these rows "
            f'(each row: {{"messages": [{{"role": ..., "content": ...}}, ...], '
            f'"tools": [...]}}):\n{shown}{tail}'
        )


def load_chat_data(spec: str) -> list[ChatExample]:
    """The examples of a JSONL/Parquet file (path or fsspec URL); SftDataError lists every bad
    row."""
    from honing.tasks.load import UnreadableRow, read_rows

    examples: list[ChatExample] = []
    problems: list[Problem] = []
    for source, line, row in read_rows(spec):
        where = f"{source}:{line}" if line is not None else source
        if isinstance(row, UnreadableRow):
            problems.append(Problem(source, line, None, row.reason))
            continue
        example, found = parse_example(row, where)
        problems += [Problem(source, line, f, m) for f, m in found]
        if example is not None:
            examples.append(example)
    if problems:
        raise SftDataError(spec, problems)
    if not examples:
        raise ConfigError(f"{spec}: no examples (an empty file?)")
    return examples


def parse_example(row: Any, source: str = "") -> tuple[ChatExample | None, list[tuple[str, str]]]:
    """A row as an example, or the (field, message) problems that make it none."""
    if not isinstance(row, dict):
        return None, [("(row)", f"must be a JSON object, not {type(row).__name__}")]
    try:
        example = ChatExample.model_validate(_without_nulls(row)).at(source)
    except ValidationError as exc:
        return None, [_describe(err) for err in exc.errors()]
    problems = _check_example(example)
    return (None, problems) if problems else (example, [])


def _check_example(ex: ChatExample) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if ex.messages[0].role not in ("system", "user"):
        problems.append(("messages[0].role", "the conversation must start with system or user"))
    learnable = False
    for i, m in enumerate(ex.messages):
        if m.role == "system" and i > 0:
            problems.append((f"messages[{i}].role", "system is allowed only as the first message"))
        if m.tool_calls and m.role != "assistant":
            problems.append((f"messages[{i}].tool_calls", "only assistant messages make calls"))
        if m.role == "assistant":
            if not m.content and not m.tool_calls:
                problems.append(
                    (f"messages[{i}]", "an assistant message needs content or tool_calls")
                )
            learnable = True
        for j, call in enumerate(m.tool_calls):
            if isinstance(call.function.arguments, str):
                try:
                    value = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError as exc:
                    value = exc
                if not isinstance(value, dict):
                    problems.append(
                        (
                            f"messages[{i}].tool_calls[{j}].function.arguments",
                            "must be a JSON object (or a string holding one)",
                        )
                    )
    if not learnable:
        problems.append(("messages", "no assistant message: nothing to learn from this row"))
    if any(m.tool_calls for m in ex.messages) and not ex.tools:
        problems.append(
            (
                "tools",
                "required when an assistant message has tool_calls: the "
                "schemas of the tools it may call",
            )
        )
    for k, tool in enumerate(ex.tools):
        spec = tool.get("function", tool)
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            problems.append(
                (
                    f"tools[{k}]",
                    'must be an OpenAI tool schema: {"type": "function", '
                    '"function": {"name": ..., "parameters": {...}}}',
                )
            )
    return problems


def _describe(err: Any) -> tuple[str, str]:
    path = ""
    for part in err["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    kind = err["type"]
    if kind == "literal_error" and path.endswith(".role"):
        return path, f"must be one of {', '.join(ROLES)}"
    if kind == "extra_forbidden":
        parent = re.sub(r"\[\d+\]", "[]", path.rpartition(".")[0] if "." in path else "")
        allowed = _ALLOWED.get(parent)
        return path, "unknown field" + (f"; allowed: {allowed}" if allowed else "")
    if kind == "missing":
        return path, "required field is missing"
    return path, str(err["msg"])


def _without_nulls(value: Any) -> Any:
    """A null means "absent" (Parquet pads every row with every key; OpenAI writes content
    null beside tool_calls)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


# -- rendering and the loss mask ---------------------------------------------------------------
def tool_call_text(calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks, one a line: the call
    format honing's system prompt asks for and `parse_action` reads."""
    return "\n".join(
        "<tool_call>"
        + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        + "</tool_call>"
        for name, arguments in calls
    )


def agent_messages(example: ChatExample, fmt: ChatFormat) -> list[Message]:
    """The messages the agent loop would render for `example` with `fmt`'s template (see the
    module docstring)."""
    traits = fmt.traits
    messages = list(example.messages)
    system: str | None = None
    if messages[0].role == "system":
        system = messages.pop(0).content
    if example.tools:
        system = system_message(example.tools, system, not traits.native_tools)
    out: list[Message] = []
    results: list[ChatMessage] = []  # tool messages waiting to be shown in a user message
    for m in messages:
        if m.role == "tool" and not traits.tool_role:
            results.append(m)
            continue
        if results:
            out.append(_results_message(results, m.content if m.role == "user" else None))
            results = []
            if m.role == "user":  # the task state after the results: in the same message
                continue
        out.append(_message(m, traits.native_tools))
    if results:
        out.append(_results_message(results, None))
    if system:
        if traits.system_role:
            out.insert(0, {"role": "system", "content": system})
        elif out and out[0]["role"] == "user":
            out[0] = {**out[0], "content": f"{system}\n\n{out[0]['content']}"}
        else:
            out.insert(0, {"role": "user", "content": system})
    return out


def _results_message(results: list[ChatMessage], user_text: str | None) -> Message:
    """Tool results as one user message, as the agent shows them to a template without a tool
    role (`observation_messages`), with the user message that follows them, if any."""
    shown = [ToolResult(call_id=r.tool_call_id or "", name=r.name or "tool", content=r.content,
                        ok=True) for r in results]  # fmt: skip
    if user_text is not None:
        observation = Observation(text=user_text, tool_results=shown)
        [message] = observation_messages(observation, tool_role=False)
        return message
    return {"role": "user", "content": "\n\n".join(f"Tool result ({r.name}):\n{r.content}"
                                                    for r in shown)}  # fmt: skip


def _arguments(call: ChatToolCall) -> dict[str, Any]:
    args = call.function.arguments
    value = json.loads(args or "{}") if isinstance(args, str) else args
    assert isinstance(value, dict)  # checked when the row was read
    return value


def _message(m: ChatMessage, native_tools: bool) -> Message:
    if m.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": m.tool_call_id or "",
            "name": m.name or "",
            "content": m.content,
        }
    if m.role != "assistant" or not m.tool_calls:
        return {"role": m.role, "content": m.content}
    if native_tools:
        calls = [
            {
                "id": c.id or f"call_{i}",
                "type": "function",
                "function": {"name": c.function.name, "arguments": _arguments(c)},
            }
            for i, c in enumerate(m.tool_calls)
        ]
        return {"role": "assistant", "content": m.content, "tool_calls": calls}
    text = tool_call_text([(c.function.name, _arguments(c)) for c in m.tool_calls])
    return {"role": "assistant", "content": f"{m.content}\n{text}" if m.content else text}


@dataclass(frozen=True, slots=True)
class SftSequence:
    """One tokenised example: `loss_mask[i]` is 1 when token i is an assistant token."""

    token_ids: list[int]
    loss_mask: list[int]
    source: str = ""

    @property
    def tokens(self) -> int:
        return sum(self.loss_mask)


def tokenize_example(example: ChatExample, fmt: ChatFormat) -> SftSequence:
    """Token ids and the assistant-only loss mask (see the module docstring); ConfigError when
    the template is not prefix-preserving."""
    messages = agent_messages(example, fmt)
    tools = example.tools
    ids: list[int] = []
    mask: list[int] = []
    covered = ""  # the text that `ids` decode to
    end_of_turn = fmt.traits.end_of_turn
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = fmt.render(messages[:i], generation_prompt=True, tools=tools) if i else ""
        after = fmt.render(messages[: i + 1], generation_prompt=False, tools=tools)
        if not before.startswith(covered) or not after.startswith(before):
            raise _not_prefix_preserving(example, i)
        turn = after[len(before) :]
        if not end_of_turn or not turn.endswith(end_of_turn):
            raise ConfigError(
                f"{example.source or 'an example'}: messages[{i}]: the chat template does not "
                f"close the assistant turn with its end-of-turn marker {end_of_turn!r}, so the "
                "end of the turn cannot be trained; run `honing check-template MODEL`"
            )
        body = turn[: len(turn) - len(end_of_turn)]
        closer = fmt.encode(end_of_turn)
        stop = next((k for k, t in enumerate(closer) if t in fmt.traits.stop_ids), None)
        closing = closer if stop is None else closer[: stop + 1]
        context = fmt.encode(before[len(covered) :])
        content = fmt.encode(body) + closing
        ids += context + content
        mask += [0] * len(context) + [1] * len(content)
        covered = before + body + fmt.decode(closing)
    return SftSequence(ids, mask, example.source)


def _not_prefix_preserving(example: ChatExample, index: int) -> ConfigError:
    return ConfigError(
        f"{example.source or 'an example'}: the chat template renders the turns before "
        f"messages[{index}] differently once more messages follow (it is not prefix-preserving), "
        "so the assistant tokens cannot be found by rendering prefixes and would not match what "
        "the agent loop samples; run `honing check-template MODEL` to see how to fix the template"
    )


# -- one update --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SftStats:
    """What one `sft_update` did."""

    version: int  # the learner's version after the step
    loss: float  # mean cross-entropy over the batch's assistant tokens (before the step)
    tokens: int  # assistant tokens trained on
    context_tokens: int  # all tokens forwarded (padding excluded)
    sequences: int
    micro_batches: int
    grad_norm: float  # before clipping
    lr: float  # the learning rate this step used
    seconds: float


@dataclass(frozen=True, slots=True)
class _Micro:
    input_ids: Tensor  # [B, T]
    attention_mask: Tensor  # [B, T]
    targets: Tensor  # [B, T-1] bool: input_ids[:, t+1] is an assistant token
    prefix_len: int = 0  # leading tokens every row shares and none trains on (run once)


def _micro_batches(batch: Sequence[SftSequence], pad_id: int, budget: int) -> list[_Micro]:
    out: list[_Micro] = []
    for rows in pack([len(s.token_ids) for s in batch], budget):
        width = max(len(batch[r].token_ids) for r in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.bool)
        for k, r in enumerate(rows):
            seq = batch[r]
            n = len(seq.token_ids)
            ids[k, :n] = torch.tensor(seq.token_ids, dtype=torch.long)
            attention[k, :n] = 1
            mask[k, :n] = torch.tensor(seq.loss_mask, dtype=torch.bool)
        mask[:, 0] = False  # the first token is never predicted
        out.append(_Micro(ids, attention, mask[:, 1:], shared_prefix(ids, attention, mask)))
    return out


def _assistant_logits(learner: Learner, mb: _Micro) -> tuple[Tensor, Tensor]:
    """Logits [N, V] (float32) at the positions that predict an assistant token, and those
    tokens [N]. The LM head runs only at positions some row needs (`logits_to_keep`, where the
    model takes it): with a vocabulary of 50k and more, projecting every context token is most
    of the cost of a small model's step."""
    device = next(learner.model.parameters()).device
    targets = mb.targets.to(device)
    keep = targets.any(0).nonzero().squeeze(-1)  # positions t whose target t + 1 is trained
    logits = learner.forward_logits(
        learner.model, mb.input_ids, mb.attention_mask, keep, prefix_len=mb.prefix_len
    )
    ids = mb.input_ids.to(device)
    return logits[targets[:, keep]].float(), ids[:, keep + 1][targets[:, keep]]


def sft_update(learner: Learner, batch: Sequence[SftSequence]) -> SftStats:
    """One optimiser step of masked mean cross-entropy over `batch`'s assistant tokens (see the
    module docstring)."""
    start = time.perf_counter()
    cfg = learner.config
    micro = _micro_batches(batch, learner.pad_id, cfg.micro_batch_tokens)
    count = sum(int(m.targets.sum()) for m in micro)
    if count == 0:
        raise ValueError("sft_update: the batch has no assistant tokens to train on")
    lr = float(learner.optimizer.param_groups[0]["lr"])
    total = 0.0
    learner.model.train()
    try:
        for mb in micro:
            logits, labels = _assistant_logits(learner, mb)
            loss = torch.nn.functional.cross_entropy(logits, labels, reduction="sum") / count
            loss.backward()  # type: ignore[no-untyped-call]
            total += float(loss.detach())
    finally:
        learner.model.eval()
    grad_norm = learner.apply_gradients("sft")
    return SftStats(
        version=learner.version,
        loss=total,
        tokens=count,
        context_tokens=sum(int(m.attention_mask.sum()) for m in micro),
        sequences=len(batch),
        micro_batches=len(micro),
        grad_norm=grad_norm,
        lr=lr,
        seconds=time.perf_counter() - start,
    )


@torch.no_grad()
def sft_loss(learner: Learner, sequences: Sequence[SftSequence]) -> float:
    """Mean cross-entropy over the assistant tokens of `sequences` (no gradient, no step)."""
    micro = _micro_batches(sequences, learner.pad_id, learner.config.micro_batch_tokens)
    total, count = 0.0, 0
    for mb in micro:
        logits, labels = _assistant_logits(learner, mb)
        total += float(torch.nn.functional.cross_entropy(logits, labels, reduction="sum"))
        count += len(labels)
    return total / max(count, 1)


# -- the run ------------------------------------------------------------------------------------
class SftConfig(StrictModel):
    """`honing sft CONFIG`: supervised fine-tuning on chat data."""

    model: str = Field(
        "default", description="The model to start from: a directory, or 'default' (SmolLM2)."
    )
    data: str = Field(description="Training conversations: JSONL (or Parquet), path or URL.")
    out: Path = Field(
        Path("runs/sft"),
        description="Run directory; the trained model goes to OUT/model (LoRA merged in).",
    )
    learner: LearnerConfig = Field(
        default_factory=LearnerConfig,
        description="Optimiser, schedule, micro-batching, LoRA and precision, as for `honing "
        "train` (the RL fields are not used). Its defaults are the RL learner's (full fine-tune, "
        "lr 1e-5); SFT with LoRA usually wants learner.lora set and lr around 1e-4 to 2e-4.",
    )
    epochs: int = Field(1, ge=1, description="Passes over the data.")
    batch_size: int = Field(8, ge=1, description="Sequences per optimiser step.")
    max_seq_len: int = Field(2048, ge=2, description="Longest example in tokens.")
    overlong: Literal["error", "truncate"] = Field(
        "error",
        description="A longer example: 'error' (listed), or 'truncate' to its first max_seq_len "
        "tokens (with a warning counting the assistant tokens lost).",
    )
    seed: int = Field(0, description="Seeds the shuffle and torch (LoRA initialisation).")
    log_every: int = Field(1, ge=1, description="Log progress every this many steps.")

    def total_steps(self, examples: int) -> int:
        return self.epochs * math.ceil(examples / self.batch_size)


@dataclass(frozen=True)
class SftResult:
    """What `run_sft` did and where the model is."""

    model_dir: Path  # OUT/model: a full transformers directory with the tokenizer
    steps: int
    examples: int
    tokens: int  # assistant tokens trained on, over all epochs
    first_loss: float  # the first step's loss
    final_loss: float  # the mean loss of the last epoch's steps
    seconds: float
    tokens_per_s: float  # tokens forwarded (context included) per second of training

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "model_dir": str(self.model_dir),
            "steps": self.steps,
            "examples": self.examples,
            "tokens": self.tokens,
            "first_loss": self.first_loss,
            "final_loss": self.final_loss,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
        }


def tokenize_all(
    examples: Sequence[ChatExample],
    fmt: ChatFormat,
    *,
    max_seq_len: int,
    overlong: Literal["error", "truncate"] = "error",
) -> list[SftSequence]:
    """Every example tokenised, with the `overlong` policy applied (see the module docstring)."""
    sequences = [tokenize_example(e, fmt) for e in examples]
    long = [s for s in sequences if len(s.token_ids) > max_seq_len]
    if not long:
        return sequences
    if overlong == "error":
        listed = "\n".join(
            f"  {s.source or '?'}: {len(s.token_ids)} tokens" for s in long[:MAX_PROBLEMS_SHOWN]
        )
        raise ConfigError(
            f"{len(long)} example(s) are longer than max_seq_len={max_seq_len} tokens:\n{listed}\n"
            "raise max_seq_len, shorten them, or set overlong=truncate"
        )
    cut: list[SftSequence] = []
    lost = 0
    for s in sequences:
        if len(s.token_ids) <= max_seq_len:
            cut.append(s)
            continue
        kept = SftSequence(s.token_ids[:max_seq_len], s.loss_mask[:max_seq_len], s.source)
        if kept.tokens == 0:
            raise ConfigError(
                f"{s.source or 'an example'}: no assistant token within the first "
                f"max_seq_len={max_seq_len} tokens; raise max_seq_len or shorten the example"
            )
        lost += s.tokens - kept.tokens
        cut.append(kept)
    log.warning(
        "sft: %d example(s) truncated to max_seq_len=%d tokens; %d assistant tokens lost",
        len(long),
        max_seq_len,
        lost,
    )
    return cut


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The example order of one epoch: a deterministic shuffle of range(n)."""
    order = list(range(n))
    random.Random(f"honing.sft/{seed}/{epoch}").shuffle(order)
    return order


def batches(n: int, config: SftConfig) -> Iterator[tuple[int, list[int]]]:
    """(epoch, example indices) of every optimiser step, in order."""
    for epoch in range(config.epochs):
        order = epoch_order(n, config.seed, epoch)
        for i in range(0, n, config.batch_size):
            yield epoch, order[i : i + config.batch_size]


def run_sft(config: SftConfig, *, on_step: Callable[[SftStats], None] | None = None) -> SftResult:
    """Train `config.model` on `config.data` and save it to OUT/model (see the module docstring);
    `on_step` sees every step's stats."""
    random.seed(config.seed)
    torch.manual_seed(config.seed)
    examples = load_chat_data(config.data)
    learner = Learner(config.model, config.learner)
    if learner.tokenizer is None:
        raise ConfigError(f"model {config.model!r}: no tokenizer found beside the weights")
    fmt = ChatFormat.of(learner.tokenizer)
    sequences = tokenize_all(
        examples, fmt, max_seq_len=config.max_seq_len, overlong=config.overlong
    )
    total = config.total_steps(len(sequences))
    lcfg = config.learner
    if lcfg.schedule == "cosine" and lcfg.schedule_steps != total:
        log.warning(
            "sft: learner.schedule_steps=%d but the run has %d steps; the cosine schedule will %s",
            lcfg.schedule_steps,
            total,
            "not reach 0" if lcfg.schedule_steps > total else "stay at 0 at the end",
        )
    log.info(
        "sft: %d examples (%d assistant tokens) from %s, %d epoch(s), %d steps of %d; "
        "model %s (%s)",
        len(sequences),
        sum(s.tokens for s in sequences),
        config.data,
        config.epochs,
        total,
        config.batch_size,
        config.model,
        "LoRA" if lcfg.lora else "full fine-tune",
    )
    started = time.perf_counter()
    first_loss: float | None = None
    trained = forwarded = 0
    epoch_losses: list[float] = []
    current_epoch = 0
    for epoch, rows in batches(len(sequences), config):
        if epoch != current_epoch:
            current_epoch, epoch_losses = epoch, []
        stats = sft_update(learner, [sequences[r] for r in rows])
        first_loss = stats.loss if first_loss is None else first_loss
        epoch_losses.append(stats.loss)
        trained += stats.tokens
        forwarded += stats.context_tokens
        if on_step is not None:
            on_step(stats)
        step = learner.steps
        if step % config.log_every == 0 or step == total:
            elapsed = time.perf_counter() - started
            eta = elapsed / step * (total - step)
            log.info(
                "sft: step %d/%d (epoch %d) loss %.4f, %.0f tokens/s, lr %.2e, ETA %s",
                step,
                total,
                epoch + 1,
                stats.loss,
                forwarded / max(elapsed, 1e-9),
                stats.lr,
                _duration(eta),
            )
    seconds = time.perf_counter() - started
    model_dir = save_model(learner, config.out / "model")
    result = SftResult(
        model_dir=model_dir,
        steps=learner.steps,
        examples=len(sequences),
        tokens=trained,
        first_loss=first_loss if first_loss is not None else float("nan"),
        final_loss=sum(epoch_losses) / max(len(epoch_losses), 1),
        seconds=seconds,
        tokens_per_s=forwarded / max(seconds, 1e-9),
    )
    summary = {"config": config.model_dump(mode="json"), "result": result.to_json_dict()}
    (config.out / "sft.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info(
        "sft: done: %d steps in %s, loss %.4f -> %.4f; model saved to %s",
        result.steps,
        _duration(seconds),
        result.first_loss,
        result.final_loss,
        model_dir,
    )
    return result


def save_model(learner: Learner, path: Path) -> Path:
    """The learner's model as a full transformers directory with its tokenizer (LoRA merged into
    the base: the learner's model is the merged one afterwards, so call this last)."""
    model = learner.model
    if learner.config.lora is not None:
        model = model.merge_and_unload()
        learner.model = model
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if learner.tokenizer is not None:
        learner.tokenizer.save_pretrained(path)
    return path


def sft_main(config: SftConfig) -> SftResult:
    """The `honing sft CONFIG` command: run, then print the result's one-line summary."""
    result = run_sft(config)
    print(
        f"sft: {result.steps} steps on {result.examples} examples in {_duration(result.seconds)}"
        f", loss {result.first_loss:.3f} -> {result.final_loss:.3f}, "
        f"{result.tokens_per_s:.0f} tokens/s; model: {result.model_dir}"
    )
    return result


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"
