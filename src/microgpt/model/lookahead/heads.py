"""The extra heads: each a few blocks over the trunk's last states, then a LayerNorm and an output layer of its own.

`FutureHead` k (mode mtp) predicts the token at t + 1 + k through causal blocks (model/transformer.py), so it sees
the positions up to t, as the trunk does (Gloeckle et al. 2024). `GapHead` k (mode gap) predicts the token at
t + 1 through gap blocks (gap_block.py), which add the tokens from t + k + 1 on and hide t + 1 .. t + k.
`HydraHead` k (mode hydra) predicts the token at t + 1 + k from the trunk's state at t and the embeddings of the
tokens at t + 1 .. t + k (hydra_layer.py): drafting, those are the tokens drafted before it. Each
says where its target lies (`offset`: the token at t + offset) and which positions after t it must not see
(`hidden`), which tests/model/test_leaks.py holds it to.
"""

from __future__ import annotations

import numpy as np

from microgpt.backends.base import Backend
from microgpt.model.lookahead.config import LookaheadConfig
from microgpt.model.lookahead.gap_block import GapBlock, gap_block_specs
from microgpt.model.lookahead.hydra_layer import HydraLayer, hydra_layer_specs
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.rope import RopeTables
from microgpt.model.transformer import Block, LayerNorm, Linear, block_specs, layer_norm_specs, linear_specs


def head_specs(config: LookaheadConfig, prefix: str = "") -> list[ParamSpec]:
    """Every extra head's parameters, in checkpoint order, after the trunk's."""
    d, mode = config.d_model, config.lookahead_mode
    specs = []
    for k in range(1, config.lookahead + 1):
        name = f"{prefix}lookahead.{k}"
        for i in range(config.head_layers):
            if mode == "hydra":
                specs += hydra_layer_specs(f"{name}.blocks.{i}", d, config.d_ff, k)
            else:
                specs += (gap_block_specs if mode == "gap" else block_specs)(f"{name}.blocks.{i}", d, config.d_ff)
        specs += layer_norm_specs(f"{name}.final_norm", d) + linear_specs(f"{name}.out", d, config.vocab_size)
    return specs


class FutureHead:
    """Head k of mode mtp: the token at t + 1 + k, from the trunk's states at positions up to t."""

    def __init__(self, backend: Backend, config: LookaheadConfig, rope: RopeTables, views: ParameterViews,
                 name: str, k: int):
        self.be, self.k = backend, k
        self.offset = 1 + k  # its target: the token at t + 1 + k
        self.hidden = (1, None)  # every position after t
        self.blocks = [Block(backend, views, f"{name}.blocks.{i}", config.head_dims, rope)
                       for i in range(config.head_layers)]
        self.final_norm = LayerNorm(backend, views, f"{name}.final_norm")
        self.out = Linear(backend, views, f"{name}.out")

    def forward(self, x, memory, batch: int, seq_len: int, caches=None, start: int = 0):
        """(logits (B*T, vocab), saved) for the trunk's states x (B*T, d); `memory` is unused. caches and start
        are as in Attention.forward (one list of KV rings per block)."""
        block_saved = []
        for i, block in enumerate(self.blocks):
            x, saved = block.forward(x, batch, seq_len, None if caches is None else caches[i], start)  # (B*T, d)
            block_saved.append(saved)
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        return self.out.forward(h), (h, norm_saved, block_saved)

    def backward(self, dlogits, saved, batch: int, seq_len: int):
        """(dx (B*T, d), None): the gradient of the trunk's states, and none of the memory."""
        h, norm_saved, block_saved = saved
        dx = self.final_norm.backward(self.out.backward(dlogits, h), norm_saved)  # (B*T, d)
        for block, state in zip(reversed(self.blocks), reversed(block_saved)):
            dx = block.backward(dx, state, batch, seq_len)  # (B*T, d)
        return dx, None


