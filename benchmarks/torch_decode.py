"""Greedy KV-cache decoding and exact evaluation of a TorchGPT, written as an eager PyTorch user writes them.

`KVDecoder` is a Hugging Face-style `past_key_values` loop: each call runs the new tokens through every
block with one fused q/k/v product per block (the three Linear weights stacked once, at construction),
RoPE at the tokens' absolute positions, the new keys and values concatenated onto the past ones
(`torch.cat`, as HF's DynamicCache does), cropped to the last seq_len (sliding-window attention, as
microgpt's decoder slides past seq_len), and `F.scaled_dot_product_attention`: causal for a prompt,
unmasked for one new token, which sees every key kept. Only the last row goes through the final
LayerNorm and the head.

`exact_nll` scores a text as `microgpt eval --stride 1` does: every position from seq_len on with the
seq_len tokens before it, windows batched, the blocks over the whole window and the final LayerNorm
and head on its last row alone (HF's `logits_to_keep=1`), the log-softmax in float64.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from torch_gpt import TorchGPT, rope_cos_sin


class KVDecoder:
    """One sequence's past keys and values per layer and head group, and the forward over new tokens."""

    def __init__(self, model: TorchGPT, max_positions: int):
        self.model = model
        self.groups = model.blocks[0].attn.groups  # (first column, heads, width) per run of equal heads
        with torch.no_grad():
            self.qkv = [(torch.cat([b.attn.wq.weight, b.attn.wk.weight, b.attn.wv.weight]),
                         torch.cat([b.attn.wq.bias, b.attn.wk.bias, b.attn.wv.bias])) for b in model.blocks]
        dtype = model.head.weight.dtype
        self.rope = {w: tuple(t.to(dtype) for t in rope_cos_sin(w, max_positions)) for _, _, w in self.groups}
        self.past: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in model.blocks]  # [layer][group]
        self.position = 0

    @torch.no_grad()
    def forward(self, ids: list[int]) -> torch.Tensor:
        """Logits (vocab,) after the tokens ids at the next positions; their keys and values join the past."""
        model, n, start = self.model, len(ids), self.position
        x = model.tok_emb(torch.tensor([ids]))  # (1, n, d)
        for layer, block in enumerate(model.blocks):
            h = block.ln1(x)
            q, k, v = F.linear(h, *self.qkv[layer]).split(x.shape[-1], dim=-1)  # each (1, n, d)
            outputs = []
            for g, (col, count, width) in enumerate(self.groups):
                cos, sin = (t[start : start + n] for t in self.rope[width])  # each (n, w)
                qg, kg, vg = (t[..., col : col + count * width].reshape(1, n, count, width).transpose(1, 2)
                              for t in (q, k, v))  # each (1, G, n, w)
                qg, kg = (t * cos + _rotate(t) * sin for t in (qg, kg))
                if self.past[layer][g:]:
                    past_k, past_v = self.past[layer][g]
                    kg = torch.cat((past_k, kg), dim=2)[:, :, -model.seq_len :]
                    vg = torch.cat((past_v, vg), dim=2)[:, :, -model.seq_len :]
                    self.past[layer][g] = (kg, vg)
                else:
                    self.past[layer].append((kg, vg))
                out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=n > 1)  # (1, G, n, w)
                outputs.append(out.transpose(1, 2).reshape(1, n, count * width))
            x = x + block.attn.wo(outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1))
            x = x + block.ff(block.ln2(x))
        self.position += n
        return model.head(model.final_norm(x[0, -1]))  # (vocab,)


def _rotate(x: torch.Tensor) -> torch.Tensor:
    """(-x1, x0) for each pair of the last dim (the heads here are of even width)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack((-x1, x0), dim=-1).flatten(-2)


@torch.no_grad()
def greedy(model: TorchGPT, prompt: list[int], n_tokens: int) -> list[int]:
    """n_tokens greedy tokens after prompt (at most seq_len tokens), through a KVDecoder."""
    decoder = KVDecoder(model, len(prompt) + n_tokens)
    logits, made = decoder.forward(prompt), []
    for _ in range(n_tokens):
        made.append(int(torch.argmax(logits)))
        logits = decoder.forward(made[-1:])
    return made


@torch.no_grad()
def exact_nll(model: TorchGPT, tokens: np.ndarray, positions: int, batch_size: int = 32) -> float:
    """Mean -log p(tokens[t] | tokens[t - seq_len : t]) over t = seq_len .. seq_len + positions - 1."""
    seq_len, total = model.seq_len, 0.0
    for first in range(seq_len, seq_len + positions, batch_size):
        lasts = np.arange(first, min(first + batch_size, seq_len + positions))  # (B,) the positions scored
        windows = torch.from_numpy(np.stack([tokens[t - seq_len : t] for t in lasts]))  # (B, T)
        x = model.tok_emb(windows)
        for block in model.blocks:
            x = block(x)
        logits = model.head(model.final_norm(x[:, -1])).double()  # (B, vocab)
        total += float(F.cross_entropy(logits, torch.from_numpy(tokens[lasts]), reduction="sum"))
    return total / positions
