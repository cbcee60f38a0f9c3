"""The cooperative ensemble: every part gradient-checked in float64, causal under every router and prior, the
cpu backend's batch split over threads against numpy, and the family through the CLI with its clear errors.

Gradient checks compare the backward against central differences of the loss, (L(x + h) - L(x - h)) / 2h
with h = 1e-6 in float64: the difference is then near 1e-9 relative for these smooth functions, so 1e-6 is a
bound a wrong term (off by a factor, a sign or a missing path) cannot meet. With --expert-grad equal the
experts' gradients are by design not the loss's: each expert gets the mixed logits' gradient over n. They are
checked against central differences of the surrogate sum_k <dmixed / n, logits_k>, with dmixed held at its
value, plus the loss with the experts' logits held (the path through the router, which a `global` router
opens from the stream to everything before it); the router's own gradient is the loss's under both rules.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from finite_differences import RTOL, numeric
from microgpt.backends import get_backend
from microgpt.cli import main
from microgpt.core.errors import ConfigError, as_keyword
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.priors import ngram_table
from microgpt.model.thread_split import ThreadSplit

TOKENIZER = CharTokenizer("0123456789+= \nab")
V = TOKENIZER.size


def tiny(**settings):
    kind = family("ensemble")
    config = kind.Config(vocab_size=V, **{"cooperative": "d4n1,d2+2n1", "stream_dim": 5, "seq_len": 7, **settings})
    model = kind.build(config, get_backend("numpy", dtype=np.float64), TOKENIZER, 3)
    rng = np.random.default_rng(0)
    if config.prior in ("bigram", "trigram"):
        model.learn_from(rng.integers(0, V, 300))
    model.params.from_host({name: value + rng.normal(0, 0.3, value.shape) * spec.trainable  # off the zero init
                            for (name, value), spec in zip(model.params.to_host().items(),
                                                           model.params.specs.values())})
    return model


def windows_of(seed: int = 1) -> np.ndarray:
    text = "12 + 34 = 46\n5 + 5 = 10\n7 + 1"  # sums, so the calculator has something to say
    ids = TOKENIZER.encode(text)
    starts = np.random.default_rng(seed).integers(0, len(ids) - 8, 3)
    return np.stack([ids[s : s + 8] for s in starts])  # (3, T+1)


def sampled_entries(model, rng, per_tensor: int = 3):
    """A few (name, flat index) per trainable tensor: every tensor is checked, at a few places."""
    for name, spec in model.params.specs.items():
        if spec.trainable:
            for index in rng.choice(spec.size, size=min(per_tensor, spec.size), replace=False):
                yield name, int(index)


def check(model, windows, function, names) -> None:
    model.params.zero_grad()
    model.loss_and_backward(windows)
    analytic = model.params.to_host(model.params.grad)
    for name, index in sampled_entries(model, np.random.default_rng(7)):
        if not names(name):
            continue
        expected = numeric(model, function, name, index)
        got = analytic[name].reshape(-1)[index]
        assert got == pytest.approx(expected, rel=RTOL, abs=1e-9), (name, index)


@pytest.mark.parametrize("settings", [
    {"router": "global"}, {"router": "context"}, {"router": "gated"},
    {"prior": "counter"}, {"prior": "bigram"}, {"prior": "trigram"}, {"prior": "calculator"},
    {"active_dims": 3, "prior": "counter", "router": "gated"},
], ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
def test_the_routed_gradient_is_the_losss(settings):
    model = tiny(expert_grad="routed", **settings)
    windows = windows_of()
    check(model, windows, lambda: model.loss(windows), lambda name: True)


@pytest.mark.parametrize("router", ["global", "gated"])
def test_the_equal_rule_gives_each_expert_the_mixed_gradient_over_n(router):
    model = tiny(expert_grad="equal", router=router, prior="bigram")
    windows = windows_of()
    passes, be = model.passes, model.be
    mixed, _ = passes.forward(windows[:, :-1])
    _, dmixed = be.fused_softmax_ce_grad(mixed, be.ids(windows[:, 1:].reshape(-1)))
    held = be.to_host(dmixed).copy()  # (B*T, V): the mixed gradient, held at its value
    _, (_, _, held_logits, *_rest) = passes.forward(windows[:, :-1])
    held_logits = [be.to_host(logits).copy() for logits in held_logits]  # each (B*T, V)
    targets = windows[:, 1:].reshape(-1)

    def surrogate() -> float:
        _, (ids, streams, expert_logits, *_rest) = passes.forward(windows[:, :-1])
        through_experts = sum(float((held * be.to_host(logits)).sum()) for logits in expert_logits) / 2
        weights, _ = passes.router.forward(ids, streams[-1])  # (B*T, 2): the router's path, logits held
        mixed = sum(weights[:, k : k + 1] * logits for k, logits in enumerate(held_logits))
        top = mixed.max(axis=1)
        through_router = np.mean(top + np.log(np.exp(mixed - top[:, None]).sum(axis=1)) - mixed[np.arange(len(targets)), targets])
        return through_experts + through_router

    check(model, windows, surrogate, lambda name: not name.startswith("router."))
    check(model, windows, lambda: model.loss(windows), lambda name: name.startswith("router."))


@pytest.mark.parametrize("prior", ["none", "counter", "bigram", "trigram", "calculator"])
@pytest.mark.parametrize("router", ["global", "context", "gated"])
def test_later_tokens_never_change_earlier_logits(prior, router):
    model = tiny(prior=prior, router=router)
    ids = windows_of(2)[:, :-1]  # (3, 7)
    t = 3
    changed = ids.copy()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % V
    before = model.be.to_host(model.logits(ids)).reshape(3, 7, V)
    after = model.be.to_host(model.logits(changed)).reshape(3, 7, V)
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], rtol=0, atol=1e-12)
    assert not np.allclose(after[:, t + 1 :], before[:, t + 1 :])


def test_the_cpu_backends_threads_slices_agree_with_numpy():
    kind = family("ensemble")
    config = kind.Config(vocab_size=V, cooperative="d8n1,d4+4n1", stream_dim=8, seq_len=12, prior="bigram",
                         router="gated")
    tokens = TOKENIZER.encode("12 + 34 = 46\n5 + 5 = 10\n" * 20)
    windows = np.stack([tokens[s : s + 13] for s in range(0, 200, 25)])  # (8, 13)
    runs = []
    for backend in (get_backend("numpy"), get_backend("cpu", threads=2)):
        model = kind.build(config, backend, TOKENIZER, 5)
        model.learn_from(tokens)
        model.params.zero_grad()
        loss, metrics = ThreadSplit(model).loss_and_backward(windows)  # the batch over the cpu backend's threads
        runs.append((loss, metrics, model.params.to_host(model.params.grad)))
    (loss, metrics, grads), (cpu_loss, cpu_metrics, cpu_grads) = runs
    # float32 on both, summed in another order across the two slices: rounding apart, ~1e-6 relative
    assert cpu_loss == pytest.approx(loss, rel=1e-5) and cpu_metrics == pytest.approx(metrics, rel=1e-4, abs=1e-6)
    for name, grad in grads.items():
        np.testing.assert_allclose(cpu_grads[name], grad, rtol=1e-3, atol=1e-6, err_msg=name)


TEXT = "".join(f"{x} + {y} = {x + y}\n" for x in range(0, 40, 3) for y in range(0, 40, 7))
TINY = ["--cooperative", "d8n1,d4+4n1", "--stream-dim", "8", "--seq-len", "16", "--batch-size", "4",
        "--backend", "numpy", "--threads", "1", "--val-tokens", "200", "--eval-every", "5", "--gen", "0"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sums.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "words.txt").write_text("the cat sat on the mat\n" * 40, encoding="utf-8")
    return tmp_path


def test_an_ensemble_trains_resumes_bit_identically_samples_and_scores(workdir, capsys):
    flags = ["sums.txt", *TINY, "--prior", "calculator", "--router", "context", "--quiet", "--decay-steps", "10"]
    assert main(["train", *flags, "--steps", "10", "--model", "whole"]) == 0
    assert main(["train", *flags, "--steps", "5", "--model", "parts"]) == 0
    assert main(["train", "--resume", "parts", "--steps", "10", "--quiet", "--gen", "0", "--backend", "numpy",
                 "--threads", "1"]) == 0  # the backend is the run's choice, not the checkpoint's
    whole, parts = (json.loads((workdir / f"{d}.metrics.jsonl").read_text().splitlines()[-1]) for d in ("whole", "parts"))
    assert whole["loss"] == parts["loss"] and whole["step"] == parts["step"] == 10
    # the docs' numbering: the prior is expert 0 (never routed), the transformer experts 1 and 2
    assert {"expert0_write_norm", "expert0_final_cos", "expert1_stream_cos", "expert2_router_weight"} <= set(whole)
    assert "expert0_router_weight" not in whole and "expert3_write_norm" not in whole
    config = json.loads((workdir / "whole" / "config.json").read_text())
    assert config["family"] == "ensemble" and config["model"]["prior"] == "calculator"
    capsys.readouterr()
    assert main(["sample", "whole", "--prompt", "1 + 2 =", "--tokens", "5", "--backend", "numpy"]) == 0
    assert len(capsys.readouterr().out.rstrip("\n")) == 5  # the continuation alone: sample prints no prompt
    assert main(["eval", "whole", "sums.txt", "--json", "--backend", "numpy", "--max-positions", "50"]) == 0
    assert json.loads(capsys.readouterr().out)["positions"] == 50


def test_the_n_gram_tables_are_counted_from_the_training_text_and_never_trained(workdir):
    assert main(["train", "words.txt", *TINY, "--prior", "bigram", "--steps", "6", "--model", "b", "--quiet"]) == 0
    from safetensors.numpy import load_file

    table = load_file(str(workdir / "b" / "model.safetensors"))["prior.table"]
    tokenizer = CharTokenizer.from_text("the cat sat on the mat\n")
    t, h = tokenizer.encode("t")[0], tokenizer.encode("h")[0]
    assert table[t].argmax() == h and np.allclose(table.sum(axis=1), 1.0, atol=1e-6)  # after t comes h


@pytest.mark.parametrize("flags, words", [
    (["--active-dims", "9"], "--active-dims 9 is wider than the stream (--stream-dim 8)"),
    (["--prior", "calculator"], "--prior calculator needs the digits"),
    (["--prior", "bigram", "--prior-off-at", "50"], "--prior-off-at 50 is past the end of the run (--steps 6)"),
    (["--cooperative", "d8n1,,d8n1"], "--cooperative d8n1,,d8n1 has an empty entry"),
    (["--cooperative", "d8"], "model spec 'd8' is not valid"),
    (["--d-model", "32"], "--d-model 32 does nothing here: the ensemble family has no d_model"),
])
def test_bad_ensemble_settings_are_one_clear_line(workdir, capsys, flags, words):
    assert main(["train", "words.txt", *TINY, "--steps", "6", "--no-save", *flags]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1, err


def test_ensemble_settings_without_cooperative_say_how_to_get_one(workdir, capsys):
    assert main(["train", "words.txt", "--router", "gated", "--steps", "2", "--no-save", "--backend", "numpy"]) == 2
    assert ("--router gated does nothing here: the gpt family has no router (it is the ensemble family's: add "
            "--cooperative ...)") in capsys.readouterr().err


@pytest.mark.parametrize("prior", ["none", "counter", "trigram", "calculator"])
@pytest.mark.parametrize("router", ["global", "context", "gated"])
def test_the_cached_decoder_gives_the_logits_of_re_running_the_model(prior, router):
    """Through the cache while the context fits in seq_len (16 here), and by re-running the window past it; in
    float64 the two paths differ by rounding only (1e-15 measured, 1e-12 allowed)."""
    from microgpt.model.decode import Rerun
    from microgpt.model.priors import calculator_rows
    from microgpt.use.sample import next_logits

    model = tiny(prior=prior, router=router, active_dims=4, seq_len=16)
    context = list(TOKENIZER.encode("\n12 + 34 = 4"))  # a whole line so far: the calculator has its say
    if prior == "calculator":
        prior = model.passes.prior
        features = calculator_rows(np.array(context)[None, :], prior.ids_of, prior.vocab, np.float64)  # (n, V)
        assert (features.max(axis=1) == 1.0).sum() == 3  # a one-hot after "=", " " and "4"
    cached, rerun = model.decoder(), Rerun(model)
    for _ in range(12):  # past seq_len
        expected = next_logits(context, rerun)
        np.testing.assert_allclose(next_logits(context, cached), expected, rtol=0, atol=1e-12)
        context.append(int(np.argmax(expected)))
    assert cached.rerun is not None  # it went past seq_len


def test_a_named_run_of_an_ensemble(workdir):
    (workdir / "runs.yaml").write_text("runs:\n  ens:\n    cooperative: d8n1,d4+4n1\n    stream_dim: 8\n    prior: counter\n"
                                       "    seq_len: 16\n    batch_size: 4\n    steps: 3\n    val_tokens: 0\n",
                                       encoding="utf-8")
    assert main(["train", "words.txt", "--config", "runs.yaml", "--run", "ens", "--backend", "numpy", "--quiet",
                 "--gen", "0"]) == 0
    config = json.loads((workdir / "checkpoints" / "ens" / "config.json").read_text())
    assert config["family"] == "ensemble" and config["model"]["prior"] == "counter"


def test_compare_trains_ensembles_side_by_side(workdir, capsys):
    flags = [f for f in TINY if f not in ("--cooperative", "d8n1,d4+4n1")]
    assert main(["train", "words.txt", "--family", "ensemble", "--compare", "d8n1,d8n1;d4n1,d4n1,d4n1", *flags,
                 "--steps", "3", "--model", "cmp"]) == 0
    out = capsys.readouterr().out
    assert "d8n1,d8n1 " in out and "d4n1,d4n1,d4n1 " in out  # a row of the table each
    assert (workdir / "cmp" / "d8n1,d8n1" / "config.json").is_file()
    assert main(["train", "words.txt", "--family", "ensemble", "--compare", "d8n1;d8n1", *flags, "--steps", "3",
                 "--no-save"]) == 2
    assert "lists an ensemble twice" in capsys.readouterr().err


def test_the_ensemble_runs_on_the_cuda_backend_as_on_numpy(emulated):
    """Through the backend contract (and array slicing and broadcasting CuPy shares with NumPy) only, so the
    CUDA backend runs it: here on the CPU emulator of tests/cuda_emulator, against numpy in float32 (the
    emulated kernels round differently; 1e-4 relative is far below what a missing term would change)."""
    cuda, _ = emulated
    kind = family("ensemble")
    config = kind.Config(vocab_size=V, cooperative="d8n1,d4+4n1", stream_dim=8, seq_len=12, prior="trigram",
                         router="gated", active_dims=6)
    tokens = TOKENIZER.encode("12 + 34 = 46\n5 + 5 = 10\n" * 20)
    windows = np.stack([tokens[s : s + 13] for s in range(0, 200, 50)])  # (4, 13)
    runs = []
    for backend in (get_backend("numpy"), cuda):
        model = kind.build(config, backend, TOKENIZER, 5)
        model.learn_from(tokens)
        model.params.zero_grad()
        loss, _ = model.loss_and_backward(windows)
        runs.append((loss, model.params.to_host(model.params.grad)))
    (loss, grads), (cuda_loss, cuda_grads) = runs
    assert cuda_loss == pytest.approx(loss, rel=1e-5)
    for name, grad in grads.items():
        np.testing.assert_allclose(cuda_grads[name], grad, rtol=1e-3, atol=1e-5, err_msg=name)


def test_the_prior_switches_off_at_its_step_in_training_and_after_it(workdir):
    assert main(["train", "sums.txt", *TINY, "--prior", "bigram", "--prior-off-at", "3", "--steps", "4",
                 "--model", "off", "--quiet"]) == 0
    records = [json.loads(line) for line in (workdir / "off.metrics.jsonl").read_text().splitlines()]
    assert ["expert0_final_cos" in r for r in records] == [True, True, False, False]  # steps 1, 2 with it
    from microgpt.use.loaded import load

    loaded = load(workdir / "off", backend="numpy")
    assert loaded.model.params.step == 4 and not loaded.model.passes.prior_on()  # served as it finished


def test_fine_tuning_an_ensemble_keeps_its_tables_and_its_config(workdir):
    from safetensors.numpy import load_file

    assert main(["train", "words.txt", *TINY, "--prior", "bigram", "--prior-off-at", "20", "--steps", "20",
                 "--model", "base", "--quiet"]) == 0
    assert main(["train", "sums.txt", "--init-from", "base", "--model", "tuned", "--steps", "3", "--backend", "numpy",
                 "--quiet", "--gen", "0", "--val-tokens", "0"]) == 0
    base, tuned = (load_file(str(workdir / d / "model.safetensors"))["prior.table"] for d in ("base", "tuned"))
    np.testing.assert_array_equal(tuned[: len(base), : len(base)], base)  # carried, not recounted from sums.txt


def test_the_tables_never_count_the_held_out_tokens(workdir):
    (workdir / "tail.txt").write_text("the cat sat on the mat\n" * 40 + "zq" * 150, encoding="utf-8")
    flags = [f for f in TINY if f not in ("--val-tokens", "200")]  # the last 300 tokens held out: all the zq
    assert main(["train", "tail.txt", *flags, "--val-tokens", "300", "--prior", "bigram", "--steps", "2",
                 "--model", "t", "--quiet"]) == 0
    from safetensors.numpy import load_file

    table = load_file(str(workdir / "t" / "model.safetensors"))["prior.table"]
    tokenizer = CharTokenizer.from_text((workdir / "tail.txt").read_text())
    z, q = tokenizer.encode("zq")
    assert table[z, q] == pytest.approx(1 / tokenizer.size)  # add-one smoothing alone: z never seen in training


def test_compare_counts_each_ensembles_tables_and_checks_before_training(workdir, capsys):
    flags = [f for f in TINY if f not in ("--cooperative", "d8n1,d4+4n1")]
    assert main(["train", "words.txt", "--family", "ensemble", "--compare", "d8n1;d4n1,d4n1", "--prior", "bigram",
                 *flags, "--steps", "2", "--model", "cmp", "--quiet"]) == 0
    from safetensors.numpy import load_file

    table = load_file(str(workdir / "cmp" / "d8n1" / "model.safetensors"))["prior.table"]
    assert table.max() > 0.5  # counted ("t" is followed by "h" most of the time), not the uniform start
    assert main(["train", "words.txt", "--family", "ensemble", "--compare", "d8n1;d4n1,d4n1", "--prior", "bigram",
                 "--prior-off-at", "50", *flags, "--steps", "2", "--model", "cmp2"]) == 2
    assert "--prior-off-at 50 is past the end of the run" in capsys.readouterr().err
    assert not (workdir / "cmp2").exists()


def test_the_whole_stream_is_one_setting_however_it_is_said():
    assert family("ensemble").Config(vocab_size=V, cooperative="d4n1", stream_dim=5, active_dims=5).active_dims is None


def test_a_trigram_table_for_a_bpe_vocabulary_is_refused_in_one_line():
    from microgpt.core.errors import ConfigError

    with pytest.raises(ConfigError, match="--prior trigram counts a table of .* entries for this vocabulary of 512"):
        family("ensemble").Config(vocab_size=512, cooperative="d4n1", prior="trigram")


def test_torchs_spread_changes_every_experts_weight_matrix_and_nothing_else():
    kind = family("ensemble")
    shape = {"vocab_size": 65, "cooperative": "d64n3,d32n2ff100", "stream_dim": 48, "seq_len": 128,
             "prior": "bigram"}
    he = {s.name: s for s in kind.param_specs(kind.Config(**shape, expert_init="he"))}
    torch_like = {s.name: s for s in kind.param_specs(kind.Config(**shape))}  # the default
    assert torch_like.keys() == he.keys()
    changed = 0
    for name, spec in torch_like.items():
        if name.startswith("experts.") and name.endswith(".w"):  # read, write, q/k/v/o, feed-forward, head
            assert spec.init_std == pytest.approx(1 / math.sqrt(3 * spec.shape[0])), name
            changed += 1
        else:  # embeddings, biases, LayerNorm, the prior and the router: as He's init has them
            assert spec.init_std == he[name].init_std, name
    assert changed == 3 * 6 + 2 * 6 + 2 * 3  # per block 4 projections and 2 feed-forward maps; head, read, write


def test_one_seed_starts_the_experts_and_the_router_alike_with_every_prior():
    """The prior's parameters are drawn after everything else, so a comparison of priors on one seed is one of
    priors alone (bench_ensemble's per-seed differences); with them drawn first every expert started elsewhere."""
    kind = family("ensemble")
    shape = {"vocab_size": V, "cooperative": "d4n1,d2+2n1", "stream_dim": 5, "seq_len": 7, "router": "gated"}
    started = {}
    for prior in ("none", "counter", "bigram", "trigram", "calculator"):
        model = kind.build(kind.Config(**shape, prior=prior), get_backend("numpy", dtype=np.float64), TOKENIZER, 3)
        started[prior] = model.params.to_host()
    shared = started["none"]
    assert any(name.startswith("experts.") for name in shared) and any(name.startswith("router.") for name in shared)
    for prior, weights in started.items():
        assert {name for name in weights if not name.startswith("prior.")} == set(shared), prior
        for name, value in shared.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=f"{prior}: {name}")


def test_a_prior_on_too_short_a_text_is_refused_naming_its_setting_in_each_front_ends_words():
    with pytest.raises(ConfigError) as raised:
        ngram_table("trigram", np.array([1, 2]), 4)
    assert raised.value.key == "prior"
    assert str(raised.value) == "--prior trigram counts runs of 3 tokens, and the training text has 2; give a longer text"
    assert raised.value.worded(as_keyword) == ("prior='trigram' counts runs of 3 tokens, and the training text has 2; "
                                               "give a longer text")
