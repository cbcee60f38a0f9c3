"""Text in, tokens out: the corpus (corpus.py), the tokenizers (tokenizer/) and the training windows (batches.py).

It stands on the ground: it imports only core/ and itself. Everything above it may import it (the settings,
the model's checkpoint, which saves its tokenizer, sampling, training and the faces).
"""
