"""The cpu backend beyond the op tests: repeatable training, parity with NumPy, checkpoints both ways,
the thread knob, the registry's fallback without numba, and the kernel cache.

Op-level correctness is in test_ops.py, gradients in test_gradcheck.py and the
PyTorch cross-check in test_torch_reference.py, all of which run on cpu too.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from microgpt.backends import get_backend
from microgpt.backends.cpu_backend import HALVES_MIN_LEN
from microgpt.backends.cpu_kernels.jit import first_private
from microgpt.core.errors import ConfigError
from microgpt.core.threads import available_cores, set_threads
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.checkpoint import load_checkpoint, save_checkpoint
from microgpt.model.gpt import GPT, GPTConfig
from microgpt.model.thread_split import ThreadSplit
from microgpt.parallel.communicator import SingleProcess
from microgpt.training.data_parallel import train_step
from microgpt.training.optim import Optimizer
from microgpt.use.sample import generate

pytestmark = pytest.mark.usefixtures("all_cores_after")  # tests/conftest.py: each starts from every core

VOCAB = "\n abcdefghijklmnopqrstuvwxyz.,;"
# heads of 16 (the reference width), an odd one and a width-1 one; T not a multiple of the kernels' 16-key blocks
CONFIG = GPTConfig(vocab_size=len(VOCAB), d_model=40, n_layers=2, head_dims=(16, 16, 7, 1), d_ff=72, seq_len=37)


def batches(count: int, batch: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, CONFIG.vocab_size, size=(batch, CONFIG.seq_len + 1)) for _ in range(count)]  # (B, T+1)


def losses(backend, steps: int = 6) -> list[float]:
    """The losses of a training step's path: the batch split over the backend's threads, the reference's Adam."""
    model = GPT(CONFIG, backend, seed=1)
    split, adam = ThreadSplit(model), Optimizer.reference(model.params, 1e-2)
    return [train_step(split, windows, adam, SingleProcess()).loss for windows in batches(steps)]


def test_same_seed_and_threads_give_bit_identical_losses():
    # every reduction in the kernels has a fixed order and the threads' slices are combined in a fixed order,
    # so a rerun repeats every bit
    first = losses(get_backend("cpu", threads=available_cores()))
    second = losses(get_backend("cpu", threads=available_cores()))
    assert first == second


@pytest.mark.skipif(available_cores() < 2, reason="needs two cores to compare thread counts")
def test_thread_counts_agree():
    # With two threads the batch of 3 runs as slices of 2 and 1 sequences at once, whose mean losses and
    # gradients are combined: the same sums in another order (and BLAS may split a product differently),
    # which moves the float32 losses by a few ulp a step. Over 6 Adam steps at lr 1e-2 that stays below
    # 1e-5 relative; a wrong slice weight would be off by percents.
    one = losses(get_backend("cpu", threads=1))
    two = losses(get_backend("cpu", threads=2))
    np.testing.assert_allclose(one, two, rtol=1e-5)


def test_training_matches_the_numpy_backend():
    # Both float32, the same math in a different order: per-op differences of ~1e-7 relative, carried
    # through 6 Adam steps; 1e-4 leaves room for that and is far below any real difference (1e-2).
    np.testing.assert_allclose(losses(get_backend("cpu")), losses(get_backend("numpy")), rtol=1e-4)


@pytest.mark.parametrize("trained_on,loaded_on", [("cpu", "numpy"), ("numpy", "cpu")])
def test_checkpoint_trained_on_one_backend_loads_and_samples_on_the_other(tmp_path, trained_on, loaded_on):
    model = GPT(CONFIG, get_backend(trained_on), seed=2)
    for windows in batches(3):
        model.train_step(windows, 1e-2)
    save_checkpoint(tmp_path / "ck", model, CharTokenizer(VOCAB), {}, family_name="gpt")
    loaded, tokenizer, _ = load_checkpoint(tmp_path / "ck", get_backend(loaded_on), with_optimizer=True)
    assert loaded.be.name == loaded_on and tokenizer.vocab == VOCAB
    rows = [0, 2, 3]  # weights, m and v; float32 on both backends, so the copy is exact
    np.testing.assert_array_equal(loaded.params.storage[rows], model.params.storage[rows])
    ids = batches(1)[0][:, :-1]
    # float32 forward passes in a different order: logits of size ~5 agree to ~1e-6
    np.testing.assert_allclose(loaded.logits(ids), model.logits(ids), rtol=1e-5, atol=1e-5)
    tokenizer = CharTokenizer(VOCAB)
    # greedy decoding from the same weights picks the same characters (no near-ties at this seed)
    assert generate(loaded, tokenizer, "ab", 20, temperature=0) == generate(model, tokenizer, "ab", 20, temperature=0)
    loaded.train_step(batches(1)[0], 1e-2)  # the optimizer state came along and training goes on


def test_backend_reports_its_threads():
    assert get_backend("cpu", threads=1).threads == 1
    assert get_backend("cpu").threads == available_cores()


@pytest.mark.parametrize("bad", [0, -1, available_cores() + 1, 1.5, "2", True])
def test_invalid_thread_counts_are_a_config_error(bad):
    with pytest.raises(ConfigError, match=f"threads must be a whole number from 1 to {available_cores()}"):
        set_threads(bad)


def test_set_threads_sets_blas_and_numba_together():
    import numba
    from threadpoolctl import threadpool_info

    assert set_threads(1) == 1
    assert numba.get_num_threads() == 1
    assert all(pool["num_threads"] == 1 for pool in threadpool_info() if pool["user_api"] == "blas")


