"""The input files of a prepare: the INPUT paths expanded into files, each with its kind and compression.

A file given by name is read whatever its name; a directory is walked recursively, in sorted order, for its
.txt, .jsonl and .parquet files, each also as .gz, .xz or .zst (with `--glob PATTERN`: the files whose path
below it matches, whatever their suffix). Names starting with "." (.git, editor files) are passed over in a
walk, and so is the output and what prepare writes beside it. A file's kind is its suffix under the
compression's: .jsonl and .parquet hold records, anything else is text.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from microgpt.core.errors import ConfigError, DataError
from microgpt.core.version import install_hint
from microgpt.data.prepare.out_dir import is_partial

COMPRESSIONS = (".gz", ".xz", ".zst")
RECORD_KINDS = {".jsonl": "jsonl", ".parquet": "parquet"}
WALKED_SUFFIXES = (".txt", ".jsonl", ".parquet")  # what a directory walk takes without --glob
OPTIONAL_PACKAGES = {".zst": "zstandard", "parquet": "pyarrow"}  # the `data` extra's


@dataclass(frozen=True)
class InputFile:
    path: Path
    kind: str  # "text", "jsonl" or "parquet"
    compression: str  # "" or one of COMPRESSIONS
    size: int  # bytes on disk


def kind_of(path: Path) -> tuple[str, str]:
    """(kind, compression) from a file's name: data.jsonl.gz -> ("jsonl", ".gz"); notes.md -> ("text", "")."""
    suffixes = [s.lower() for s in path.suffixes]
    compression = suffixes.pop() if suffixes and suffixes[-1] in COMPRESSIONS else ""
    return RECORD_KINDS.get(suffixes[-1] if suffixes else "", "text"), compression


def find_inputs(paths: list[str | Path], glob: str | None, out: Path) -> list[InputFile]:
    """The files to read, in order, each once; a DataError naming a missing path or a directory with none."""
    found: dict[Path, InputFile] = {}
    skip = _written_by_us(out)
    for given in map(Path, paths):
        try:
            info = given.stat()
        except FileNotFoundError:
            raise DataError(f"{given}: no such file or directory; give the files or directories to prepare") from None
        except OSError as exc:
            raise DataError(f"{given} cannot be read ({exc.strerror or exc})") from None
        if stat.S_ISDIR(info.st_mode):
            files = [path for path in _walk(given, glob) if not skip(path)]
            if not files:
                wanted = f"files matching --glob {glob!r}" if glob else \
                    ".txt, .jsonl or .parquet files (compressed or not); choose others with --glob"
                raise DataError(f"{given} holds no {wanted}")
        elif stat.S_ISREG(info.st_mode):
            files = [given]
        else:
            raise DataError(f"{given} is not a regular file or a directory (a pipe, a device or a socket); give "
                            "files or directories")
        for path in files:
            key = path.resolve()
            if key not in found:
                kind, compression = kind_of(path)
                found[key] = InputFile(path, kind, compression, path.stat().st_size)
    inputs = list(found.values())
    check_packages(inputs)
    return inputs


def _walk(directory: Path, glob: str | None) -> list[Path]:
    """The regular files below `directory` (not through symlinked directories, none hidden), sorted, that
    --glob's pattern matches (their path below it when the pattern has a "/", else their name)."""
    chosen = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = Path(root) / name
            relative = path.relative_to(directory).as_posix()
            if glob is not None:
                taken = fnmatch.fnmatchcase(relative if "/" in glob else name, glob)
            else:
                _, compression = kind_of(path)
                taken = name.lower().removesuffix(compression).endswith(WALKED_SUFFIXES)
            if taken and path.is_file():
                chosen.append(path)
    return chosen


def _written_by_us(out: Path):
    """Whether a path is the output or what prepare writes beside it (its partial directory, its lock)."""
    resolved = out.resolve()

    def inside(path: Path) -> bool:
        target = path.resolve()
        if target == resolved or resolved in target.parents:
            return True
        return any(parent.parent == resolved.parent and is_partial(parent.name, resolved.name)
                   for parent in target.parents)

    return inside


def check_packages(inputs: list[InputFile]) -> None:
    """A ConfigError naming the `data` extra when an input needs zstandard or pyarrow and it is missing."""
    for file in inputs:
        for need in (file.compression, file.kind):
            package = OPTIONAL_PACKAGES.get(need)
            if package is not None and not has_package(package):
                raise ConfigError(f"{file.path} needs the {package} package, which is not installed; install "
                                  f"microgpt's data extra: {install_hint('data')}")


def has_package(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True
