"""Data at scale: `microgpt prepare` on a generated corpus, and training from the dataset it makes.

The corpus is made from the bundled text (../shared/data/tinyshakespeare.txt where it is there, else the
Python docs every interpreter carries) by a seeded generator: every line is distinct (each of the source's
lines with a running number and a few words drawn at random after it), written as several .jsonl.gz files
(one record per paragraph) and .txt files, up to --size. Measured, in one run:

- prepare's throughput in MB/s of input text, char and bpe, against a plain reference on the same files:
  Python reading them and the `tokenizers` library's batch encode into one numpy array (the char reference
  is a dictionary lookup per character through numpy);
- the peak resident memory of prepare, and of 200 training steps from the dataset, at --size and at 10 MB
  (the goal: under 100 MiB apart);
- the time from `microgpt train DIR` to the end of its first step at --size (the goal: under 5 s, nothing
  re-tokenized).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_data.py              # 1 GB
    python benchmarks/bench_data.py --size 200MB --bpe-size 50MB --workdir /tmp/bench-data

bpe at 1 GB takes long on two cores (the library encodes 1-2 MB/s a core there), so --bpe-size caps the
corpus the bpe figures use.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from microgpt.core.checks import parse_size
from microgpt.core.machine import describe

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu import cpu_model_name

SOURCE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
WORDS = ["the", "of", "and", "to", "a", "in", "that", "is", "was", "he", "for", "it", "with", "as", "his", "on", "be", "at", "by", "had"]
FILES = 8  # half .jsonl.gz, half .txt


def source_lines() -> list[str]:
    if SOURCE.is_file():
        text = SOURCE.read_text(encoding="utf-8")
    else:
        from microgpt.data.corpus import default_corpus

        text = default_corpus()[0]
    return [line for line in text.splitlines() if line.strip()]


def make_corpus(directory: Path, size: int, seed: int = 0) -> int:
    """Write about `size` bytes of distinct lines as FILES files; the bytes of text written."""
    directory.mkdir(parents=True, exist_ok=True)
    lines, rng = source_lines(), np.random.default_rng(seed)
    per_file, written, number = size // FILES, 0, 0
    for i in range(FILES):
        compressed = i % 2 == 0
        path = directory / (f"part{i}.jsonl.gz" if compressed else f"part{i}.txt")
        with (gzip.open(path, "wt", encoding="utf-8", compresslevel=1) if compressed
              else open(path, "w", encoding="utf-8")) as out:
            done = 0
            while done < per_file:
                paragraph = []
                for _ in range(8):
                    extra = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 3))
                    paragraph.append(f"{lines[number % len(lines)]} {number} {extra}")
                    number += 1
                text = "\n".join(paragraph) + "\n"
                out.write(json.dumps({"text": text}) + "\n" if compressed else text + "\n")
                done += len(text.encode("utf-8"))
            written += done
    return written


def peak_of(command: list[str]) -> tuple[float, float]:
    """(seconds, peak resident MiB of the largest process) of a command run to its end."""
    probe = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
             "r = subprocess.run(sys.argv[1:]); s = time.perf_counter() - t; "
             "print(s, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024); sys.exit(r.returncode)")
    result = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    seconds, peak = result.stdout.split()[-2:]
    return float(seconds), float(peak)


def prepare(inputs: Path, out: Path, tokenizer: str, workers: int) -> tuple[float, float]:
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "microgpt", "prepare", str(inputs), "--out", str(out), "--tokenizer",
               tokenizer, "--workers", str(workers), "--quiet"]
    if tokenizer == "bpe":
        command += ["--vocab-size", "512"]
    return peak_of(command)


def reference(inputs: Path, tokenizer: str) -> float:
    """Seconds for the plain reference: read every file, encode it, one numpy array."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    started = time.perf_counter()
    texts = []
    for path in sorted(inputs.iterdir()):
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                texts += [json.loads(line)["text"] for line in f]
        else:
            texts.append(path.read_text(encoding="utf-8"))
    if tokenizer == "char":
        table = np.zeros(0x110000, dtype=np.uint16)
        for text in texts:
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            _ = table[codes]
    else:
        model = Tokenizer(models.BPE())
        model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        model.train_from_iterator(texts[:2000], trainers.BpeTrainer(vocab_size=512, show_progress=False))
        ids = [np.asarray(e.ids, dtype=np.uint16) for e in model.encode_batch(texts)]
        _ = np.concatenate(ids)
    return time.perf_counter() - started


def train(dataset: Path, steps: int) -> tuple[float, float]:
    return peak_of([sys.executable, "-m", "microgpt", "train", str(dataset), "--steps", str(steps), "--no-save",
                    "--gen", "0", "--quiet", "--backend", "cpu", "--eval-every", str(max(steps, 1))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GB", help="the corpus at scale (default: 1GB)")
    parser.add_argument("--bpe-size", default="100MB", help="the corpus the bpe figures use (default: 100MB)")
    parser.add_argument("--workdir", default="/tmp/microgpt-bench-data")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    work = Path(args.workdir)
    print(f"{cpu_model_name()}; {describe()}")
    sizes = {"small": parse_size("10MB"), "bpe": parse_size(args.bpe_size), "large": parse_size(args.size)}
    made = {}
    for name, size in sizes.items():
        made[name] = make_corpus(work / f"corpus-{name}", size)
        print(f"corpus {name}: {made[name] / 1e6:,.0f} MB of text in {FILES} files ({work / f'corpus-{name}'})")
    print(f"\nprepare, {args.workers} workers: MB/s of text (the whole command), and the plain reference's")
    peaks = {}
    for tokenizer, name in (("char", "large"), ("bpe", "bpe")):
        seconds, peaks[tokenizer] = prepare(work / f"corpus-{name}", work / f"data-{tokenizer}-{name}", tokenizer,
                                            args.workers)
        plain = reference(work / f"corpus-{name}", tokenizer)
        mb = made[name] / 1e6
        print(f"  {tokenizer:<5} {mb:7,.0f} MB: prepare {mb / seconds:6.1f} MB/s ({seconds:.1f} s, peak "
              f"{peaks[tokenizer]:.0f} MiB); reference {mb / plain:6.1f} MB/s; prepare / reference {plain / seconds:.2f}")
    print("\npeak resident memory, MiB (prepare char; training from the dataset)")
    small_prepare = prepare(work / "corpus-small", work / "data-char-small", "char", args.workers)[1]
    large_prepare = peaks["char"]
    small_train = train(work / "data-char-small", args.steps)[1]
    large_train = train(work / "data-char-large", args.steps)[1]
    print(f"  prepare: {small_prepare:.0f} at 10 MB, {large_prepare:.0f} at {made['large'] / 1e6:,.0f} MB "
          f"(difference {large_prepare - small_prepare:+.0f})")
    print(f"  train {args.steps} steps: {small_train:.0f} at 10 MB, {large_train:.0f} at {made['large'] / 1e6:,.0f} "
          f"MB (difference {large_train - small_train:+.0f})")
    first, _ = train(work / "data-char-large", 1)
    print(f"\nmicrogpt train DIR to the end of its first step at {made['large'] / 1e6:,.0f} MB: {first:.1f} s "
          "(the shards' checksums read, nothing tokenized)")


if __name__ == "__main__":
    main()
