"""The loss: softmax cross-entropy of logits against the token `offset` positions ahead, times a weight.

At position t the head predicts the token at t + offset; only positions whose target lies inside the window
count (T - offset + 1 of them). A graph's objective is the sum of its losses, each times its `weight`; the
loss a step reports is the one on the graph's `logits` output (offset 1), and every other goes into the
metrics log as "<path>_loss". The backend's fused softmax cross-entropy gives the loss and its gradient in
one pass, as the families' loss does.
"""

from __future__ import annotations

from typing import ClassVar

from microgpt.core.errors import ConfigError
from microgpt.model.graph.ops.base import Kernel, Op, Port, expect, number_param, whole_param


class CrossEntropyKernel(Kernel):
    def __init__(self, backend, offset: int, weight: float):
        self.be, self.offset, self.weight = backend, offset, weight

    def forward(self, inputs, run):
        """No outputs; saved is the gradient of the weighted loss, and the loss goes into run.losses."""
        be, (logits,) = self.be, inputs
        batch, seq_len = run.batch, run.seq_len
        counted = seq_len - self.offset + 1  # positions t with t + offset <= T
        targets = run.targets(self.offset, counted)  # (B*counted,)
        if counted == seq_len:
            loss, dlogits = be.fused_softmax_ce_grad(logits, targets)  # (B*T, vocab)
        else:
            vocab = logits.shape[1]
            kept = logits.reshape(batch, seq_len, vocab)[:, :counted].reshape(batch * counted, vocab)  # (B*c, V)
            loss, dkept = be.fused_softmax_ce_grad(kept, targets)  # (B*counted, vocab)
            dlogits = be.zeros(logits.shape)  # (B*T, vocab): nothing from positions past the window's end
            dlogits.reshape(batch, seq_len, vocab)[:, :counted] = dkept.reshape(batch, counted, vocab)
        if self.weight != 1.0:
            be.scale_(dlogits, self.weight)
        run.losses[self] = loss
        return [], dlogits

    def backward(self, douts, dlogits, run):
        return [dlogits]


class CrossEntropyOp(Op):
    name = "cross_entropy"
    doc = "softmax cross-entropy against the token `offset` ahead (1: the next), times `weight` in the objective"
    inputs: ClassVar[dict] = {"logits": Port("logits")}
    outputs = ()
    params: ClassVar[dict] = {"offset": 1, "weight": 1.0}

    def infer(self, node):
        expect("logits", node.in_types["logits"][0], "logits")
        offset = whole_param(node.params, "offset")
        if offset > node.dims["T"]:
            raise ConfigError(f"param offset {offset} is past the end of every window (T = {node.dims['T']})")
        number_param(node.params, "weight", low=0)
        return {}

    def kernel(self, node, backend, views, shared):
        return CrossEntropyKernel(backend, node.params["offset"], float(node.params["weight"]))


OPS = [CrossEntropyOp()]
