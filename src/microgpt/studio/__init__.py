"""microgpt studio: a local web app over a workspace directory to compose a model, train it as `microgpt train`
subprocesses, watch it learn, compare runs, and sample and evaluate checkpoints (`microgpt studio`; docs/studio.md).
A face beside the CLI: it may import every package below the faces, never the CLI; only `microgpt studio`
imports it. graph_*.py: the node editor's server side (palette, run settings, check, save); workspace.py,
guard.py: what stays inside; runs.py, metrics.py: training and its curves; app.py, server.py: routes and
serving; static/: the page.
"""
