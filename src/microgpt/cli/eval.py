"""`microgpt eval MODEL FILE`: a checkpoint's negative log-likelihood per token, perplexity and bits per character on a
text; or, with --prompts, its greedy answers to prompts and how many are right.

Scoring a FILE also gives every head's loss and top-1 agreement for a model with several heads (lookahead),
with --routing OUT.csv an ensemble's routing of the text, and with --fill-rate R how well the model fills
hidden tokens (use/head_scores.py, use/routing.py, use/fill.py).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults, train_settings
from microgpt.cli.sample import check_output_file, write_text_file
from microgpt.core.errors import ConfigError, DataError
from microgpt.core.fields import settings_fields
from microgpt.core.progress import Counter
from microgpt.data.corpus import read_corpus
from microgpt.data.dataset import is_dataset, open_dataset
from microgpt.settings.commands import EvalSettings
from microgpt.use.evaluate import evaluate, scorable_positions
from microgpt.use.fill import fill_rates, gap_heads
from microgpt.use.head_scores import score_heads
from microgpt.use.loaded import LoadedModel, load
from microgpt.use.prompts import Prompt, answer_prompts, read_prompts
from microgpt.use.routing import no_routing, routing_of


def add_parser(commands) -> None:
    p = commands.add_parser("eval", help="score a held-out text (NLL, perplexity, bits per character) or answer "
                            "prompts", description=__doc__.split("\n\n")[0].split(":", 1)[1].strip()
                            + " Every token from offset seq_len on is scored once, in windows of seq_len tokens "
                            "that each score their last S (--stride): a token gets between seq_len - S + 1 and "
                            "seq_len tokens of context. The default, S = seq_len, reads the text in consecutive "
                            "windows as training does, at the cost of a training step's forward; --stride 1 is "
                            "exact, each token with its full seq_len of context, and about seq_len times slower. "
                            "Bits per character compares models whatever their tokenizers; NLL and perplexity are "
                            "per token.")
    p.add_argument("model", metavar="MODEL", help="checkpoint directory (written by microgpt train)")
    p.add_argument("file", metavar="FILE", nargs="?", help="UTF-8 text to score (held out from training)")
    add_flags_with_defaults(p, settings_fields(EvalSettings)
                            + train_settings("backend", "threads", "precision", "max_memory", "max_corpus"))
    p.set_defaults(run=run)


def run(args) -> int:
    chosen = EvalSettings(**{f.field: getattr(args, f.key) for f in settings_fields(EvalSettings)})
    if args.file is not None and chosen.prompts is not None:
        raise ConfigError("give a FILE to score or --prompts FILE to answer, not both")
    if args.file is None and chosen.prompts is None:
        raise ConfigError("give a FILE to score, or --prompts FILE of prompt<TAB>answer lines to answer")
    prompts = None if chosen.prompts is None else read_prompts(chosen.prompts, args.max_corpus)
    loaded = load(args.model, backend=args.backend, threads=args.threads, max_memory=args.max_memory,
                  precision=args.precision)
    if loaded.backend_note:
        print(loaded.backend_note, file=sys.stderr)
    if prompts is not None:
        return answer(args.model, chosen, loaded, prompts)
    if chosen.routing is not None:
        if not hasattr(loaded.model, "routing"):
            raise no_routing(args.model, loaded.family_name)
        check_output_file(Path(chosen.routing), "--routing")
    return score(args, chosen, loaded)


def answer(model: str, chosen: EvalSettings, loaded: LoadedModel, prompts: list[Prompt]) -> int:
    """Print each prompt's greedy completion and whether it is the answer, then the count right."""
    answered = answer_prompts(loaded, prompts, chosen.prompts)
    if chosen.json:
        results = list(answered)
        correct = sum(a.correct for a in results)
        print(json.dumps({"model": model, "file": chosen.prompts, "correct": correct, "total": len(results),
                          "accuracy": correct / len(results),
                          "results": [{"line": a.prompt.line, "prompt": a.prompt.prompt, "answer": a.prompt.answer,
                                       "completion": a.completion, "correct": a.correct} for a in results]}))
        return 0
    print(f"{model} on {chosen.prompts}: greedy completions, each up to a newline or {loaded.seq_len} tokens")
    correct = 0
    for a in answered:
        correct += a.correct
        verdict = "right" if a.correct else "wrong"
        tail = "" if a.correct else f" (the answer: {a.prompt.answer.strip()!r})"
        print(f"  {verdict}  {a.prompt.prompt!r} -> {a.completion!r}{tail}", flush=True)
    print(f"{correct} of {len(prompts)} correct")
    return 0


def scored_tokens(args, loaded: LoadedModel):
    """The tokens of FILE, or of a prepared dataset's held-out split (read from its shards as scored), which the
    checkpoint's tokenizer must have made."""
    if not is_dataset(args.file):
        return loaded.tokenizer.encode(read_corpus(args.file, args.max_corpus), source=args.file)
    dataset = open_dataset(args.file)
    if dataset.tokenizer.to_json() != loaded.tokenizer.to_json():
        raise DataError(f"{args.file} was tokenized by {dataset.tokenizer.describe()}, and {args.model} reads "
                        f"{loaded.tokenizer.describe()}: its ids would mean other text; score a text file instead")
    if dataset.val is None:
        raise DataError(f"{args.file} holds nothing out (prepared with --val-fraction 0); score a text file, or "
                        "prepare it with a held-out split")
    print(f"scoring the held-out split of {dataset.description}", file=sys.stderr)
    return dataset.val


