"""A training run, from settings to a trained model and the files beside it: the run prepared in one pass
(prepare.py, over the settings resolved once in resolve.py), the loop (trainer.py), one data-parallel step
(data_parallel.py), the optimiser (optim.py), where a run writes (run_dir.py, run_files.py) and its plots (plot.py).

It may import every package below it (core/, data/, parallel/, settings/, model/ through its protocol, backends/
through the registry and the contract, use/); the CLI, the studio and `microgpt.train` import it.
"""
