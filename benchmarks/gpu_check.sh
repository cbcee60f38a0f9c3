#!/usr/bin/env bash
# Every GPU check in one go, for a machine with an NVIDIA GPU, CuPy and (for the comparison) PyTorch.
#
#   bash benchmarks/gpu_check.sh            # environment, kernel compile checks, GPU tests, full benchmark
#   bash benchmarks/gpu_check.sh --quick    # the same with a short benchmark (arguments go to bench_gpu.py)
#
# Installs nothing from the network: it assumes CuPy (and PyTorch) are there, and makes microgpt
# importable with `pip install -e . --no-deps --no-build-isolation` (or, failing that, PYTHONPATH=src).
# Each stage has a time limit (TEST_TIMEOUT, BENCH_TIMEOUT seconds), and a failing stage does not stop
# the later ones; the exit status is non-zero when any stage failed. With $OUT set, every stage's
# output is also written there: env.txt, compile_tests.txt, emulated_ops.txt, gpu_tests.txt (+ .xml), bench_gpu.txt (+ .json),
# bench_bf16.txt (+ .json).
# STAGES (default "env compile_tests emulated_ops gpu_tests bench_gpu bench_bf16") picks the stages, e.g. STAGES="env gpu_tests bench_bf16"
# on a lent GPU machine whose minutes are counted (the compile tests run on any CPU, in CI too).
# The benchmark times both attention paths (flash, the default, and materialised) unless told otherwise.
# bench_bf16 times --precision bf16 against fp32 (flash attention) and torch autocast bf16 on the same GPU
# (bench_gpu.py --precision fp32,bf16; bf16 needs compute capability 8.0 or later, and says so otherwise).
set -uo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
TEST_TIMEOUT=${TEST_TIMEOUT:-420}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-420}
OUT_DIR=${OUT:-}
[ -n "$OUT_DIR" ] && mkdir -p "$OUT_DIR"
status=0

STAGES=${STAGES:-env compile_tests emulated_ops gpu_tests bench_gpu bench_bf16}

# run NAME CMD...: run a stage (if STAGES names it), show its output, keep a copy as $OUT/NAME.txt, remember a failure.
run() {
    local name=$1
    shift
    case " $STAGES " in *" $name "*) ;; *) echo "=== $name: not in STAGES, skipped"; return 0 ;; esac
    echo "=== $name: $*"
    local rc
    if [ -n "$OUT_DIR" ]; then
        "$@" 2>&1 | tee "$OUT_DIR/$name.txt"
        rc=${PIPESTATUS[0]}
    else
        "$@" 2>&1
        rc=$?
    fi
    echo "=== $name: exit $rc"
    [ "$rc" -ne 0 ] && status=1
    return 0
}

# Is `import microgpt` this checkout's src/? If not, install it (editable) or point PYTHONPATH at it.
if ! "$PYTHON" -c "import microgpt, pathlib as p; assert p.Path(microgpt.__file__).resolve().is_relative_to(p.Path('src').resolve())" 2>/dev/null; then
    echo "=== making this checkout's microgpt importable"
    if ! "$PYTHON" -m pip install --quiet --no-deps --no-build-isolation -e .; then
        echo "pip install -e . failed; using PYTHONPATH=src instead"
        export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    fi
fi

environment() {
    nvidia-smi || echo "nvidia-smi is not available"
    "$PYTHON" - <<'EOF'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("numpy", "cupy", "torch", "safetensors", "tqdm", "pytest"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as exc:
        print(f"{name}: not importable ({exc})")
from microgpt.backends.cuda import CuBLASBackend
try:
    backend = CuBLASBackend()
    print("cuda backend: usable on device", backend.device_id)
    backend.finalize()
except Exception as exc:
    print("cuda backend: NOT usable:", exc)
EOF
}

run env environment
# the CPU checks of the kernels: nvcc/NVRTC compiles, and the kernels run on the CPU emulator (needs g++)
run compile_tests timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest -q -p no:cacheprovider tests/backends/test_kernels_compile.py \
    tests/backends/test_cuda_emulated.py tests/backends/test_cuda_emulated_determinism.py tests/backends/test_cuda_emulator_selftest.py \
    tests/backends/test_bf16_cuda_emulated.py
run emulated_ops timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest -q -p no:cacheprovider tests/backends/test_ops.py -k cuda-emulated
# every gpu-marked test: op parity, flash attention (T = 1..4096, widths 1-128), bit-identical trainings,
# training on a non-blocking stream, long contexts, tests/backends/test_ops.py on the cuda backend, and bf16's
# products, attention and a short training run against the numpy backend at bf16 (test_bf16_cuda_emulated.py)
run gpu_tests timeout "$TEST_TIMEOUT" "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider -rs \
    ${OUT_DIR:+--junitxml "$OUT_DIR/gpu_tests.xml"}
run bench_gpu timeout "$BENCH_TIMEOUT" "$PYTHON" benchmarks/bench_gpu.py "$@" \
    ${OUT_DIR:+--json "$OUT_DIR/bench_gpu.json"}
run bench_bf16 timeout "$BENCH_TIMEOUT" "$PYTHON" benchmarks/bench_gpu.py --precision fp32,bf16 --attention flash "$@" \
    ${OUT_DIR:+--json "$OUT_DIR/bench_bf16.json"}

echo "=== gpu_check: $([ "$status" -eq 0 ] && echo "all stages passed" || echo "SOME STAGES FAILED")"
exit "$status"