def score(args, chosen: EvalSettings, loaded: LoadedModel) -> int:
    """Score FILE: NLL per token, perplexity and bits per character."""
    model = loaded.model
    tokens = scored_tokens(args, loaded)
    # made before the first batch, so that its clock counts it: the first line's ETA is the first batch's pace
    counter = Counter(scorable_positions(len(tokens), model.config.seq_len, args.file, chosen.max_positions),
                      "token", f"scoring {args.file}")

    stride = model.config.seq_len if chosen.stride is None else chosen.stride
    batch = loaded.fitting_batch(chosen.batch_size)
    if batch < chosen.batch_size:
        print(f"note: --batch-size {chosen.batch_size} would need more than --max-memory {args.max_memory:,} bytes; "
              f"scoring {batch} windows at a time", file=sys.stderr)
    try:
        result = evaluate(model, tokens, batch_size=batch, max_positions=chosen.max_positions,
                          what=args.file, stride=stride, on_progress=lambda done, _: counter.update(done),
                          tokenizer=loaded.tokenizer)
    finally:
        counter.close()
    extras = extra_figures(args, chosen, loaded, tokens, batch, stride)
    if chosen.json:
        print(json.dumps({"model": args.model, "file": args.file, "positions": result.positions,
                          "characters": result.characters, "stride": stride, "nll": result.nll,
                          "perplexity": result.perplexity if math.isfinite(result.perplexity) else "inf",
                          "bits_per_char": None if math.isnan(result.bits_per_char) else result.bits_per_char,
                          "seconds": round(result.seconds, 3), **extras.json}))
        return 0
    seq_len = model.config.seq_len
    rate = result.positions / result.seconds if result.seconds > 0 else math.inf
    print(f"{args.model} on {args.file}")
    context = (f"the {seq_len} before it (exact)" if stride == 1 else
               f"{seq_len - stride + 1} to {seq_len} before it (--stride {stride}; --stride 1 for the exact figure, "
               "slower)")
    print(f"  scored:          {result.positions:,} tokens ({result.characters:,} characters), each with {context} "
          "as context")
    print(f"  NLL:             {result.nll:.4f} nats per token")
    print(f"  perplexity:      {result.perplexity:.4f} (per token)")
    print(f"  bits per char:   {result.bits_per_char:.4f} (compares across tokenizers)" if result.characters else
          "  bits per char:   none: the scored tokens start no character; score more of the text")
    print(f"  time:            {result.seconds:.2f} s ({rate:,.0f} tokens/s)")
    for line in extras.lines:
        print(line)
    return 0


class Extras:
    """What eval reports beside the score: each head's figures, the routing written, the fill rates."""

    def __init__(self):
        self.lines: list[str] = []
        self.json: dict = {}


def extra_figures(args, chosen: EvalSettings, loaded: LoadedModel, tokens, batch: int, stride: int) -> Extras:
    """Every head's held-out loss and top-1 agreement (a model with several heads), the routing CSV (--routing,
    its windows read with `stride` as the score's), and the fill rates (--fill-rate)."""
    extras, model = Extras(), loaded.model
    heads = score_heads(model, tokens, batch_size=batch, max_positions=chosen.max_positions)
    if len(heads) > 1:  # a model of one head (a graph's may say so too) has its figures above
        seq_len = model.config.seq_len
        extras.json["heads"] = [h.as_json() for h in heads]
        extras.lines.append(f"  heads:           each on windows of {seq_len} tokens, as training reads them")
        width = max(len(h.name) for h in heads)
        extras.lines += [f"    {h.name:<{width}}  {h.target:<22} NLL {h.nll:.4f}  top-1 {h.top1:.3f} "
                         f"({h.positions:,} positions)" for h in heads]
    if chosen.routing is not None:
        count = len(tokens) if chosen.max_positions is None else min(len(tokens), model.config.seq_len
                                                                     + chosen.max_positions)
        routing = routing_of(model, loaded.tokenizer, tokens[:count], batch_size=batch, stride=stride,
                             what=args.model, family_name=loaded.family_name)
        write_text_file(Path(chosen.routing), routing.csv_text())
        extras.json["routing"] = chosen.routing
        extras.lines.append(f"  routing:         {chosen.routing} ({len(routing.tokens):,} positions, experts 1-"
                            f"{routing.weights.shape[1]} and the prior's share as expert 0)")
    if chosen.fill_rate is not None:
        rates = fill_rates(model, tokens, chosen.fill_rate, batch_size=batch, max_positions=chosen.max_positions)
        extras.json["fill"] = {"rate": chosen.fill_rate, "holes": rates.holes, "accuracy": rates.gap_accuracy,
                               "left_only_accuracy": rates.left_accuracy, "by_gap_heads": rates.by_gap_heads}
        hidden = f"  fill:            {rates.holes:,} tokens hidden at random ({chosen.fill_rate:g} of them): "
        if gap_heads(model):
            extras.lines.append(f"{hidden}{rates.gap_accuracy:.3f} filled right ({rates.by_gap_heads:,} by the gap "
                                f"heads, from both sides), against {rates.left_accuracy:.3f} by the main head from "
                                "the text before alone")
        else:
            extras.lines.append(f"{hidden}{rates.left_accuracy:.3f} filled right by the main head from the text "
                                "before alone (this model has no gap heads)")
    return extras
