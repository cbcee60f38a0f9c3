"""The cooperative ensemble: experts in order over a shared stream, a prior before them, a router mixing them.

    s = 0 (B*T x B_stream)
    s += prior(ids)                                         (with --prior, until --prior-off-at)
    for each expert i: logits_i, write_i = expert_i(ids, s);  s += write_i
    (after the prior and after every expert, the stream beyond --active-dims is zeroed)
    w = router(ids, s)                                      (B*T x n, rows summing to 1)
    loss = cross-entropy(sum_i w_i * logits_i)

Backward hands expert i the mixed logits' gradient times 1/n (`equal`, the original's rule) or times w_i
(`routed`, the true gradient), and runs the stream's gradient back through the experts in reverse order.
`Passes` is one forward/backward bound to a set of gradient buffers, so that the trainer can run each
thread's slice of a batch on its own (model/thread_split.py). The experts are numbered as the docs number them: the prior is expert 0 and the
transformer experts 1 to n (their parameters keep the names experts.0 .. experts.<n-1>, their place in
--cooperative). Per-step diagnostics (the metrics log): each transformer expert's mean write norm
(expert<i>_write_norm), the mean cosine between the stream before and after it (expert<i>_stream_cos) and its
mean router weight (expert<i>_router_weight); the prior's write norm (expert0_write_norm) and its cosine with
the final stream (expert0_final_cos). `routing(ids)` gives, per position, each transformer expert's router
weight and the prior's share of the writes into the stream.
"""

from __future__ import annotations

import numpy as np

from microgpt.model.ensemble.config import EnsembleConfig
from microgpt.model.ensemble.decode import EnsembleDecoder
from microgpt.model.ensemble.expert import Expert, expert_specs
from microgpt.model.ensemble.priors import Prior, prior_specs
from microgpt.model.params import Parameters, ParameterViews, ParamSpec
from microgpt.model.priors import check_calculator_tokenizer, ngram_table
from microgpt.model.rope import RopeTables
from microgpt.model.router import Router, router_specs


def param_specs(config: EnsembleConfig, prefix: str = "") -> list[ParamSpec]:
    """Each expert's (experts.<i>.*), the router's and the prior's parameters, in the order they are drawn: the
    prior's last, so one seed starts the experts and the router alike with every --prior (a comparison of priors
    on a seed is a comparison of priors alone)."""
    specs = []
    for i, spec in enumerate(config.experts):
        specs += expert_specs(f"experts.{i}.", spec, config.d_ff(spec), config.vocab_size, config.stream_dim,
                              config.expert_init)
    specs += router_specs(config.router, len(config.experts), config.stream_dim, config.vocab_size)
    specs += prior_specs(config.prior, config.vocab_size, config.stream_dim, config.seq_len, config.prior_bias)
    return [ParamSpec(prefix + s.name, s.shape, s.init_std, s.init_value, s.decay, s.trainable) for s in specs]


def _row_norms(a) -> np.ndarray:
    """Each row's Euclidean norm (rows,) on the host, from either backend."""
    return np.asarray(((a * a).sum(axis=1) ** 0.5).tolist(), dtype=np.float64).reshape(-1)


def _row_cosines(a, b) -> float:
    """The mean cosine between the rows of a and b (B*T, width), over rows where both are nonzero."""
    dots, norms = (a * b).sum(axis=1), ((a * a).sum(axis=1) * (b * b).sum(axis=1)) ** 0.5
    dots, norms = np.asarray(dots.tolist()), np.asarray(norms.tolist())  # host copies, from either backend
    kept = norms > 0
    return float((dots[kept] / norms[kept]).mean()) if kept.any() else 0.0


