"""One transformer expert of the ensemble: it reads the stream, runs its blocks, predicts, and writes back.

x = E[ids] + s @ R (R: B x d), h = LayerNorm(blocks(x)), logits = h @ W_head + b, write = h @ W (W: d x B).
Its weight matrices start at torch's default spread or He's (`expert_specs`, --expert-init).
"""

from __future__ import annotations

import math
from dataclasses import replace

from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables
from microgpt.model.specs import ModelSpec
from microgpt.model.transformer import Block, LayerNorm, Linear, block_specs, layer_norm_specs, linear_specs


def expert_specs(prefix: str, spec: ModelSpec, d_ff: int, vocab: int, stream_dim: int, init: str) -> list[ParamSpec]:
    """The expert's parameters, in checkpoint order. Its weight matrices (the decayed ones: the stream's read and
    write, the blocks' projections and feed-forward maps, the head) start at He's N(0, 2/d_in), the read and write
    at N(0, 1/d_in), for init "he"; every one at N(0, 1/(3 d_in)), torch's default spread, for init "torch"."""
    d = spec.d_model
    specs = [ParamSpec(f"{prefix}tok_emb", (vocab, d), math.sqrt(1.0 / d)),
             ParamSpec(f"{prefix}read.w", (stream_dim, d), math.sqrt(1.0 / stream_dim), decay=True)]
    for i in range(spec.n_layers):
        specs += block_specs(f"{prefix}blocks.{i}", d, d_ff)
    specs += layer_norm_specs(f"{prefix}final_norm", d)
    specs += linear_specs(f"{prefix}head", d, vocab)
    specs.append(ParamSpec(f"{prefix}write.w", (d, stream_dim), math.sqrt(1.0 / d), decay=True))
    if init == "torch":
        specs = [replace(s, init_std=math.sqrt(1.0 / (3 * s.shape[0]))) if s.decay else s for s in specs]
    return specs


class Expert:
    """The expert's layers bound to one set of gradient buffers (`views`), under its name `prefix`."""

    def __init__(self, backend, views: ParameterViews, prefix: str, spec: ModelSpec, rope: RopeTables):
        self.be, self.d = backend, spec.d_model
        self.tok_emb, self.d_tok_emb = views.value[f"{prefix}tok_emb"], views.gradient[f"{prefix}tok_emb"]
        self.read, self.d_read = views.value[f"{prefix}read.w"], views.gradient[f"{prefix}read.w"]
        self.blocks = [Block(backend, views, f"{prefix}blocks.{i}", spec.head_dims, rope) for i in range(spec.n_layers)]
        self.final_norm = LayerNorm(backend, views, f"{prefix}final_norm")
        self.head = Linear(backend, views, f"{prefix}head")
        self.write_w, self.d_write_w = views.value[f"{prefix}write.w"], views.gradient[f"{prefix}write.w"]

    def forward(self, ids, stream, batch: int, seq_len: int):
        """(logits (B*T, V), write (B*T, B_stream), saved) for device ids (B*T,) and the stream (B*T, B_stream)."""
        be, rows = self.be, batch * seq_len
        x = be.embedding_gather(self.tok_emb, ids, rows, self.d)  # (B*T, d)
        be.matmul_into(stream, self.read, x, accumulate=True)  # x += s @ R
        block_saved = []
        for block in self.blocks:
            x, saved = block.forward(x, batch, seq_len)  # (B*T, d)
            block_saved.append(saved)
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        logits = self.head.forward(h)  # (B*T, V)
        write = be.matmul(h, self.write_w)  # (B*T, B_stream)
        return logits, write, (ids, stream, h, norm_saved, block_saved)

    def step(self, ids, stream, rings, start: int):
        """(logits (n, V), write (n, B_stream)) for n new tokens of one sequence at positions start .. start + n - 1,
        reading and extending the expert's KV rings (one list of head-group rings per layer)."""
        n = len(ids)
        x = self.be.embedding_gather(self.tok_emb, ids, n, self.d)  # (n, d)
        self.be.matmul_into(stream, self.read, x, accumulate=True)
        for block, layer_rings in zip(self.blocks, rings):
            x, _ = block.forward(x, 1, n, layer_rings, start)  # (n, d)
        h, _ = self.final_norm.forward(x)  # (n, d)
        return self.head.forward(h), self.be.matmul(h, self.write_w)  # (n, V), (n, B_stream)

    def backward(self, dlogits, dwrite, saved, batch: int, seq_len: int):
        """The stream's gradient (B*T, B_stream) through this expert's read, for the gradients of its logits and
        of its write; adds every parameter gradient into its buffers."""
        be = self.be
        ids, stream, h, norm_saved, block_saved = saved
        be.matmul_into(h, dwrite, self.d_write_w, transpose_a=True, accumulate=True)
        dh = self.head.backward(dlogits, h)  # (B*T, d)
        be.matmul_into(dwrite, self.write_w, dh, transpose_b=True, accumulate=True)
        dx = self.final_norm.backward(dh, norm_saved)  # (B*T, d)
        for block, block_state in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, block_state, batch, seq_len)  # (B*T, d)
        be.embedding_scatter_add(dx, ids, self.d_tok_emb, batch * seq_len, self.d)
        be.matmul_into(stream, dx, self.d_read, transpose_a=True, accumulate=True)
        return be.matmul(dx, self.read, transpose_b=True)  # (B*T, B_stream)
