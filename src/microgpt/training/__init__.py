"""A training run: the settings resolved once (resolve.py), the run planned from them (plan.py), the loop
(trainer.py), a data-parallel step (data_parallel.py), the optimiser (optim.py), where a run writes (run_dir.py,
run_files.py), its plots (plot.py), and every run under a folder (run_list.py).

It may import every package below it (core/, data/, parallel/, settings/, model/ through its protocol, backends/
through the registry and the contract, use/); the CLI, the studio and `microgpt.train` import it.
"""
