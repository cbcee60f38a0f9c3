"""The original µGPT's addition data: `python examples/addition.py OUT_DIR [--seed S]`.

Writes OUT_DIR/addition.txt, every sum `X + Y = Z` for X and Y in 0..99 (10,000 lines, `12 + 34 = 46`), in
an order shuffled with the seed (0 by default), and OUT_DIR/addition-prompts.tsv, 14 lines of
`prompt<TAB>answer` for `microgpt eval MODEL --prompts`: 7 sums from the training range and 7 whose operands
lie outside it. A prompt is its training line up to and including the `=`, with no space after it, so the
model's next character is always the space before the answer (exact matching ignores it); ending there
also keeps a bpe model's tokens as in training, where the space begins the answer's token. It begins with
`\n`, the newline that every training line follows (eval gives the model each prompt as written and nothing
before it, and a bare context start is no line start to a model trained on windows cut anywhere).

    python examples/addition.py data/addition
    microgpt train data/addition/addition.txt --model checkpoints/addition
    microgpt eval checkpoints/addition --prompts data/addition/addition-prompts.tsv
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

OPERANDS = range(100)  # X and Y of the training sums
IN_RANGE = [(12, 34), (0, 0), (7, 5), (99, 99), (50, 49), (63, 28), (8, 91)]
OUT_OF_RANGE = [(123, 456), (999, 1), (100, 100), (250, 250), (1000, 24), (345, 67), (512, 512)]


def line(x: int, y: int) -> str:
    return f"{x} + {y} = {x + y}"


def prompt(x: int, y: int) -> str:
    """The sum's line up to and including `=`: what the model continues."""
    text = line(x, y)
    return text[: text.index("=") + 1]


def training_text(seed: int) -> str:
    """Every sum of OPERANDS, one a line, shuffled with `seed`."""
    lines = [line(x, y) for x in OPERANDS for y in OPERANDS]
    random.Random(seed).shuffle(lines)
    return "\n".join(lines) + "\n"


def prompt_file() -> str:
    """The prompts, each after a newline (`\\n`, the file's escape for one), a tab, and its answer."""
    return "".join(f"\\n{prompt(x, y)}\t{x + y}\n" for x, y in IN_RANGE + OUT_OF_RANGE)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="addition.py", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", metavar="OUT_DIR", help="where to write addition.txt and addition-prompts.tsv")
    parser.add_argument("--seed", type=int, default=0, help="seeds the order of the lines (default: 0)")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "addition.txt").write_text(training_text(args.seed), encoding="utf-8")
        (out / "addition-prompts.tsv").write_text(prompt_file(), encoding="utf-8")
    except OSError as exc:
        print(f"addition.py: error: cannot write in {out} ({exc.strerror or exc}); give a writable OUT_DIR",
              file=sys.stderr)
        return 2
    print(f"wrote {out / 'addition.txt'} ({len(OPERANDS) ** 2:,} sums, seed {args.seed}) and {out / 'addition-prompts.tsv'} "
          f"({len(IN_RANGE)} prompts in range, {len(OUT_OF_RANGE)} outside it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
