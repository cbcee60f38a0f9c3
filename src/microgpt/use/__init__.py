"""A trained model, used: loaded from its checkpoint (loaded.py: `microgpt.load`), sampled (sample.py, with the
distribution of choose.py, or drafted by its own heads in speculative.py), scored on a text (evaluate.py) and
asked prompts with known answers (prompts.py).

It imports core/, data/, settings/, model/ (the family protocol and the checkpoint) and backends/ (the
registry's face only); training/ (to sample after a run), the CLI, the studio and `microgpt.load` import it.
"""
