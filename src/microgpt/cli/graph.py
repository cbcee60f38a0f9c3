"""`microgpt graph`: check a graph document, show it, write a family's, list the primitives (docs/graphs.md).

- `graph check G.json`: the bound dimensions, the parameters, the memory of one training step and the
  causality verdict, or the first problem in one line (exit 2);
- `graph show G.json`: the group tree, each group's parameters and each primitive's output shapes;
- `graph from-family [a family's shape flags] --out G.json`: the document equal to that family's model;
- `graph ops`: every primitive a document can name, with its ports, params and what it does.

A document binds every size but two: `vocab` (the tokenizer's, here --vocab) and `T` (--seq-len).
graph_show.py prints the tree and the primitives; this module parses, checks and writes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from microgpt.cli.common import add_flags_with_defaults, add_setting_flags, help_text, positive_int
from microgpt.cli.graph_show import print_ops, print_tree
from microgpt.cli.parser import Parser
from microgpt.cli.sample import write_text_file
from microgpt.core.checks import format_bytes
from microgpt.core.errors import ConfigError
from microgpt.core.registry import FAMILIES
from microgpt.export.files import check_out
from microgpt.model.family import family, n_params
from microgpt.model.priors import STAND_IN_VOCAB, stand_in_tokenizer
from microgpt.settings.known import family_keys, known_settings
from microgpt.settings.sources import Settings

CHECK_BACKEND = "numpy"  # the memory a step needs, as `microgpt train --backend numpy` estimates it (float32)
VOCAB_HELP = (f"the vocabulary size: a document binds every size but it (the tokenizer's) and T (--seq-len); "
              f"{STAND_IN_VOCAB}, tinyshakespeare's characters, when not given. A calculator prior reads the ids as "
              "digits, + = space and newline, then letters")


class ActionParser(Parser):
    """The parser of one action (`graph check`): a flag it does not know is its own one-line error, naming the
    action, rather than left over for cli/parser.py's `parse`, which re-reads a command but not an action."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def add_parser(commands) -> None:
    p = commands.add_parser("graph", help="check, show or write a graph document (--graph G.json)",
                            description=__doc__.split("\n\n")[0].split(":", 1)[1].strip())
    actions = p.add_subparsers(dest="graph_command", metavar="ACTION", required=True,
                               parser_class=ActionParser)
    fields = known_settings()

    check = actions.add_parser("check", help="check a document: dimensions, parameters, memory, causality",
                               description="Compile a graph document for a run's vocabulary and --seq-len and print "
                               "what training it would need, or its first problem in one line (exit 2).")
    add_document_flags(check, fields)
    add_flags_with_defaults(check, [fields["batch_size"]])
    check.set_defaults(run=run_check)

    show = actions.add_parser("show", help="print a document's group tree with shapes and parameter counts",
                              description="Print the group tree of a compiled graph document: each group instance "
                              "with its ports and parameters, each primitive with its op and output shapes.")
    add_document_flags(show, fields)
    show.set_defaults(run=run_show)

    write = actions.add_parser("from-family", help="write the graph document of a family's model",
                               description="Write the graph document equal to the model a family builds from these "
                               "flags (the same flags as microgpt train); the same seed gives the same initial "
                               "weights. Without --out it prints the document.")
    add_family_flags(write, fields)
    write.add_argument("--out", type=Path, metavar="G.json",
                       help="write the document here (beside it first, then renamed into place); refused if it is "
                       "a directory, inside a checkpoint, a run's file, or exists without --overwrite")
    write.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    write.set_defaults(run=run_from_family)

    ops = actions.add_parser("ops", help="list the primitives a document can use",
                             description="List every primitive a graph document can name: its input ports (and "
                             "the kind of value each takes), its outputs, its params with their defaults, and what "
                             "it computes.")
    ops.set_defaults(run=run_ops)


def add_document_flags(parser: argparse.ArgumentParser, fields) -> None:
    parser.add_argument("file", type=Path, metavar="G.json", help="a graph document (.json, or .yaml)")
    parser.add_argument("--vocab", type=positive_int, default=STAND_IN_VOCAB, metavar="N", help=help_text(VOCAB_HELP))
    add_flags_with_defaults(parser, [fields["seq_len"]])


def shape_keys() -> list[str]:
    """The settings that shape a model of a family from-family writes (every family's but the graph's own)."""
    own = {key for name in FAMILIES if name != "graph" for key in family_keys(family(name))}
    return [key for key in known_settings() if key in own]


