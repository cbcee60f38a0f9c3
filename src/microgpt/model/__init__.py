"""The model families (model/family.py: the protocol and the families by name), built from the shared layers
here: parameters (params.py), linear, LayerNorm and feed-forward (layers.py), attention with RoPE
(attention.py, rope.py), the KV cache (kv_cache.py), decoding (decode.py) and the split of a batch over the
backend's streams (shards.py). Each family lives in a folder of its own (gpt/)."""
