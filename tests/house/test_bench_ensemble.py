"""benchmarks/bench_ensemble.py's own logic, which its hours-long runs rest on: the gap row's graph document
changes what it says and nothing else, a resumed bench takes a recorded run only where it is the job's, and the
noise row is prior none on the numpy backend, held against prior none like a prior."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from microgpt.model.family import family

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_ensemble.py"
VOCAB = 65


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_ensemble_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def specs_of(document: dict) -> dict:
    graph = family("graph")
    config = graph.Config(vocab_size=VOCAB, graph=document, seq_len=128)
    return {spec.name: spec for spec in graph.param_specs(config)}


def test_the_gap_document_adds_only_a_bias_on_each_read_and_write(bench):
    from microgpt.model.graph.from_family import document_for
    from microgpt.model.graph.library import with_library

    config = family("ensemble").Config(vocab_size=VOCAB, cooperative=bench.EXPERTS, stream_dim=64, seq_len=128,
                                       expert_init="torch")
    plain = specs_of(with_library(document_for("ensemble", config)))
    biased = specs_of(bench.gap_document(VOCAB))
    added = sorted(set(biased) - set(plain))
    assert set(plain) <= set(biased) and len(added) == 8  # a bias on each of 4 experts' read and write
    assert all(name.endswith(("read.b", "write.b")) and biased[name].shape == (64,) for name in added)
    assert all(biased[name].init_std == spec.init_std for name, spec in plain.items())


def test_a_record_is_taken_only_for_its_own_job(bench, tmp_path):
    job = {"name": "prior none s0 o0", "steps": 100, "settings": {"prior": "none"}, "train": "train-o0.txt",
           "prompts": None}
    record = {"name": job["name"], "steps_asked": 100, "settings": {"prior": "none"}, "train": "train-o0.txt"}
    assert bench.fits(record, job)
    assert not bench.fits({**record, "steps_asked": 50}, job)
    assert not bench.fits({**record, "settings": {"prior": "bigram"}}, job)
    assert not bench.fits({**record, "train": "train-o1.txt"}, job)
    older = {"name": job["name"], "steps_asked": 100}  # written before settings were recorded
    assert bench.fits(older, job)
    scored = {**job, "prompts": "addition-prompts.tsv"}
    assert not bench.fits(record, scored)  # no bare-prompt score: from before it was measured
    assert bench.fits({**record, "prompts": 13, "prompts_bare": 9}, scored)

    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(record) + "\n" + '{"name": "cut sh', encoding="utf-8")  # a crash mid-line
    assert bench.recorded(runs) == [record]
    assert bench.recorded(tmp_path / "none.jsonl") == []


def test_each_prior_is_held_against_prior_none_on_the_same_seed_and_order(bench):
    rows = {"prior none": [{"name": "prior none s0 o0", "held_out": 1.90}, {"name": "prior none s1 o0", "held_out": 1.95}],
            "prior bigram": [{"name": "prior bigram s1 o0", "held_out": 1.94},
                             {"name": "prior bigram s0 o0", "held_out": 1.93}]}
    (line,) = bench.against_none(rows)
    assert line == ("prior bigram held out minus prior none's, same seed and order: s1 o0 -0.010, s0 o0 +0.030; "
                    "worst +0.030")


def test_the_noise_row_is_prior_none_on_the_numpy_backend_held_against_prior_none(bench, monkeypatch):
    import microgpt

    class Trained(Exception):
        """Raised by the stand-in for microgpt.train once it has what the run asked for."""

    asked = {}

    def train(text, **settings):
        asked.update(settings)
        raise Trained

    monkeypatch.setattr(microgpt, "train", train)
    job = {"name": "noise: prior none, numpy backend s0 o0", "train": "train-o0.txt", "steps": 5, "model": "m",
           "seed": 3, "settings": {"prior": "none", "backend": "numpy"}}
    with pytest.raises(Trained):
        bench.one_run(job)
    assert asked["backend"] == "numpy" and asked["prior"] == "none" and asked["seed"] == 3
    assert job["settings"]["backend"] == "numpy"  # kept in the job, so that runs.jsonl records it

    rows = {"prior none": [{"name": "prior none s0 o0", "held_out": 1.90}],
            "noise: prior none, numpy backend": [{"name": "noise: prior none, numpy backend s0 o0", "held_out": 1.935}]}
    (line,) = bench.against_none(rows)
    assert line == ("noise: prior none, numpy backend held out minus prior none's, same seed and order: s0 o0 "
                    "+0.035; worst +0.035")
