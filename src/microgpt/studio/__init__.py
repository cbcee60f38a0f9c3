"""microgpt studio: a local web app over a workspace directory to compose a model on a canvas, train it, watch
it learn, compare runs, and sample and evaluate checkpoints (`microgpt studio [DIR]`; docs/studio.md).

It stands at the top beside the CLI: it calls the library (settings, checks, the memory estimate, the
families' descriptions) and starts `microgpt train`, `sample` and `eval` as subprocesses; nothing below
imports it. canvas.py: each family's components; compose.py: a canvas graph to settings and back, checked
by the library; workspace.py: paths held inside the workspace, its lock, its runs; runs.py: the training
subprocesses; metrics.py: the curves; guard.py: token, Host and Origin checks; app.py: the routes;
server.py: serving, and stopping cleanly; speed.py: the expected tokens/s; static/: the page.
"""
