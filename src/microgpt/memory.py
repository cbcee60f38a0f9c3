"""How much memory a training step needs, estimated before anything is allocated.

`estimate_training_bytes` counts what the model code actually keeps, in
elements of the backend's dtype (N = batch x seq_len rows, d = d_model,
H = heads, V = vocabulary, P = parameters):

- training state: parameters, gradients and both Adam moments, 4 x P, and
  where a batch is split into S > 1 shards run at once (the cpu backend, one
  per thread), each shard's own gradient, S x P more; the shards' activations
  add up to those of the whole batch;
- per layer, what forward saves for backward: the LayerNorm outputs and
  normalised inputs of both norms, the per-head q, k and v copies, the mixed
  attention output and the FFN input (8 x N x d), the FFN's ReLU output and
  mask (2 x N x d_ff), the attention probabilities (batch x H x seq_len^2;
  with flash attention instead each head's output and row log-sum-exps,
  batch x H x seq_len x (width + 1)), and the two norms' 1/std columns
  (2 x N); the residual stream itself is not kept;
- after the blocks: the final norm's output and normalised input (2 x N x d + N),
  and the logits and their gradient (2 x N x V), alive through all of backward;
- the largest short-lived workspace on top of that: the attention scores and
  softmax temporaries of the widest head group (3 x batch x heads-in-group x
  seq_len^2, plus a few N x d; with flash attention only batch x heads x
  seq_len row sums), the loss's temporaries (2 x N x V), or the FFN
  backward's (2 x N x d_ff); the Adam step's temporaries (3 x P) come after the
  activations are freed, so the peak is the larger of the two phases.

Measured with tracemalloc on the NumPy backend, the estimate is within about 10%
of the real peak for models of a few hundred kilobytes and up (tests/test_memory.py).
"""

from __future__ import annotations

from microgpt.backends.cuda_backend import FLASH_MAX_WIDTH
from microgpt.checks import format_bytes
from microgpt.config import ModelConfig
from microgpt.errors import ConfigError
from microgpt.model import param_specs
from microgpt.model.attention import head_groups


def attention_kind(backend) -> str:
    """How a backend computes attention, for the estimate: "flash" or "materialised"."""
    return getattr(backend, "attention", "materialised")


def _attention_elements(config: ModelConfig, batch_size: int, attention: str) -> tuple[int, int]:
    """(kept per layer, largest backward temporary) of the attention core, in elements."""
    T, kept, temporary = config.seq_len, 0, 0
    for group in head_groups(config.head_dims):
        heads = batch_size * group.count
        if attention == "flash" and group.width <= FLASH_MAX_WIDTH:
            kept += heads * T * (group.width + 1)  # the output and each row's log-sum-exp
            temporary = max(temporary, heads * T)  # rowsum(dout * out)
        else:
            kept += heads * T * T  # the probabilities
            temporary = max(temporary, 3 * heads * T * T)  # scores, their gradient, softmax temporaries
    return kept, temporary


def memory_parts(
    config: ModelConfig, batch_size: int, dtype_bytes: int = 4, attention: str = "materialised", shards: int = 1
) -> dict[str, int]:
    """Bytes of one training step by part: "state", "shard_gradients", "activations" and "workspace" (they add
    up to the peak).
    attention: "materialised" (the NumPy backend; CUDA with attention="materialised") or "flash" (the
    CUDA default, whose attention keeps O(T) per head; heads wider than FLASH_MAX_WIDTH are materialised).
    shards: how many shards the batch is split into (`shard_count(backend, batch_size)`)."""
    n_params = sum(spec.size for spec in param_specs(config))
    T, d, d_ff, vocab = config.seq_len, config.d_model, config.d_ff, config.vocab_size
    rows = batch_size * T
    attention_kept, attention_temporary = _attention_elements(config, batch_size, attention)
    per_layer = 8 * rows * d + 2 * rows * d_ff + attention_kept + 2 * rows
    activations = config.n_layers * per_layer + 2 * rows * d + rows + 2 * rows * vocab
    backward_workspace = max(attention_temporary + 6 * rows * d, 2 * rows * vocab, 2 * rows * d_ff)
    # The Adam step runs after the activations are freed, so it is the peak only when its 3 x P beats both.
    workspace = max(backward_workspace, 3 * n_params - activations)
    shard_gradients = shards * n_params if shards > 1 else 0  # each shard's own, when the batch is split
    return {"state": 4 * n_params * dtype_bytes, "shard_gradients": shard_gradients * dtype_bytes,
            "activations": activations * dtype_bytes,
            "workspace": workspace * dtype_bytes}


def estimate_training_bytes(
    config: ModelConfig, batch_size: int, dtype_bytes: int = 4, attention: str = "materialised", shards: int = 1
) -> int:
    """The estimated peak bytes of one training step (see the module docstring for what is counted)."""
    return sum(memory_parts(config, batch_size, dtype_bytes, attention, shards).values())


def check_memory(config: ModelConfig, batch_size: int, dtype_bytes: int, cap: int, label: str = "this model",
                 attention: str = "materialised", shards: int = 1) -> None:
    """Raise ConfigError when a training step would need more than `cap` bytes, saying how to fit.
    Pass attention=attention_kind(backend) and shards=shard_count(backend, batch_size) for the backend that
    will train."""
    parts = memory_parts(config, batch_size, dtype_bytes, attention, shards)
    needed = sum(parts.values())
    if needed > cap:
        raise ConfigError(
            f"training {label} needs about {format_bytes(needed)} (weights, gradients and Adam moments "
            f"{format_bytes(parts['state'])}, "
            + (f"the gradients of {shards} shards (one per thread) {format_bytes(parts['shard_gradients'])}, "
               if parts["shard_gradients"] else "")
            + f"activations {format_bytes(parts['activations'])}, workspace "
            f"{format_bytes(parts['workspace'])}) but --max-memory is {format_bytes(cap)}; use a smaller "
            f"--batch-size (now {batch_size}) or --seq-len (now {config.seq_len}), a smaller model, "
            f"or raise --max-memory"
        )
