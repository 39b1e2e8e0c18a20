"""RL math: small pure tensor functions (no state, no I/O) that the learner calls.

    advantages   grpo, dr_grpo, rloo, reinforce_pp, passk and gae advantages, token_rewards,
                 whiten, turn_level_advantages, broadcast_to_tokens, distill_advantages
    losses       policy_loss, gspo_loss, cispo_loss (-> PolicyLoss, PolicyLossStats),
                 PolicyLossKind, aggregate, Aggregation
    value        value_loss (-> ValueLoss), explained_variance: the critic's loss and diagnostic
    offpolicy    decoupled_policy_loss, token_staleness, staleness_mask
    kl           kl_k1, kl_k2, kl_k3, kl_penalty, KLEstimator
    logprobs     token_logprobs, token_entropy, entropy_from_logits
    masking      masked_sum, masked_mean

Shapes: B sequences, T positions, V vocabulary, G groups of n samples (or flat N with group ids),
K assistant turns; a mask is 1 on the model's own tokens; each docstring gives shapes, paper and
omissions. Not covered: records to tensors, the optimiser, anything with state (`honing.trainer`).
"""

from honing.rl.advantages import (
    GAE,
    broadcast_to_tokens,
    distill_advantages,
    dr_grpo_advantages,
    gae_advantages,
    grpo_advantages,
    passk_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
    token_rewards,
    turn_level_advantages,
    whiten,
)
from honing.rl.kl import KLEstimator, kl_k1, kl_k2, kl_k3, kl_penalty
from honing.rl.logprobs import entropy_from_logits, token_entropy, token_logprobs
from honing.rl.losses import (
    Aggregation,
    PolicyLoss,
    PolicyLossKind,
    PolicyLossStats,
    aggregate,
    cispo_loss,
    gspo_loss,
    policy_loss,
)
from honing.rl.masking import masked_mean, masked_sum
from honing.rl.offpolicy import CapMode, decoupled_policy_loss, staleness_mask, token_staleness
from honing.rl.value import ValueLoss, explained_variance, value_loss

__all__ = [
    "GAE",
    "Aggregation",
    "CapMode",
    "KLEstimator",
    "PolicyLoss",
    "PolicyLossKind",
    "PolicyLossStats",
    "ValueLoss",
    "aggregate",
    "broadcast_to_tokens",
    "cispo_loss",
    "decoupled_policy_loss",
    "distill_advantages",
    "dr_grpo_advantages",
    "entropy_from_logits",
    "explained_variance",
    "gae_advantages",
    "grpo_advantages",
    "gspo_loss",
    "kl_k1",
    "kl_k2",
    "kl_k3",
    "kl_penalty",
    "masked_mean",
    "masked_sum",
    "passk_advantages",
    "policy_loss",
    "reinforce_pp_advantages",
    "rloo_advantages",
    "staleness_mask",
    "token_entropy",
    "token_logprobs",
    "token_rewards",
    "token_staleness",
    "turn_level_advantages",
    "value_loss",
    "whiten",
]
