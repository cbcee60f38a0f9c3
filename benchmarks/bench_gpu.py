"""GPU training throughput: microgpt's CUDA backend against eager PyTorch on CUDA, same model, same data.

Three cases, vocab 65:
  a  d 64,  2 layers,  4 heads, d_ff 256,  T 128,  B 1   (the reference default)
  b  d 384, 6 layers,  6 heads, d_ff 1536, T 256,  B 64
  c  d 768, 12 layers, 12 heads, d_ff 3072, T 1024, B 8  (GPT-2 small's shape)

Both sides start from the same weights (ours, copied into TorchGPT), train with
Adam on the same windows, and read the loss back to the host every step (ours
returns it; torch calls .item()). Warm-up steps are not timed; the timed steps
are bracketed by device synchronisation. At fp32 (the default) everything is
float32 and TF32 is switched off in PyTorch, so both sides do the same arithmetic.
With --precision fp32,bf16 each case also runs microgpt at --precision bf16 (bf16
product inputs, float32 accumulation; attention on the materialised path) and
PyTorch eager under `torch.autocast("cuda", dtype=torch.bfloat16)`, on the same GPU.

    python3 benchmarks/bench_gpu.py              # all cases
    python3 benchmarks/bench_gpu.py --quick      # fewer steps
    python3 benchmarks/bench_gpu.py --cases a,b --json results.json
    python3 benchmarks/bench_gpu.py --attention flash   # our default path only (both are timed otherwise)
    python3 benchmarks/bench_gpu.py --precision fp32,bf16 --attention flash   # bf16 against fp32 and autocast

Data: tinyshakespeare from ../shared/data/ (or ../shared/) when it is there,
otherwise random token ids. Without a usable PyTorch CUDA, ours runs alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.backends import BackendUnavailable
from microgpt.backends.cuda import CuBLASBackend
from microgpt.backends.numpy_backend import NumpyBackend
from microgpt.model.gpt import GPT, GPTConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling modules below
from corpus import load_tokens

VOCAB_SIZE = 65
LR = 3e-4
SEED = 0
BF16_NAME = "microgpt bf16"

try:
    import torch

    from torch_gpt import TorchGPT, load_from_microgpt, make_adam, train_step

    TORCH_ERROR = None if torch.cuda.is_available() else f"torch {torch.__version__} sees no CUDA device"
except ImportError as exc:
    TORCH_ERROR = f"torch is not importable ({exc})"


@dataclass(frozen=True)
class Case:
    name: str
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    seq_len: int
    batch: int

    def config(self) -> GPTConfig:
        width = self.d_model // self.n_heads
        return GPTConfig(
            vocab_size=VOCAB_SIZE, d_model=self.d_model, n_layers=self.n_layers,
            head_dims=(width,) * self.n_heads, d_ff=self.d_ff, seq_len=self.seq_len,
        )  # fmt: skip

    def describe(self) -> str:
        return (
            f"d{self.d_model} L{self.n_layers} H{self.n_heads} ff{self.d_ff} T{self.seq_len} B{self.batch}"
        )


CASES = {
    "a": Case("a", 64, 2, 4, 256, 128, 1),
    "b": Case("b", 384, 6, 6, 1536, 256, 64),
    "c": Case("c", 768, 12, 12, 3072, 1024, 8),
}


def sample_windows(tokens: np.ndarray, case: Case, count: int) -> list[np.ndarray]:
    """count batches of random windows, each (batch, seq_len + 1)."""
    rng = np.random.default_rng(SEED)
    starts = rng.integers(0, len(tokens) - case.seq_len - 1, size=(count, case.batch))  # (count, B)
    offsets = np.arange(case.seq_len + 1)  # (T+1,)
    return [tokens[row[:, None] + offsets[None, :]] for row in starts]


class OursTrainer:
    def __init__(self, config: GPTConfig, initial: dict[str, np.ndarray], attention: str = "flash",
                 precision: str = "fp32"):
        self.backend = CuBLASBackend(attention=attention)
        self.backend.use_precision(precision)
        self.model = GPT(config, self.backend, seed=SEED)
        self.model.params.from_host(initial)

    def step(self, windows: np.ndarray) -> float:
        return self.model.train_step(windows, LR)

    def sync(self) -> None:
        self.backend.sync()

    def peak_bytes(self) -> int:
        """What CuPy's pool holds: it keeps freed blocks until finalize, so this is the run's peak."""
        import cupy

        return cupy.get_default_memory_pool().total_bytes()

    def close(self) -> None:
        self.backend.finalize()


class TorchTrainer:
    name = "torch cuda eager"
    autocast_name = "torch autocast bf16"

    def __init__(self, config: GPTConfig, initial: dict[str, np.ndarray], autocast: bool = False):
        self.device = torch.device("cuda")
        self.autocast = autocast
        self.model = TorchGPT(
            config.vocab_size, config.d_model, config.n_layers, config.head_dims, config.d_ff, config.seq_len
        ).to(self.device)
        load_from_microgpt(self.model, initial)
        self.optimizer = make_adam(self.model, LR)
        torch.cuda.reset_peak_memory_stats()

    def step(self, windows: np.ndarray) -> float:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            return train_step(self.model, self.optimizer, torch.from_numpy(windows).to(self.device))

    def sync(self) -> None:
        torch.cuda.synchronize()

    def peak_bytes(self) -> int:
        return torch.cuda.max_memory_allocated()

    def close(self) -> None:
        del self.model, self.optimizer
        torch.cuda.empty_cache()


def time_trainer(trainer, batches: list[np.ndarray], warmup: int) -> dict:
    """Seconds for the timed steps (after `warmup` untimed ones), the last loss and the peak memory."""
    for windows in batches[:warmup]:
        trainer.step(windows)
    trainer.sync()
    start = time.perf_counter()
    for windows in batches[warmup:]:
        loss = trainer.step(windows)
    trainer.sync()
    return {"seconds": time.perf_counter() - start, "loss": loss, "peak_gib": trainer.peak_bytes() / 2**30}


def bench_case(case: Case, tokens: np.ndarray, args) -> dict[str, dict]:
    """Results per framework for one case; a framework that fails (out of memory, say) reports its error."""
    config = case.config()
    initial = GPT(config, NumpyBackend(), seed=SEED).params.to_host()  # the same start for both sides
    batches = sample_windows(tokens, case, args.warmup + args.steps)
    results = {}
    trainers = {}
    if "fp32" in args.precision:
        for kind in args.attention:
            trainers[f"microgpt {kind}"] = lambda kind=kind: OursTrainer(config, initial, kind)
        if TORCH_ERROR is None:
            trainers[TorchTrainer.name] = lambda: TorchTrainer(config, initial)
    if "bf16" in args.precision:  # attention runs materialised at bf16 whatever is asked
        trainers[BF16_NAME] = lambda: OursTrainer(config, initial, "flash", "bf16")
        if TORCH_ERROR is None:
            trainers[TorchTrainer.autocast_name] = lambda: TorchTrainer(config, initial, autocast=True)
    for name, make in trainers.items():
        trainer = None
        try:
            trainer = make()
            result = time_trainer(trainer, batches, args.warmup)
        except Exception as exc:  # noqa: BLE001 - report the failure and go on with the other cases
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        finally:
            if trainer is not None:
                trainer.close()
        result["tokens_per_s"] = case.batch * case.seq_len * args.steps / result["seconds"]
        result["ms_per_step"] = 1000 * result["seconds"] / args.steps
        results[name] = result
    return results


def print_table(all_results: dict[str, dict[str, dict]]) -> None:
    print()
    header = f"{'case':<4} {'shape':<30} {'framework':<21} {'tokens/s':>12} {'ms/step':>9} {'peak GiB':>9}"
    print(f"{header} {'loss':>8}")
    for case_name, results in all_results.items():
        for framework, r in results.items():
            shape = CASES[case_name].describe()
            if "error" in r:
                print(f"{case_name:<4} {shape:<30} {framework:<21} failed: {r['error']}")
                continue
            print(
                f"{case_name:<4} {shape:<30} {framework:<21} {r['tokens_per_s']:>12,.0f} "
                f"{r['ms_per_step']:>9.2f} {r['peak_gib']:>9.2f} {r['loss']:>8.4f}"
            )
    print()
    for case_name, results in all_results.items():
        for framework, ours in results.items():
            if not framework.startswith("microgpt") or "tokens_per_s" not in ours:
                continue
            against = [TorchTrainer.name]
            if framework == BF16_NAME:  # bf16 against torch at fp32 and under autocast, and our own fp32
                against += [TorchTrainer.autocast_name, *(name for name in results if name.startswith("microgpt f"))]
            for other in against:
                if "tokens_per_s" in results.get(other, {}):
                    ratio = ours["tokens_per_s"] / results[other]["tokens_per_s"]
                    print(f"case {case_name}: {framework} / {other} = {ratio:.2f}x  ({CASES[case_name].describe()})")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="a,b,c", help="comma-separated cases to run (default a,b,c)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case (default 20)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    parser.add_argument("--quick", action="store_true", help="5 timed steps after 1 warm-up")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--precision", default="fp32",
                        help="precisions to time, comma-separated: fp32, bf16 or both (default fp32)")
    parser.add_argument("--attention", default="flash,materialised",
                        help="our attention paths to time, comma-separated (default flash,materialised)")
    args = parser.parse_args(argv)
    args.attention = [kind.strip() for kind in args.attention.split(",") if kind.strip()]
    if not args.attention or set(args.attention) - {"flash", "materialised"}:
        parser.error("--attention takes flash, materialised or both")
    args.precision = [name.strip() for name in args.precision.split(",") if name.strip()]
    if not args.precision or set(args.precision) - {"fp32", "bf16"}:
        parser.error("--precision takes fp32, bf16 or both")
    if args.quick:
        args.steps, args.warmup = 5, 1
    args.cases = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in args.cases if name not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {', '.join(CASES)}")
    if args.steps < 1 or args.warmup < 0:
        parser.error("--steps must be at least 1 and --warmup at least 0")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        CuBLASBackend().finalize()
    except BackendUnavailable as exc:
        print(f"the cuda backend is not usable here: {exc}", file=sys.stderr)
        return 1
    import cupy

    tokens, source = load_tokens(VOCAB_SIZE, SEED, n_random=2_000_000)
    device_name = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.runtime.getDevice())["name"]
    device_name = device_name.decode() if isinstance(device_name, bytes) else device_name
    print(f"device: {device_name}, CuPy {cupy.__version__}")
    print(f"data: {source}")
    precisions = " and ".join(args.precision)
    print(f"timing: {args.steps} steps after {args.warmup} warm-up, {precisions}, loss read back every step")
    if TORCH_ERROR is None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        autocast = ", and under autocast bf16" if "bf16" in args.precision else ""
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), TF32 off, eager{autocast}, SDPA attention")
    else:
        print(f"{TORCH_ERROR}: timing microgpt alone")
    all_results = {}
    for name in args.cases:
        print(f"case {name}: {CASES[name].describe()} ...", flush=True)
        all_results[name] = bench_case(CASES[name], tokens, args)
    print_table(all_results)
    if args.json is not None:
        args.json.write_text(json.dumps(all_results, indent=2))
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
