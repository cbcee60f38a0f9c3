"""TorchGPT: the microgpt model written in plain eager PyTorch, as a baseline and a reference.

Same architecture and initial distributions as `microgpt.model.gpt.GPT`: token
embedding N(0, 1/d), no learned positions, RoPE on q and k per head (pairs
(2i, 2i+1), theta = pos / 10000^(2i/w), an odd last column untouched), pre-LN
blocks with separate q/k/v/o Linear(d, d), heads of possibly unequal widths,
ReLU feed-forward, final LayerNorm (eps 1e-5), untied head with bias. With
`fused_qkv=True` (heads of one width) q, k and v are one Linear(d, 3d) and q and
k are rotated in one call: the strongest eager model a user writes, the one
bench_cpu.py times; its weights load from microgpt's three projections.

Attention runs `F.scaled_dot_product_attention(..., is_causal=True)` once per
group of adjacent equal-width heads (its default scale 1/sqrt(w) is the head
width's): that is what an eager PyTorch user writes, and PyTorch picks its
fastest kernel for the device and dtype, so it is the fair eager baseline.
No torch.compile. The module is device- and dtype-agnostic (`.to(device)`,
`.double()`); the RoPE tables are kept in float64 buffers and cast once to
the activations' dtype (cached per dtype and device), so a float64 model is
exact to float64 and a float32 one pays no cast per step.

`make_adam` and `make_adamw` (decay on the Linear weights), `warmup_cosine` and
`train_step` (optional clipping, an lr per step) are microgpt's optimiser and
schedule in PyTorch's own terms. `load_from_microgpt(model, tensors)` copies a microgpt checkpoint-named state
(`GPT.params.to_host()`) into a TorchGPT; `microgpt_named_parameters(model)`
gives each of its parameters under the microgpt name (for comparing gradients).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from microgpt.backends.constants import LN_EPS

ROPE_BASE = 10000.0


def head_groups(head_dims) -> list[tuple[int, int, int]]:
    """(first column, head count, width) for each maximal run of adjacent equal-width heads."""
    groups: list[tuple[int, int, int]] = []
    col = 0
    for width in head_dims:
        if groups and groups[-1][2] == width:
            first, count, _ = groups[-1]
            groups[-1] = (first, count + 1, width)
        else:
            groups.append((col, 1, width))
        col += width
    return groups


def rope_cos_sin(width: int, n_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin), each (n_positions, width) float64; both members of a pair repeat the angle, odd column cos 1 sin 0."""
    pairs = width // 2
    inv_freq = ROPE_BASE ** (-2.0 * torch.arange(pairs, dtype=torch.float64) / width)  # (pairs,)
    angles = (
        torch.arange(n_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    )  # (n_positions, pairs)
    cos = torch.ones(n_positions, width, dtype=torch.float64)
    sin = torch.zeros(n_positions, width, dtype=torch.float64)
    cos[:, : 2 * pairs] = torch.cos(angles).repeat_interleave(2, dim=1)
    sin[:, : 2 * pairs] = torch.sin(angles).repeat_interleave(2, dim=1)
    return cos, sin


def rotate_pairs(x: torch.Tensor) -> torch.Tensor:
    """(-x1, x0) in place of each pair (x0, x1) of the last dim; an odd last column becomes 0."""
    even = x.shape[-1] - x.shape[-1] % 2
    x0, x1 = x[..., 0:even:2], x[..., 1:even:2]
    rotated = torch.stack((-x1, x0), dim=-1).flatten(-2)  # (..., even)
    if even == x.shape[-1]:
        return rotated
    return torch.cat((rotated, torch.zeros_like(x[..., even:])), dim=-1)


def split_heads(x: torch.Tensor, group: tuple[int, int, int]) -> torch.Tensor:
    """The group's columns of x (B, T, d) as (B, G, T, w)."""
    col, count, width = group
    batch, seq_len, _ = x.shape
    return x[..., col : col + count * width].reshape(batch, seq_len, count, width).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, d_model: int, head_dims, seq_len: int, fused_qkv: bool = False):
        super().__init__()
        self.groups = head_groups(head_dims)
        self.fused_qkv = fused_qkv
        if fused_qkv:  # one product for q, k and v, and one RoPE call for q and k: heads of one width
            if len(self.groups) != 1:
                raise ValueError(f"fused_qkv needs heads of one width, not {list(head_dims)}")
            self.wqkv, self.wo = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)
        else:
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(d_model, d_model) for _ in range(4))
        self._cast_tables: dict[tuple[int, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
        for width in {w for _, _, w in self.groups}:
            cos, sin = rope_cos_sin(width, seq_len)
            self.register_buffer(f"rope_cos_{width}", cos, persistent=False)
            self.register_buffer(f"rope_sin_{width}", sin, persistent=False)

    def _tables(self, width: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin) (seq_len, width) in dtype, cast from the float64 buffers once per dtype and device."""
        cos, sin = getattr(self, f"rope_cos_{width}"), getattr(self, f"rope_sin_{width}")
        cast = self._cast_tables.get((width, dtype))
        if cast is None or cast[0].device != cos.device:
            cast = self._cast_tables[(width, dtype)] = (cos.to(dtype), sin.to(dtype))
        return cast

    def _rope(self, x: torch.Tensor, width: int) -> torch.Tensor:
        """x (B, G, T, w) rotated by position."""
        cos, sin = self._tables(width, x.dtype)
        seq_len = x.shape[-2]
        return x * cos[:seq_len] + rotate_pairs(x) * sin[:seq_len]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq_len, d_model = x.shape
        if self.fused_qkv:
            _, heads, width = self.groups[0]
            qkv = self.wqkv(x).view(batch, seq_len, 3, heads, width).permute(2, 0, 3, 1, 4)  # (3, B, H, T, w)
            qk = self._rope(qkv[:2], width)  # (2, B, H, T, w)
            out = F.scaled_dot_product_attention(qk[0], qk[1], qkv[2], is_causal=True)  # (B, H, T, w)
            return self.wo(out.transpose(1, 2).reshape(batch, seq_len, d_model))
        q, k, v = self.wq(x), self.wk(x), self.wv(x)  # each (B, T, d)
        outputs = []
        for group in self.groups:
            width = group[2]
            qg, kg, vg = (split_heads(t, group) for t in (q, k, v))  # each (B, G, T, w)
            out = F.scaled_dot_product_attention(
                self._rope(qg, width), self._rope(kg, width), vg, is_causal=True
            )
            outputs.append(out.transpose(1, 2).reshape(batch, seq_len, group[1] * width))
        mixed = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=-1)  # (B, T, d)
        return self.wo(mixed)


class FeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.l1 = nn.Linear(d_model, d_ff)
        self.l2 = nn.Linear(d_ff, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(F.relu(self.l1(x)))


class Block(nn.Module):
    def __init__(self, d_model: int, head_dims, d_ff: int, seq_len: int, fused_qkv: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model, eps=LN_EPS)
        self.attn = Attention(d_model, head_dims, seq_len, fused_qkv)
        self.ln2 = nn.LayerNorm(d_model, eps=LN_EPS)
        self.ff = FeedForward(d_model, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.ff(self.ln2(x))


class TorchGPT(nn.Module):
    def __init__(self, vocab_size: int, d_model: int, n_layers: int, head_dims, d_ff: int, seq_len: int,
                 fused_qkv: bool = False):
        super().__init__()
        head_dims = tuple(int(w) for w in head_dims)
        if sum(head_dims) != d_model:
            raise ValueError(f"head widths {list(head_dims)} sum to {sum(head_dims)}, not d_model {d_model}")
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, head_dims, d_ff, seq_len, fused_qkv) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(d_model, eps=LN_EPS)
        self.head = nn.Linear(d_model, vocab_size)
        self._init_like_microgpt()

    def _init_like_microgpt(self) -> None:
        """Embedding N(0, 1/d); Linear weights N(0, 2/d_in), biases 0; LayerNorm gamma 1, beta 0."""
        with torch.no_grad():
            nn.init.normal_(self.tok_emb.weight, 0.0, math.sqrt(1.0 / self.tok_emb.embedding_dim))
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, 0.0, math.sqrt(2.0 / module.in_features))
                    nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids idx (B, T)."""
        if idx.shape[1] > self.seq_len:
            raise ValueError(f"sequence length {idx.shape[1]} is over the model's seq_len {self.seq_len}")
        x = self.tok_emb(idx)  # (B, T, d)
        for block in self.blocks:
            x = block(x)
        return self.head(self.final_norm(x))


def _microgpt_name(torch_name: str) -> tuple[str, bool]:
    """The microgpt checkpoint name of a TorchGPT parameter, and whether it is stored transposed there."""
    if torch_name == "tok_emb.weight":
        return "tok_emb", False
    module, kind = torch_name.rsplit(".", 1)
    is_norm = module.endswith(("ln1", "ln2", "final_norm"))
    if kind == "weight":
        return (f"{module}.gamma", False) if is_norm else (f"{module}.w", True)
    return f"{module}.beta" if is_norm else f"{module}.b", False


def microgpt_named_parameters(model: TorchGPT) -> dict[str, tuple[nn.Parameter, bool]]:
    """microgpt name -> (the TorchGPT parameter, True where microgpt stores it transposed: Linear weights)."""
    named = {}
    for torch_name, param in model.named_parameters():
        name, transposed = _microgpt_name(torch_name)
        named[name] = (param, transposed)
    return named


def load_from_microgpt(torch_model: TorchGPT, tensors: dict[str, np.ndarray]) -> None:
    """Copy microgpt checkpoint-named arrays (Linear w is (d_in, d_out)) into torch_model, in its dtype and device."""
    named = microgpt_named_parameters(torch_model)
    tensors = dict(tensors)
    for name in named:  # a fused q, k, v projection: microgpt's three, side by side (w is (d_in, d_out))
        if ".wqkv." in name:
            parts = [tensors.get(name.replace(".wqkv.", f".{kind}.")) for kind in ("wq", "wk", "wv")]
            if all(part is not None for part in parts):
                tensors[name] = np.concatenate(parts, axis=-1)
    missing = sorted(set(named) - set(tensors))
    if missing:
        raise KeyError(f"the microgpt tensors lack {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    with torch.no_grad():
        for name, (param, transposed) in named.items():
            value = torch.from_numpy(np.asarray(tensors[name]))
            value = value.T if transposed else value
            if value.shape != param.shape:
                raise ValueError(
                    f"{name}: microgpt shape {tuple(value.shape)} does not fit {tuple(param.shape)}"
                )
            param.copy_(value.to(dtype=param.dtype, device=param.device))


def make_adam(model: nn.Module, lr: float, fused: bool = False) -> torch.optim.Adam:
    """Adam with microgpt's constants (beta 0.9, 0.999, eps 1e-8, bias-corrected); `fused`: torch's one-kernel
    update over every parameter (the fastest it has on a CPU)."""
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=fused or None)


def make_adamw(model: TorchGPT, lr: float, betas: tuple[float, float], weight_decay: float) -> torch.optim.AdamW:
    """torch.optim.AdamW (eps 1e-8) decaying the nn.Linear weights only: not the embedding, LayerNorm or biases."""
    decayed = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    ids = {id(p) for p in decayed}
    rest = [p for p in model.parameters() if id(p) not in ids]
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=1e-8)


def warmup_cosine(lr: float, t: int, warmup: int, decay_steps: int, min_lr: float) -> float:
    """nanoGPT's schedule with steps counted from 1: lr * t / warmup up to warmup, then cosine to min_lr at
    decay_steps, min_lr after."""
    if t <= warmup:
        return lr * t / warmup
    if t >= decay_steps:
        return min_lr
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * (t - warmup) / (decay_steps - warmup))) * (lr - min_lr)


def train_step(model: TorchGPT, optimizer: torch.optim.Optimizer, windows: torch.Tensor, lr: float | None = None,
               grad_clip: float | None = None) -> float:
    """microgpt's training step in PyTorch: mean next-token cross-entropy of windows (B, T+1), gradients clipped
    to a global norm of grad_clip if given, one step of the optimizer at lr (if given)."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(windows[:, :-1])  # (B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1))
    loss.backward()
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if lr is not None:
        for group in optimizer.param_groups:
            group["lr"] = lr
    optimizer.step()
    return loss.item()
