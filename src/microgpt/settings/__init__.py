"""Every setting of a run and where it comes from: the run's own declarations (training.py; the other
commands' in commands.py), presets and named runs (presets.py, named_runs.py), every setting there is with each
family's shape (known.py), and their sources in order of precedence (sources.py).

It imports core/, data/, parallel/ (defaults) and model/ (only through model/family.py and the memory estimate's
default cap); use/, training/, the CLI and the studio import it. A family declares its own shape in model/.
"""