class Passes:
    """The ensemble's forward and backward over one set of gradient buffers."""

    def __init__(self, backend, config: EnsembleConfig, views: ParameterViews, rope: RopeTables, tokenizer,
                 step_of):
        self.be, self.config, self.step_of = backend, config, step_of
        self.prior = None if config.prior == "none" else Prior(backend, views, config.prior, config.vocab_size,
                                                                config.stream_dim, tokenizer)
        self.experts = [Expert(backend, views, f"experts.{i}.", spec, rope) for i, spec in enumerate(config.experts)]
        self.router = Router(backend, views, config.router, len(self.experts), config.router_epsilon)

    def _narrow(self, stream) -> None:
        """Zero the stream beyond --active-dims, in place (the same on its gradient going back)."""
        if self.config.active < self.config.stream_dim:
            stream[:, self.config.active :] = 0.0

    def prior_on(self) -> bool:
        """Whether the prior writes: in training step s (s - 1 steps done) while s < --prior-off-at; after
        training (a validation, a loaded model), as the next step would (steps done + 1 < --prior-off-at)."""
        off_at = self.config.prior_off_at
        return self.prior is not None and (off_at is None or self.step_of() + 1 < off_at)

    def prior_writes(self) -> bool:
        """Whether the prior's row writes anything: while it is on, and after that a projection's bias (its
        features are then zeros, as the graph's prior op gives them)."""
        return self.prior_on() or (self.prior is not None and self.prior.bias)

    def forward(self, ids_host: np.ndarray):
        """(mixed logits (B*T, V), what backward needs) for host ids (B, T)."""
        be = self.be
        batch, seq_len = ids_host.shape
        ids = be.ids(ids_host.reshape(-1))  # (B*T,)
        stream = be.zeros((batch * seq_len, self.config.stream_dim))  # (B*T, B_stream)
        prior_saved = None
        if self.prior_writes():
            prior_write, prior_saved = self.prior.write(ids_host, ids, on=self.prior_on())
            stream = be.add(stream, prior_write)
            self._narrow(stream)
        streams, expert_logits, expert_saved = [stream], [], []
        for expert in self.experts:
            logits, write, saved = expert.forward(ids, streams[-1], batch, seq_len)
            after = be.add(streams[-1], write)  # (B*T, B_stream)
            self._narrow(after)
            streams.append(after)
            expert_logits.append(logits)
            expert_saved.append(saved)
        weights, router_saved = self.router.forward(ids_host, streams[-1])  # (B*T, n) host
        on_device = be.from_host(weights)  # (B*T, n)
        mixed = be.zeros(expert_logits[0].shape)  # (B*T, V)
        for k, logits in enumerate(expert_logits):
            be.add_(mixed, logits * on_device[:, k : k + 1])
        return mixed, (ids_host, streams, expert_logits, expert_saved, weights, on_device, router_saved,
                       prior_saved)

    def backward(self, dmixed, saved) -> None:
        """Every parameter gradient from dmixed (B*T, V), the gradient of forward's mixed logits."""
        be, n = self.be, len(self.experts)
        ids_host, streams, expert_logits, expert_saved, _, on_device, router_saved, prior_saved = saved
        batch, seq_len = ids_host.shape
        dweights = np.stack([np.asarray(be.to_host((dmixed * logits).sum(axis=1))).reshape(-1)
                             for logits in expert_logits], axis=1)  # (B*T, n): <dmixed, logits_k> per row
        dfinal = self.router.backward(dweights, router_saved)
        dstream = be.zeros(streams[-1].shape) if dfinal is None else be.from_host(dfinal)  # (B*T, B_stream)
        for k in range(n - 1, -1, -1):
            self._narrow(dstream)  # the stream after expert k was narrowed
            share = dmixed * (1.0 / n) if self.config.expert_grad == "equal" else dmixed * on_device[:, k : k + 1]
            be.add_(dstream, self.experts[k].backward(share, dstream, expert_saved[k], batch, seq_len))
        if prior_saved is not None:
            self._narrow(dstream)
            self.prior.backward(dstream, prior_saved)

    def loss(self, windows) -> float:
        windows = np.asarray(windows)
        mixed, _ = self.forward(windows[:, :-1])
        loss, _ = self.be.fused_softmax_ce_grad(mixed, self.be.ids(windows[:, 1:].reshape(-1)))
        return loss

    def loss_and_backward(self, windows):
        windows = np.asarray(windows)
        mixed, saved = self.forward(windows[:, :-1])
        loss, dmixed = self.be.fused_softmax_ce_grad(mixed, self.be.ids(windows[:, 1:].reshape(-1)))
        self.backward(dmixed, saved)
        return loss, self.diagnostics(saved)

    def diagnostics(self, saved) -> dict[str, float]:
        """The step's figures, the prior as expert 0 and transformer expert k as expert k + 1."""
        _, streams, _, _, weights, _, _, prior_saved = saved
        found = {}
        for k in range(len(self.experts)):
            write = streams[k + 1] - streams[k]
            found[f"expert{k + 1}_write_norm"] = float(((write * write).sum(axis=1) ** 0.5).mean())
            found[f"expert{k + 1}_stream_cos"] = _row_cosines(streams[k], streams[k + 1])
            found[f"expert{k + 1}_router_weight"] = float(weights[:, k].mean())
        if prior_saved is not None and self.prior_on():
            found["expert0_write_norm"] = float(_row_norms(streams[0]).mean())
            found["expert0_final_cos"] = _row_cosines(streams[0], streams[-1])
        return found

    def routing(self, ids_host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(weights (B, T, n), prior share (B, T)) for host ids (B, T): the router weights that mix transformer
        experts 1..n at each position (rows sum to 1), and the prior's write's norm over the sum of every
        write's norm there (the prior's and each expert's; 0 without a prior; once it is off, its bias's)."""
        _, saved = self.forward(ids_host)
        _, streams, _, _, weights, _, _, prior_saved = saved
        batch, seq_len = ids_host.shape
        norms = [_row_norms(streams[k + 1] - streams[k]) for k in range(len(self.experts))]  # each (B*T,)
        prior = _row_norms(streams[0]) if prior_saved is not None else np.zeros(batch * seq_len)
        total = prior + sum(norms)
        share = np.divide(prior, total, out=np.zeros_like(prior), where=total > 0)
        return (np.asarray(weights, dtype=np.float64).reshape(batch, seq_len, -1), share.reshape(batch, seq_len))


class Ensemble:
    """The whole model: one flat parameter store, and its passes over it."""

    def __init__(self, config: EnsembleConfig, backend, tokenizer, seed: int):
        self.config, self.be = config, backend
        if config.prior == "calculator":
            check_calculator_tokenizer(tokenizer)
        self.params = Parameters(backend, param_specs(config))
        self.params.initialize(seed)
        self.rope, self.tokenizer = RopeTables(backend, config.seq_len), tokenizer
        self.passes = self.with_gradients(self.params)  # the passes adding into params.grad

    def with_gradients(self, views: ParameterViews) -> Passes:
        """The ensemble's passes over the same weights, adding their gradients into views.gradient (a thread's slice
        of a batch, model/thread_split.py)."""
        return Passes(self.be, self.config, views, self.rope, self.tokenizer, lambda: self.params.step)

    @property
    def n_params(self) -> int:
        return self.params.total

    def learn_from(self, tokens: np.ndarray) -> None:
        """Count the n-gram prior's table from the training tokens (a new model, before it trains)."""
        if self.config.prior in ("bigram", "trigram"):
            table = ngram_table(self.config.prior, tokens, self.config.vocab_size)
            self.params.value["prior.table"][...] = self.be.from_host(table)

    def loss(self, windows) -> float:
        return self.passes.loss(windows)

    def loss_and_backward(self, windows):
        return self.passes.loss_and_backward(windows)

    def logits(self, ids):
        """Backend mixed logits (B*T, V) for host ids (B, T)."""
        mixed, _ = self.passes.forward(np.asarray(ids))
        return mixed

    def routing(self, ids) -> tuple[np.ndarray, np.ndarray]:
        """Host (weights (B, T, n), the prior's share (B, T)) for host ids (B, T) (Passes.routing)."""
        return self.passes.routing(np.asarray(ids))

    def decoder(self) -> EnsembleDecoder:
        """A KV-cached decoder for one sequence (decode.py)."""
        return EnsembleDecoder(self)
