"""The layout change (issue 27) changed no bits: this code against the code from just before it (BEFORE_LAYOUT).

The earlier code is unpacked from this repository's own history (`git archive`) and run beside this code in
subprocesses on the same machine, so the comparison is exact whatever the CPU. One script trains, in one
process, 60 steps of every family on numpy and on cpu, then a resume and a fine-tune, through the public API
(`microgpt.train`), and prints every loss and validation loss as `repr` (every bit). Where the history is not
there (a shallow clone, no git), the test skips and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BEFORE_LAYOUT = "dff72b8"  # main before the packages of issue 27

SCRIPT = r"""
import json, sys
from pathlib import Path
import microgpt

text_file, out, added = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
SHAPES = {
    "gpt": {"d_model": 12, "heads": "2,4,6", "n_layers": 2, "d_ff": 24},
    # no prior: issue 32 changed the priors' start on purpose (the projections' He init and bias, every prior's
    # parameters drawn after the experts')
    "ensemble": {"cooperative": "d8n1,d4+4n1", "stream_dim": 6, "prior": "none", "router": "gated"},
    # mode mtp, the default before hydra became it (issue 30)
    "lookahead": {"lookahead": 2, "lookahead_mode": "mtp", "d_model": 8, "heads": "4,4", "n_layers": 1, "d_ff": 16},
}
COMMON = {"seq_len": 16, "batch_size": 4, "val_tokens": 300, "eval_every": 20, "threads": 1, "gen": 0}


def record(name, summary, directory):
    log = directory.parent / (directory.name + ".metrics.jsonl")
    val = [r["val_loss"] for r in map(json.loads, log.read_text().splitlines()) if "val_loss" in r]
    return name, {"losses": [repr(x) for x in summary.losses], "val": [repr(x) for x in val]}


found = {}
for backend in ("numpy", "cpu"):
    for family, shape in SHAPES.items():
        place = out / f"{family}-{backend}"
        _, summary = microgpt.train(text_file, steps=60, backend=backend, model=str(place), **shape,
                                    **added.get(family, {}), **COMMON)
        found.update([record(f"{family} {backend}", summary, place)])
gpt = out / "gpt-numpy"
_, summary = microgpt.train(text_file, resume=str(gpt), steps=90, backend="numpy", threads=1, gen=0)
found.update([record("gpt numpy resumed to 90", summary, gpt)])
tuned = out / "tuned"
_, summary = microgpt.train(text_file, init_from=str(out / "lookahead-cpu"), model=str(tuned), steps=30,
                            backend="cpu", lr=1e-3, **{k: v for k, v in COMMON.items() if k != "seq_len"})
found.update([record("lookahead cpu fine-tuned", summary, tuned)])
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def before_layout(tmp_path_factory) -> Path:
    """The src/ folder of BEFORE_LAYOUT, unpacked from git history."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed, so the code before the layout cannot be taken from history")
    found = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{BEFORE_LAYOUT}^{{commit}}"],
                           check=False, capture_output=True)
    if found.returncode != 0:
        pytest.skip(f"commit {BEFORE_LAYOUT} is not in this clone's history (a shallow clone?)")
    root = tmp_path_factory.mktemp("before-layout")
    archive = root / "src.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), BEFORE_LAYOUT, "src/microgpt"],
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(root, filter="data")
    return root / "src"


def train_all(src: Path, text: Path, out: Path, added: dict) -> dict:
    """Every loss of SCRIPT's runs with the microgpt in `src`, a family's settings from `added` on top of SHAPES
    (a setting the code before did not have, at the value that code had no choice but)."""
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(text), str(out), json.dumps(added)], check=False,
                          capture_output=True, text=True, env=env, timeout=900, cwd=out)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_family_resume_and_fine_tune_train_bit_identically_to_the_code_before_the_layout(
        before_layout, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("".join(f"{i} + {i % 7} = {i + i % 7}\nthe quick brown fox {i}\n" for i in range(300)),
                    encoding="utf-8")
    before = train_all(before_layout, text, tmp_path / "before", {})
    # He's init, the only one before (torch's is the ensemble's default since issue 32)
    after = train_all(REPO / "src", text, tmp_path / "after", {"ensemble": {"expert_init": "he"}})
    assert list(after) == list(before)
    for name in before:
        assert len(before[name]["losses"]) > 0, name
        assert after[name] == before[name], f"{name}: the losses differ from the code before the layout"
