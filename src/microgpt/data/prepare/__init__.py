"""`microgpt prepare`: any corpus, once, into a dataset directory of token shards (data/dataset.py, shards.py).

settings.py declares its settings; inputs.py finds the files, streams.py opens them (decompressing), blocks.py
cuts them into blocks, documents.py reads a block's documents, work.py scans or tokenizes a block in a worker,
pool.py runs the workers in order, split.py chooses the held-out documents, scan.py and encode.py are the two
passes, writer.py writes the shards, out_dir.py the --out directory (lock, partial, rename), progress.py the bar,
and pipeline.py puts them together. docs/data.md describes the format and the command.
"""

from microgpt.core.stops import Stopped
from microgpt.data.prepare.pipeline import Summary, describe, prepare
from microgpt.data.prepare.settings import PrepareSettings

__all__ = ["PrepareSettings", "Stopped", "Summary", "describe", "prepare"]