def add_family_flags(parser: argparse.ArgumentParser, fields) -> None:
    """--family and each family's shape flags, as microgpt train declares them (defaults from the settings)."""
    add_setting_flags(parser, [fields["family"]])
    writers = [name for name in FAMILIES if name != "graph"]
    groups: dict[tuple[str, ...], list[str]] = {}  # the families that declare a setting -> their settings
    for key in shape_keys():
        groups.setdefault(tuple(name for name in writers if key in family_keys(family(name))), []).append(key)
    for names, keys in groups.items():
        whose = "every family" if len(names) == len(writers) else " and ".join(names)
        add_setting_flags(parser.add_argument_group(f"the model's shape ({whose})"), [fields[key] for key in keys])


def compiled(args):
    """The graph family's config of the document in args.file for --vocab and --seq-len; a ConfigError naming
    the file and the first problem otherwise."""
    from microgpt.model.graph.document import read_document

    document = read_document(args.file)  # its messages name the file
    try:
        return family("graph").Config(vocab_size=args.vocab, graph=document, seq_len=args.seq_len)
    except ConfigError as exc:
        raise ConfigError(f"{args.file}: {exc}") from None


def run_check(args) -> int:
    from microgpt.backends import get_backend
    from microgpt.model.graph.causality import check_causality
    from microgpt.model.memory import memory_parts

    config = compiled(args)
    graph = family("graph")
    program = config.program
    backend = get_backend(CHECK_BACKEND)
    parts = memory_parts(graph, config, args.batch_size, backend)
    try:
        verdict = check_causality(program, args.seq_len, stand_in_tokenizer(args.vocab))
    except ConfigError as exc:
        raise ConfigError(f"{args.file}: {exc}") from None
    bound = {"vocab": f"{args.vocab} (--vocab)", "T": f"{args.seq_len} (--seq-len)"}
    dims = ", ".join(f"{key} {bound.get(key, value)}" for key, value in program.dims.items())
    slices = f", the threads' gradients {format_bytes(parts['slice_gradients'])}" if parts["slice_gradients"] else ""
    print(f"{args.file}: {graph.describe(config)}")
    print(f"dimensions: {dims}")
    print(f"parameters: {n_params(graph, config):,}")
    print(f"memory per step: about {format_bytes(sum(parts.values()))} at --batch-size {args.batch_size} on the "
          f"{CHECK_BACKEND} backend in {backend.dtype} (weights, gradients and Adam moments "
          f"{format_bytes(parts['state'])}{slices}, activations {format_bytes(parts['activations'])}, workspace "
          f"{format_bytes(parts['workspace'])})")
    print(f"causality: {verdict}")
    return 0


def run_show(args) -> int:
    print_tree(compiled(args), args.file)
    return 0


def run_ops(args) -> int:
    print_ops()
    return 0


def run_from_family(args) -> int:
    from microgpt.model.graph.from_family import document_for

    if args.out is not None:
        check_out(args.out, args.overwrite)
    settings = Settings({key: getattr(args, key) for key in ["family", *shape_keys()]})
    name = settings.value("family")
    if name == "graph":
        raise ConfigError("--family graph is a graph already; give the family whose model to write (--family "
                          f"{', '.join(n for n in FAMILIES if n != 'graph')})")
    settings.check_all_used(settings.train_config())  # a setting of another family is refused, as train does
    config = settings.model_config(vocab_size=STAND_IN_VOCAB)  # a document binds no vocabulary: any size does
    document = document_for(name, config)
    family("graph").Config(vocab_size=STAND_IN_VOCAB, graph=document, seq_len=config.seq_len)  # it compiles
    text = format_document(document)
    if args.out is None:
        print(text)
        return 0
    write_text_file(args.out, text + "\n")
    print(f"{args.out}: the graph of {name} {family(name).describe(config).removeprefix(name + ' ')}; train it with "
          f"microgpt train FILE --graph {args.out} --seq-len {config.seq_len}")
    return 0


def format_document(value, indent: str = "") -> str:
    """JSON with an object per line where a list holds objects (a node or an edge per line), else nested."""
    inner = indent + "  "
    if isinstance(value, dict) and any(isinstance(v, dict) or _objects(v) for v in value.values()):
        items = [f"{inner}{json.dumps(key)}: {format_document(v, inner)}" for key, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    if _objects(value):
        return "[\n" + ",\n".join(f"{inner}{json.dumps(item)}" for item in value) + f"\n{indent}]"
    return json.dumps(value)


def _objects(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)
