"""The model families (family.py: the protocol and the families by name), each in a folder of its own (gpt/,
ensemble/, lookahead/), built from the shared parts here (params, layers, attention, rope, kv_cache, decode,
router, priors), which the graph's ops (graph/) call too; a batch split over threads (thread_split.py); a model
on disk (checkpoint.py) and the memory a training step needs (memory.py).
It imports core/, data/ (a checkpoint keeps its tokenizer) and backends/ through the contract; the settings,
use/, training/ and the faces import it, a family only through family.py.
"""
