"""The lookahead model: GPT's trunk and main head (model/gpt), and K extra heads over the trunk's last states.

Training runs the trunk once, then the main head, then each extra head in turn, forward, loss and backward,
adding its gradient into the trunk's before the next head starts (so peak memory grows by one head, not K).
The objective is the main loss + W x the mean of the heads' losses (W: --lookahead-weight). Each head's
loss goes into the metrics log as "head<k>_loss"; the loss a step reports is the main head's, so that it
compares with a plain GPT's and with the validation loss (the main head's), unless the objective is not
finite, which is then reported, so that a diverging head stops training as the main head would. With
--lookahead-distill B each mtp head's loss in the objective mixes in the main head's distribution (distill.py);
its "head<k>_loss" stays the loss against the true token.
`logits`, `loss` (validation, eval) and `decoder()` (sampling) use the main head alone.
"""

from __future__ import annotations

import math

import numpy as np

from microgpt.core.errors import ConfigError, Named, Placeholder
from microgpt.model.heads import HeadLogits
from microgpt.model.lookahead.config import LookaheadConfig
from microgpt.model.lookahead.distill import soft_cross_entropy_grad, teacher_rows
from microgpt.model.lookahead.heads import FutureHead, GapHead, HydraHead, head_specs, shifted_ids
from microgpt.model.lookahead.hydra_draft import HydraDecoder
from microgpt.model.lookahead.speculative import SpeculativeDecoder
from microgpt.model.params import ParameterViews, ParamSpec
from microgpt.model.transformer import GPT
from microgpt.model.transformer import param_specs as trunk_specs


def param_specs(config: LookaheadConfig, prefix: str = "") -> list[ParamSpec]:
    """The trunk's parameters (GPT's, named as GPT names them), then every extra head's."""
    return trunk_specs(config, prefix) + head_specs(config, prefix)