class GapHead:
    """Head k of mode gap: the token at t + 1, seeing positions up to t (the trunk's states) and the tokens from
    t + k + 1 on (the memory: the embeddings of the input tokens)."""

    def __init__(self, backend: Backend, config: LookaheadConfig, rope: RopeTables, views: ParameterViews,
                 name: str, k: int):
        self.be, self.k = backend, k
        self.offset = 1  # its target: the next token
        self.hidden = (1, k)  # positions t + 1 .. t + k
        self.blocks = [GapBlock(backend, views, f"{name}.blocks.{i}", config.head_dims, rope, k)
                       for i in range(config.head_layers)]
        self.final_norm = LayerNorm(backend, views, f"{name}.final_norm")
        self.out = Linear(backend, views, f"{name}.out")

    def forward(self, x, memory, batch: int, seq_len: int):
        """(logits (B*T, vocab), saved) for the trunk's states x and the token embeddings `memory`, each (B*T, d)."""
        block_saved = []
        for block in self.blocks:
            x, saved = block.forward(x, memory, batch, seq_len)  # (B*T, d)
            block_saved.append(saved)
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        return self.out.forward(h), (h, norm_saved, block_saved)

    def backward(self, dlogits, saved, batch: int, seq_len: int):
        """(dx, dmemory), each (B*T, d): the gradients of the trunk's states and of the memory."""
        h, norm_saved, block_saved = saved
        dx = self.final_norm.backward(self.out.backward(dlogits, h), norm_saved)  # (B*T, d)
        dmemory = None
        for block, state in zip(reversed(self.blocks), reversed(block_saved)):
            dx, d_block_memory = block.backward(dx, state, batch, seq_len)  # each (B*T, d)
            if dmemory is None:
                dmemory = d_block_memory
            else:
                self.be.add_(dmemory, d_block_memory)
        return dx, dmemory


def shifted_ids(ids: np.ndarray, shift: int) -> np.ndarray:
    """Host ids (B*T,) whose row (b, t) is the token at t + shift of ids (B, T), or past the window's end its last
    token (at an offset below `shift`, so a hydra head still sees nothing it must not)."""
    columns = np.minimum(np.arange(ids.shape[1]) + shift, ids.shape[1] - 1)  # (T,)
    return np.ascontiguousarray(ids[:, columns]).reshape(-1)


class HydraHead:
    """Head k of mode hydra: the token at t + 1 + k, from the trunk's state at t and the embeddings of the tokens
    at t + 1 .. t + k (the memory: a list whose j-th holds at row t the embedding of the token at t + j)."""

    def __init__(self, backend: Backend, config: LookaheadConfig, rope: RopeTables, views: ParameterViews,
                 name: str, k: int):
        self.be, self.k = backend, k
        self.offset = 1 + k  # its target: the token at t + 1 + k
        self.hidden = (1 + k, None)  # the positions from its target on
        self.blocks = [HydraLayer(backend, views, f"{name}.blocks.{i}", k) for i in range(config.head_layers)]
        self.final_norm = LayerNorm(backend, views, f"{name}.final_norm")
        self.out = Linear(backend, views, f"{name}.out")

    def forward(self, x, memory, batch: int, seq_len: int):
        """(logits (rows, vocab), saved) for the trunk's states x (rows, d) and at least k token embeddings, each
        (rows, d), in `memory`; batch and seq_len are unused (no row reads another)."""
        embeddings, layer_saved = memory[: self.k], []
        for layer in self.blocks:
            x, saved = layer.forward(x, embeddings)  # (rows, d)
            layer_saved.append(saved)
        h, norm_saved = self.final_norm.forward(x)  # (rows, d)
        return self.out.forward(h), (h, norm_saved, layer_saved)

    def backward(self, dlogits, saved, batch: int, seq_len: int):
        """(dx (rows, d), [de_j (rows, d)] for j = 1 .. k): the gradients of the states and of the embeddings."""
        h, norm_saved, layer_saved = saved
        dx = self.final_norm.backward(self.out.backward(dlogits, h), norm_saved)  # (rows, d)
        dmemory = None
        for layer, state in zip(reversed(self.blocks), reversed(layer_saved)):
            dx, dembeddings = layer.backward(dx, state)  # (rows, d), k x (rows, d)
            if dmemory is None:
                dmemory = dembeddings
            else:
                for total, part in zip(dmemory, dembeddings):
                    self.be.add_(total, part)
        return dx, dmemory
