"""--precision bf16 on the cuda backend, held against the numpy backend at bf16 (the specification): the products
(cuBLAS GemmEx on bf16 inputs rounded by elementwise.cu's `round_bf16`, float32 accumulation), the bits the
LayerNorm, ReLU and softmax kernels write beside their outputs and the products then read, attention and a
short training run. On the CPU emulator (tests/cuda_emulator, whose GemmEx multiplies the inputs' exact values
as its sgemm does), and once more on a real GPU, `gpu`-marked, where one is usable. A GPU without bf16 tensor
cores refuses bf16 in one line."""

from __future__ import annotations

import numpy as np
import pytest

from backend_kinds import CUDA_SKIP
from cuda_emulator import fake_cupy
from family_shapes import VARIANTS, VOCAB
from microgpt.backends import BackendUnavailable
from microgpt.backends.bf16 import bf16_bits
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.data.tokenizer import CharTokenizer
from microgpt.model.family import family
from microgpt.model.gpt import GPT, GPTConfig

RNG = np.random.default_rng(0)
# float32 accumulation of ~40 products of O(1) bf16 values, against numpy's float32 order of the same sums
TOL = {"rtol": 1e-5, "atol": 1e-5}


@pytest.fixture(params=["emulated", pytest.param("gpu", marks=[
    pytest.mark.gpu, pytest.mark.skipif(CUDA_SKIP is not None, reason=str(CUDA_SKIP))])])
def cuda(request):
    """A cuda backend at bf16: on the CPU emulator, or on the GPU."""
    if request.param == "emulated":
        be = request.getfixturevalue("emulated")[0]
    else:
        from microgpt.backends.cuda import CuBLASBackend

        be = CuBLASBackend()
        request.addfinalizer(be.finalize)
    be.use_precision("bf16")
    return be


def spec():
    be = NumpyBackend()
    be.use_precision("bf16")
    return be


def arrays(*shapes):
    return [RNG.standard_normal(shape).astype(np.float32) for shape in shapes]


def test_rounding_kernel_is_the_specification(cuda):
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -3e-39, 3.4028235e38, -3.4028235e38,
                        1.00390625, 1.01171875, 1.0 + 2**-8 + 2**-20], dtype=np.float32)  # ties to even, above one
    x = np.concatenate([special, RNG.standard_normal(1000).astype(np.float32) * 10.0 ** RNG.integers(-30, 30, 1000)])
    x = x.astype(np.float32)
    bits = cuda._bits(cuda.from_host(x))
    got = np.empty(x.shape, np.uint16)
    got[...] = bits.get() if hasattr(bits, "get") else bits
    assert np.array_equal(got, bf16_bits(x))


