"""A char model and a byte-level BPE model of the same parameter count, side by side on held-out text.

    python benchmarks/bpe_vs_char.py [TEXT] [--steps N]

TEXT (default: ../shared/data/tinyshakespeare.txt) is split into its first 90% (training; the BPE merges
are learnt from it alone) and its last 10% (held out, never seen). Both models are gpt d_model 96, 4 layers,
seq_len 64 tokens, trained for the same steps and batch; the char model's d_ff is raised so that its
parameter count matches the BPE model's, whose 512-token embedding and head are larger. Both are scored with
`eval --stride 32` on the held-out text; bits per character is the figure that compares across tokenizers
(nats per token does not: a BPE token stands for about two characters).
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path

import microgpt
from microgpt.data.tokenizer import train_tokenizer
from microgpt.model import gpt
from microgpt.model.family import n_params

DEFAULT_TEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"
SHAPE = {"d_model": 96, "n_layers": 4, "seq_len": 64}
BPE_VOCAB = 512


def cpu_model() -> str:
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def matching_d_ff(char_vocab: int, target: int) -> int:
    """The char model's d_ff whose parameter count is nearest the BPE model's."""
    def count(d_ff: int) -> int:
        return n_params(gpt, gpt.Config(vocab_size=char_vocab, d_ff=d_ff, **SHAPE))
    return min(range(64, 2048), key=lambda d_ff: abs(count(d_ff) - target))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("text", nargs="?", type=Path, default=DEFAULT_TEXT)
    parser.add_argument("--steps", type=int, default=1500)
    args = parser.parse_args()
    text = args.text.read_text(encoding="utf-8")
    cut = len(text) * 9 // 10
    with tempfile.TemporaryDirectory() as work:
        train_file, held_out = Path(work) / "train.txt", Path(work) / "held_out.txt"
        train_file.write_text(text[:cut], encoding="utf-8")
        held_out.write_text(text[cut:], encoding="utf-8")
        bpe_size = train_tokenizer("bpe", text[:cut], BPE_VOCAB).size
        bpe_params = n_params(gpt, gpt.Config(vocab_size=bpe_size, d_ff=4 * SHAPE["d_model"], **SHAPE))
        char_vocab = train_tokenizer("char", text[:cut], None).size
        runs = {"char": {"tokenizer": "char", "d_ff": matching_d_ff(char_vocab, bpe_params)},
                "bpe": {"tokenizer": "bpe", "vocab_size": BPE_VOCAB, "d_ff": 4 * SHAPE["d_model"]}}
        rows = []
        for name, settings in runs.items():
            model_dir = Path(work) / name
            start = time.perf_counter()
            run, summary = microgpt.train(str(train_file), steps=args.steps, batch_size=12, val_tokens=0, gen=0,
                                          model=str(model_dir), **SHAPE, **settings)
            seconds = time.perf_counter() - start
            result = microgpt.load(model_dir).evaluate(held_out.read_text(encoding="utf-8"), stride=32)
            rows.append((name, run.tokenizer.size, run.model.n_params, settings["d_ff"], summary.final_loss,
                         result.nll, result.bits_per_char, result.characters / result.positions, seconds))
    print(f"{args.text.name}: {cut:,} characters to train on, {len(text) - cut:,} held out; {args.steps} steps of "
          f"12 x {SHAPE['seq_len']} tokens; gpt d_model {SHAPE['d_model']}, {SHAPE['n_layers']} layers; "
          f"on {cpu_model()}")
    print("| tokenizer | vocab | parameters | d_ff | train loss (nats/token) | held-out nats/token | "
          "held-out bits/char | chars/token | train s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, vocab, params, d_ff, loss, nll, bpc, per_token, seconds in rows:
        print(f"| {name} | {vocab} | {params:,} | {d_ff} | {loss:.3f} | {nll:.3f} | {bpc:.3f} | {per_token:.2f} | "
              f"{seconds:.0f} |")


if __name__ == "__main__":
    main()
