"""Text in, tokens out: the corpus (corpus.py), the tokenizers (tokenizer/), the training windows
(batches.py), and data at scale: `microgpt prepare` (prepare/) writes a dataset directory of token shards
(shards.py, the format and its readers) and a manifest (dataset.py, which opens and checks one).

It stands on the ground: it imports only core/ and itself. Everything above it may import it (the settings,
the model's checkpoint, which saves its tokenizer, sampling, training and the faces).
"""
