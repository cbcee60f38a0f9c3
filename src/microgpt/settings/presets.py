"""Presets: named bundles of setting values, for `--preset NAME` (or `preset: NAME` in a named run).

A preset sits just above the declared defaults: a named run's own values, the
checkpoint being resumed and flags all override it (sources.py). `reference`
is the reference implementation's run exactly: its model shape, batch, steps
and plain Adam at one fixed learning rate, with no warm-up, decay or clipping,
so its losses are bit-identical to training with the reference's optimiser.
"""

from __future__ import annotations

REFERENCE_OPTIMIZER = {  # what a checkpoint from before these settings existed was trained with
    "lr": 3e-4, "warmup": 0, "lr_schedule": "constant", "min_lr": None, "decay_steps": None,
    "weight_decay": 0.0, "beta1": 0.9, "beta2": 0.999, "grad_clip": None,
}

PRESETS: dict[str, dict] = {
    "reference": {
        "d_model": 64, "n_layers": 2, "heads": None, "d_ff": 256, "seq_len": 128,  # heads None: 4 equal heads
        "steps": 10000, "batch_size": 1, "random_batches": False, "stride": None, "val_tokens": 0,
        **REFERENCE_OPTIMIZER,
    },
}