class Lookahead(GPT):
    """GPT's trunk and main head, with the extra heads: `heads` gives every head's logits, `speculative_decoder`
    drafts with them (mode mtp)."""

    specs = staticmethod(param_specs)

    def bind(self, views: ParameterViews) -> None:
        """GPT's layers (the trunk and the main head) and the extra heads over views (GPT.bind)."""
        super().bind(views)
        kind = {"mtp": FutureHead, "gap": GapHead, "hydra": HydraHead}[self.config.lookahead_mode]
        self.extra = [kind(self.be, self.config, self.rope, views, f"lookahead.{k}", k)
                      for k in range(1, self.config.lookahead + 1)]

    def loss_and_backward(self, windows: np.ndarray):
        """(the main head's mean loss, {"head<k>_loss": ...}) for windows (B, T+1); adds every gradient of the
        objective into the bound gradient buffers."""
        be, config = self.be, self.config
        windows = np.asarray(windows)
        batch, seq_len = self.check_ids(windows[:, :-1])
        on_device = be.ids(windows)  # (B, T+1)
        inputs = on_device[:, :-1].reshape(-1)  # (B*T,)
        x, block_saved = self.blocks_forward(inputs, batch, seq_len)  # (B*T, d): the trunk's last states
        h, norm_saved = self.final_norm.forward(x)  # (B*T, d)
        main_logits = self.head.forward(h)  # (B*T, vocab)
        teacher = be.softmax_rows(main_logits) if config.lookahead_distill else None  # (B*T, vocab)
        main_loss, dlogits = be.fused_softmax_ce_grad(main_logits, on_device[:, 1:].reshape(-1))
        dx = self.final_norm.backward(self.head.backward(dlogits, h), norm_saved)  # (B*T, d)
        memory, memory_ids = self.memory(windows[:, :-1], inputs)
        dmemory = None
        share = config.lookahead_weight / config.lookahead  # each head's weight in the objective
        metrics, objective_losses = {}, []
        for head in self.extra:
            loss, mixed, dx_head, dmemory_head = self.head_pass(head, x, memory, on_device, batch, seq_len, share,
                                                                teacher)
            metrics[f"head{head.k}_loss"] = loss
            objective_losses.append(mixed)
            be.add_(dx, dx_head)
            if dmemory_head is not None:
                dmemory = dmemory_head if dmemory is None else self.add_memory(dmemory, dmemory_head)
        self.blocks_backward(dx, inputs, batch, seq_len, block_saved)
        if dmemory is not None:
            for grad, ids in zip(dmemory if isinstance(dmemory, list) else [dmemory], memory_ids):
                be.embedding_scatter_add(grad, ids, self.d_tok_emb, batch * seq_len, config.d_model)
        objective = main_loss + config.lookahead_weight * sum(objective_losses) / len(objective_losses)
        return (main_loss if math.isfinite(objective) else objective), metrics

    def memory(self, ids: np.ndarray, inputs):
        """(memory, the backend ids it was gathered at) that the extra heads read besides the trunk's states, for
        host ids (B, T) (`inputs`: the same on the backend, (B*T,)): in mode gap the embeddings of the input tokens
        (B*T, d); in mode hydra a list of K, the j-th (B*T, d) holding at row (b, t) the embedding of the token at
        t + j (heads.shifted_ids); in mode mtp none."""
        be, config, rows = self.be, self.config, ids.size
        if config.lookahead_mode == "gap":
            return be.embedding_gather(self.tok_emb, inputs, rows, config.d_model), [inputs]  # (B*T, d)
        if config.lookahead_mode == "hydra":
            at = [be.ids(shifted_ids(ids, j)) for j in range(1, config.lookahead + 1)]  # K x (B*T,)
            return [be.embedding_gather(self.tok_emb, i, rows, config.d_model) for i in at], at  # K x (B*T, d)
        return None, []

    def add_memory(self, total, part):
        """The memory gradients `total` with `part` added: one array, or (mode hydra) lists, part's perhaps shorter
        (head k reads the first k embeddings)."""
        if not isinstance(total, list):
            return self.be.add(total, part)
        if len(part) > len(total):
            total, part = part, total
        return [self.be.add(a, b) for a, b in zip(total, part)] + total[len(part):]

    def head_pass(self, head, x, memory, on_device, batch: int, seq_len: int, share: float, teacher=None):
        """One extra head's forward, loss and backward: (its mean loss against the true token, its loss in the
        objective, dx, dmemory) for the trunk's states x (B*T, d). Only positions whose target lies inside the
        window count (T - offset + 1 of them). With `teacher`, the main head's distributions (B*T, vocab), the
        objective's loss is (1 - B) x that + B x the loss against the main head's distribution (distill.py)."""
        be, vocab, distill = self.be, self.config.vocab_size, self.config.lookahead_distill
        logits, saved = head.forward(x, memory, batch, seq_len)  # (B*T, vocab)
        counted = seq_len - head.offset + 1  # positions t with t + offset <= T
        targets = on_device[:, head.offset : head.offset + counted].reshape(-1)  # (B*counted,)
        if counted == seq_len:
            loss, dlogits = be.fused_softmax_ce_grad(logits, targets)  # (B*T, vocab)
            mixed = loss  # a gap head (offset 1) is never distilled
        else:
            kept = logits.reshape(batch, seq_len, vocab)[:, :counted].reshape(batch * counted, vocab)  # (B*c, V)
            loss, dkept = be.fused_softmax_ce_grad(kept, targets)  # dkept (B*counted, vocab)
            mixed = loss
            if teacher is not None:
                soft, dsoft = soft_cross_entropy_grad(be, kept, teacher_rows(teacher, batch, seq_len, head.k))
                be.scale_(dkept, 1.0 - distill)
                be.add_(dkept, be.scale(dsoft, distill))
                mixed = (1.0 - distill) * loss + distill * soft
            dlogits = be.zeros(logits.shape)  # (B*T, vocab): nothing from the positions past the window's end
            dlogits.reshape(batch, seq_len, vocab)[:, :counted] = dkept.reshape(batch, counted, vocab)
        be.scale_(dlogits, share)
        dx, dmemory = head.backward(dlogits, saved, batch, seq_len)  # each (B*T, d) or None
        return loss, mixed, dx, dmemory

    def heads(self, ids: np.ndarray) -> list[HeadLogits]:
        """Every head's logits for host ids (B, T), forward only: the main head's, then each extra head's."""
        batch, seq_len = self.check_ids(ids)
        inputs = self.be.ids(ids.reshape(-1))  # (B*T,)
        x, _ = self.blocks_forward(inputs, batch, seq_len)  # (B*T, d)
        h, _ = self.final_norm.forward(x)  # (B*T, d)
        found = [HeadLogits("main", 1, (1, None), self.head.forward(h))]  # (B*T, vocab)
        memory, _ = self.memory(np.asarray(ids), inputs)
        for head in self.extra:
            logits, _ = head.forward(x, memory, batch, seq_len)  # (B*T, vocab)
            found.append(HeadLogits(f"lookahead {head.k}", head.offset, head.hidden, logits))
        return found

    def speculative_decoder(self) -> SpeculativeDecoder | HydraDecoder:
        """A decoder that feeds the main head's token and the heads' drafts in one pass (speculative.py; with
        hydra heads, hydra_draft.py)."""
        if not self.config.drafts:
            raise ConfigError("this model's heads are gap heads (", Named("lookahead_mode", self.config.lookahead_mode),
                              "): they see text after the token they predict, so they cannot draft; ",
                              Named("speculative"), " needs a model trained with ",
                              Named("lookahead_mode", Placeholder("mtp or hydra")), key="speculative")
        return HydraDecoder(self) if self.config.lookahead_mode == "hydra" else SpeculativeDecoder(self)
