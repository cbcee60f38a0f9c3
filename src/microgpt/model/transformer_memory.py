"""What a stack of transformer blocks with an output head holds in one training step, besides the parameter
state, counted before anything is allocated (gpt's estimate, and each of the ensemble's experts').

In elements of the backend's dtype (N = batch x seq_len rows, d = d_model, V = vocabulary):

- per layer, what forward saves for backward: the LayerNorm outputs and
  normalised inputs of both norms, the per-head q, k and v copies, the mixed
  attention output and the FFN input (8 x N x d), the FFN's ReLU output and
  mask (2 x N x d_ff), what the backend's attention keeps for each head group
  (`Backend.attention_memory`: the probabilities, batch x heads x seq_len^2,
  or with flash attention each head's output and row log-sum-exps), and the
  two norms' 1/std columns (2 x N), and at bf16 on the cpu and cuda backends the bits kept beside the two
  norms' and the ReLU's outputs (`Backend.rounded_memory`); the residual stream itself is not kept;
- after the blocks: the final norm's output (and its bits) and normalised input (2 x N x d + N),
  and the logits and their gradient (2 x N x V), alive through all of backward;
- the largest short-lived workspace on top of that: the attention backward's
  temporaries of the widest head group (as the backend reports them) plus a
  few N x d, the loss's temporaries (2 x N x V), or the FFN backward's
  (2 x N x d_ff, and at bf16 the bits of ReLU's backward output).

model/memory.py adds the parameter state and the optimiser step's temporaries;
tests/model/test_memory.py holds the sum to the measured peak.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.attention import head_groups


def stack_parts(head_dims: tuple[int, ...], n_layers: int, d_ff: int, vocab: int, seq_len: int, batch: int,
                backend) -> dict[str, int]:
    """{"activations": bytes kept from forward to backward, "workspace": bytes of backward's largest
    temporaries} for one training step over `batch` sequences on `backend`."""
    T, d = seq_len, sum(head_dims)
    rows = batch * T
    attention_kept, attention_temporary = 0, 0
    for group in head_groups(head_dims):
        kept, temporary = backend.attention_memory(batch * group.count, T, group.width)
        attention_kept += kept
        attention_temporary = max(attention_temporary, temporary)
    rounded = backend.rounded_memory(2 * rows * d + rows * d_ff)  # the bits of the two norms' and the ReLU's outputs
    per_layer = 8 * rows * d + 2 * rows * d_ff + attention_kept + 2 * rows + rounded
    activations = n_layers * per_layer + 2 * rows * d + rows + 2 * rows * vocab + backend.rounded_memory(rows * d)
    workspace = max(attention_temporary + 6 * rows * d, 2 * rows * vocab,
                    2 * rows * d_ff + backend.rounded_memory(rows * d_ff))
    element = np.dtype(backend.dtype).itemsize
    return {"activations": activations * element, "workspace": workspace * element}