def run_python(script: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, check=False)


def test_without_numba_auto_falls_back_to_numpy_and_cpu_names_the_fix():
    done = run_python("""
        import sys
        sys.modules["numba"] = None  # makes `import numba` raise ImportError
        from microgpt.backends import BackendUnavailable, get_backend, resolve_auto
        assert resolve_auto() == "numpy"
        try:
            get_backend("cpu")
        except BackendUnavailable as exc:
            print(exc)
        """)
    assert done.returncode == 0, done.stderr
    assert "pip install numba" in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "falls back to numpy" in lines[0] and "numba" in lines[0], done.stderr


def test_first_private_skips_paths_that_cannot_be_made(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert first_private([blocker / "cache", tmp_path / "ok"])[0] == tmp_path / "ok"
    path, refused = first_private([blocker / "cache"])
    assert path is None and "cannot be made" in refused[0]
    assert stat.S_IMODE((tmp_path / "ok").stat().st_mode) == 0o700  # made private


def test_a_cache_directory_other_users_can_write_or_a_symlink_is_never_used(tmp_path):
    """numba unpickles its cache: a directory another user can write could run their code as this user."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    (tmp_path / "mine").mkdir(mode=0o700)
    path, refused = first_private([shared, link, tmp_path / "private"])
    assert path == tmp_path / "private"
    assert "can be written by other users (mode 777)" in refused[0] and "symlink" in refused[1]


@pytest.mark.skipif(os.geteuid() != 0, reason="making a directory of another user needs root")
def test_a_cache_directory_planted_by_another_user_is_never_used(tmp_path):
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    path, refused = first_private([planted])
    assert path is None and "belongs to another user (uid 65534)" in refused[0]
    # and the whole backend, with the temporary directory's fallback taken by another user first:
    fallback = tmp_path / f"microgpt-numba-{os.geteuid()}"
    fallback.mkdir(mode=0o700)
    os.chown(fallback, 65534, 65534)
    (tmp_path / "a-file").write_text("")  # the user's cache directory cannot be made under a file
    script = f"import tempfile; tempfile.tempdir = {str(tmp_path)!r}\n" + textwrap.dedent(TRAIN_ONE_STEP)
    done = run_python(script, {"NUMBA_CACHE_DIR": str(planted), "XDG_CACHE_HOME": str(tmp_path / "a-file")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("None ") and "belongs to another user" in done.stderr
    assert os.listdir(fallback) == [] and os.listdir(planted) == []


TRAIN_ONE_STEP = """
    import numpy as np
    from microgpt.backends import get_backend
    from microgpt.backends.cpu_kernels import jit
    from microgpt.model.gpt import GPTConfig
    from microgpt.model.gpt import GPT
    model = GPT(GPTConfig(vocab_size=5, d_model=8, n_layers=1, head_dims=(4, 4), d_ff=8, seq_len=4),
                get_backend("cpu"))
    print(jit.CACHE_DIR, model.train_step(np.zeros((1, 5), dtype=np.int64), 1e-2))
    """


def test_compiles_once_into_a_writable_cache_and_says_so_only_then(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {"NUMBA_CACHE_DIR": str(blocker / "numba"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    cold = run_python(TRAIN_ONE_STEP, env)
    assert cold.returncode == 0, cold.stderr
    # NUMBA_CACHE_DIR cannot be made (its parent is a file), so the user cache dir is used
    assert cold.stdout.startswith(str(tmp_path / "xdg" / "microgpt" / "numba"))
    assert "compiling the cpu backend's kernels" in cold.stderr
    warm = run_python(TRAIN_ONE_STEP, env)
    assert warm.returncode == 0, warm.stderr
    assert "compiling" not in warm.stderr
    assert warm.stdout == cold.stdout  # the same cache and, from cached kernels, the same loss


def test_works_without_any_writable_cache_directory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = str(blocker / "x")
    script = "import tempfile; tempfile.tempdir = " + repr(unwritable) + "\n" + textwrap.dedent(TRAIN_ONE_STEP)
    done = run_python(script, {"NUMBA_CACHE_DIR": unwritable, "XDG_CACHE_HOME": unwritable})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("None ")  # no cache directory: compiled in memory, and it trains
    assert "no private cache directory" in done.stderr


@pytest.mark.parametrize("n, t, w", [(3, HALVES_MIN_LEN, 16), (2, 67, 5), (4, 130, 32), (1, 257, 1)])
def test_attention_in_halves_matches_the_reference(n, t, w):
    # From HALVES_MIN_LEN on, the cpu backend runs the first half of the queries against the first half of
    # the keys only; odd lengths make the halves unequal. float64: the same sums in the same order up to
    # BLAS's blocking, so 1e-12 of the largest value.
    rng = np.random.default_rng(t)
    q, k, v, dout = (rng.standard_normal((n, t, w)) * 3 for _ in range(4))  # (n, T, w) each; scores up to ~30
    cpu, reference = get_backend("cpu", dtype=np.float64), get_backend("numpy", dtype=np.float64)
    out, saved = cpu.causal_attention(q, k, v, 0.5)
    expected, expected_saved = reference.causal_attention(q, k, v, 0.5)
    assert type(saved).__name__ == "CausalHalves"  # the halves were taken
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12 * np.abs(expected).max())
    for grad, want in zip(cpu.causal_attention_backward(dout, saved, 0.5),
                          reference.causal_attention_backward(dout, expected_saved, 0.5)):
        np.testing.assert_allclose(grad, want, rtol=0, atol=1e-12 * np.abs(want).max())