def host(a) -> np.ndarray:
    """A device array's values on the host (the emulator's arrays are already there)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def producers(be, x, gamma, beta, grad):
    """(the float32 outputs of every kernel that writes a product's input, at bf16 its bits too; those of the plain
    softmaxes, which keep none)."""
    causal = x[: x.shape[1] * (x.shape[0] // x.shape[1])]  # whole (T, T) blocks
    probs = be.fused_attn_softmax(causal, 0.3)
    rounded = [be.layer_norm_forward(x, gamma, beta)[0], be.relu_forward(x)[0], be.fused_bias_relu(x.copy(), beta)[0],
               be.relu_backward(grad, be.relu_forward(x)[1]), probs,
               be.fused_attn_softmax_backward(probs, grad[: probs.shape[0]], 0.3)]
    return rounded, [be.softmax_rows(x), be.softmax_backward(be.softmax_rows(x), grad)]


@pytest.mark.parametrize("cols", [16, 65, 384])
def test_the_kernels_write_the_specifications_rounding_beside_unchanged_fp32_outputs(cuda, cols):
    """LayerNorm, the ReLUs and attention's softmax and its backward keep their output's bits as bf16_bits rounds
    it, and their float32 outputs are the fp32 kernels' bit for bit (the `_bf16` twins share one body with them);
    the plain softmaxes (a distribution over the vocabulary) keep no bits."""
    rng = np.random.default_rng(cols)
    x, grad = (rng.standard_normal((2 * cols, cols)) * np.exp(rng.uniform(-6, 6, (2 * cols, 1))) for _ in "ab")
    x, grad = cuda.from_host(x.astype(np.float32)), cuda.from_host(grad.astype(np.float32))
    gamma, beta = (cuda.from_host(rng.standard_normal((1, cols)).astype(np.float32)) for _ in "ab")
    cuda.use_precision("fp32")
    plain, plain_softmaxes = producers(cuda, x, gamma, beta, grad)
    assert all(cuda._rounded.find(out) is None for out in plain + plain_softmaxes)
    cuda.use_precision("bf16")
    rounded, softmaxes = producers(cuda, x, gamma, beta, grad)
    for want, got in zip(plain + plain_softmaxes, rounded + softmaxes):
        assert np.array_equal(host(got), host(want), equal_nan=True)
    for got in rounded:
        assert np.array_equal(host(cuda._rounded.find(got)), bf16_bits(host(got)))
    assert all(cuda._rounded.find(out) is None for out in softmaxes)


def test_a_kept_output_is_rounded_once_and_its_bits_forgotten_when_it_is_written(cuda, monkeypatch):
    """LayerNorm's output read by three products and a batched one is never rounded again; once an op writes
    into it or into a view of it (add_, scale_, zero_, an in-place kernel, a product's destination), its bits are
    dropped and the next product rounds the new values, so a product never reads bits that are not its input's;
    the bits go with the output, or when it is released."""
    ref = spec()
    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((32, 16), (16, 8), (1, 16)))
    gamma, beta = cuda.from_host(np.ones((1, 16), np.float32)), cuda.from_host(b)
    out, weight = cuda.layer_norm_forward(cuda.from_host(x), gamma, beta)[0], cuda.from_host(w)
    rounded, per_element = [], cuda._per_element
    monkeypatch.setattr(cuda, "_per_element", lambda f, k, n, *args: (rounded.append(args[0]) if k == "round_bf16"
                                                                         else None) or per_element(f, k, n, *args))
    for _ in range(3):
        cuda.matmul(out, weight)
    cuda.bmm(out.reshape(2, 16, 16), out.reshape(2, 16, 16), transpose_a=True)
    assert rounded and all(r is weight for r in rounded)
    square = cuda.from_host(rng.standard_normal((16, 16)).astype(np.float32))
    for write in (lambda a: cuda.add_(a, a), lambda a: cuda.scale_(a.reshape(16, 32), -3.0),
                  lambda a: cuda.bias_add(a, beta), lambda a: cuda.add_(a.reshape(2, 16, 16)[1], square),
                  lambda a: cuda.matmul_into(cuda.from_host(x[:16]), square, a.reshape(2, 16, 16)[0], accumulate=True),
                  lambda a: cuda.zero_(a)):
        assert cuda._rounded.find(out) is not None
        write(out)
        assert cuda._rounded.find(out) is None
        assert np.allclose(host(cuda.matmul(out, weight)), ref.matmul(host(out), w), **TOL)
        cuda._keep_bits(out, cuda._bits(out))  # kept again, for the next write
    assert any(r is out for r in rounded)  # after each write, rounded afresh
    rounded.clear()
    cuda.release(out)
    assert cuda._rounded.find(out) is None
    out = cuda.layer_norm_forward(cuda.from_host(x), gamma, beta)[0]
    before = len(cuda._rounded._kept)
    del out
    assert len(cuda._rounded._kept) == before - 1


@pytest.mark.parametrize(("name", "shape"), VARIANTS)
def test_the_kept_bits_change_no_loss_of_any_family(emulated, name, shape):
    """Every family and head kind trains at bf16 to the same losses and weights, bit for bit, with the kernels'
    kept bits read by the products as with every input rounded afresh: no product read a stale output's bits."""
    be = emulated[0]
    be.use_precision("bf16")

    def train():
        kind = family(name)
        model = kind.build(kind.Config(vocab_size=VOCAB, **shape), be, CharTokenizer("abcdefghijk"), 3)
        rng = np.random.default_rng(1)
        losses = []
        for _ in range(3):
            model.params.zero_grad()
            losses.append(model.loss_and_backward(rng.integers(0, VOCAB, size=(3, shape["seq_len"] + 1))))
            model.params.adam_step(1e-2)
        return losses, be.to_host(model.params.data)

    found, find = [], be._rounded.find
    be._rounded.find = lambda x: found.append(find(x) is not None) or find(x)
    losses, weights = train()
    assert sum(found) > 0  # products did read kept bits
    be._keep_bits = lambda out, bits: out  # now every product input is rounded as it is read
    again, again_weights = train()
    assert again == losses and np.array_equal(again_weights, weights)


def test_attention_memory_counts_the_probabilities_bits(cuda):
    """At bf16 the materialised path keeps its probabilities' bits (half a float32 each) beside them."""
    kept, temporary = cuda.attention_memory(6, 32, 16)
    cuda.use_precision("fp32")
    cuda.attention = "materialised"
    assert (kept, temporary) == (6 * 32 * 32 * 3 // 2, 6 * 32 * 32 * 7 // 2)
    assert cuda.attention_memory(6, 32, 16) == (6 * 32 * 32, 3 * 6 * 32 * 32)


def test_products_agree_with_the_specification(cuda):
    ref = spec()
    a, b, c = arrays((24, 40), (40, 16), (16, 40))
    got = cuda.to_host(cuda.matmul(cuda.from_host(a), cuda.from_host(b)))
    assert np.allclose(got, ref.matmul(a, b), **TOL)
    assert np.abs(got - a @ b).max() > 1e-3  # rounded: not the float32 product
    got = cuda.to_host(cuda.matmul(cuda.from_host(b), cuda.from_host(a), True, True))
    assert np.allclose(got, ref.matmul(b, a, True, True), **TOL)
    got = cuda.to_host(cuda.matmul(cuda.from_host(a), cuda.from_host(c), transpose_b=True))
    assert np.allclose(got, ref.matmul(a, c, transpose_b=True), **TOL)
    dst, want = cuda.from_host(np.ones((40, 40), np.float32)), np.ones((40, 40), np.float32)
    cuda.matmul_into(cuda.from_host(a), cuda.from_host(a), dst, transpose_a=True, accumulate=True)
    ref.matmul_into(a, a, want, transpose_a=True, accumulate=True)
    assert np.allclose(cuda.to_host(dst), want, rtol=1e-5, atol=1e-4)
    x, y = arrays((3, 8, 5), (3, 8, 6))
    for ta, tb, yy in ((True, False, y), (True, True, y.transpose(0, 2, 1).copy())):
        got = cuda.to_host(cuda.bmm(cuda.from_host(x), cuda.from_host(yy), ta, tb))
        assert np.allclose(got, ref.bmm(x, yy, ta, tb), **TOL)


@pytest.mark.parametrize("seq_len", [8, 33])
def test_attention_takes_the_rounded_products(cuda, seq_len):
    """At bf16 attention runs the materialised path (its bmm products round); the flash kernels do not round."""
    ref = spec()
    q, k, v, dout = arrays(*[(4, seq_len, 16)] * 4)
    out, saved = cuda.causal_attention(*(cuda.from_host(t) for t in (q, k, v)), 0.25)
    assert saved[0] == "materialised"
    ref_out, ref_saved = ref.causal_attention(q, k, v, 0.25)
    grads = cuda.causal_attention_backward(cuda.from_host(dout), saved, 0.25)
    # the softmax kernels' float32 differs from numpy's in the last bit, which can move a probability across a
    # bf16 rounding boundary: one bf16 step (2^-8 of it) in an input of the next product, no more
    for got, want in zip((out, *grads), (ref_out, *ref.causal_attention_backward(dout, ref_saved, 0.25))):
        assert np.abs(cuda.to_host(got) - want).max() <= 2.0**-8 * np.abs(want).max()


def test_short_training_run_tracks_the_specification(cuda):
    config = GPTConfig(vocab_size=11, d_model=16, n_layers=1, head_dims=(4, 4, 8), d_ff=24, seq_len=9)
    windows = np.random.default_rng(2).integers(0, 11, (4, 2, config.seq_len + 1))
    ours, theirs = GPT(config, cuda, seed=3), GPT(config, spec(), seed=3)
    got = [ours.train_step(w, 1e-2) for w in windows]
    want = [theirs.train_step(w, 1e-2) for w in windows]
    assert np.allclose(got, want, rtol=0, atol=2e-3), (got, want)
    params = cuda.to_host(ours.params.data)
    assert np.abs(params - theirs.params.data).max() < 2e-3
    fp32 = GPT(config, NumpyBackend(), seed=3)
    assert [fp32.train_step(w, 1e-2) for w in windows] != got  # bf16 did round


def test_a_gpu_without_bf16_tensor_cores_refuses_in_one_line(emulated, monkeypatch):
    be, _ = emulated
    monkeypatch.setitem(fake_cupy.DEVICE, "compute_capability", "75")
    monkeypatch.setitem(fake_cupy.DEVICE, "name", b"Tesla T4")
    with pytest.raises(BackendUnavailable, match=r"Tesla T4 \(device 0\) is 7\.5.*--precision fp32") as caught:
        be.use_precision("bf16")
    assert "\n" not in str(caught.value) and be.precision == "fp32"
    monkeypatch.setitem(fake_cupy.DEVICE, "compute_capability", "80")
    be.use_precision("bf16")
    assert be.precision == "bf16"
