"""The model families (family.py: the protocol and the families by name), each in a folder of its own (gpt/,
ensemble/, lookahead/), built from the shared layers here (params, layers, attention, rope, kv_cache, decode,
shards); a model on disk (checkpoint.py) and the memory a training step needs (memory.py).
It imports core/, data/ (a checkpoint keeps its tokenizer) and backends/ through the contract; the settings,
use/, training/ and the faces import it, a family only through family.py.
"""
