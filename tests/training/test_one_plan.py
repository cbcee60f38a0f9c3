"""One plan builds every run (training/plan.py `plan`), and each front end words its errors its own way: the
command line (`microgpt train`, its --dry-run), Python (`microgpt.train`, `microgpt.plan`) and the studio's check
of a draft run (/api/graph/check) all plan through the same function, and one bad setting is one error object,
carrying its setting's key, that the command line says as flags (--lr), Python as keywords (lr=) and the studio
as its fields (lr, on the setting)."""

from __future__ import annotations

import re

import pytest

import microgpt
from extras import need
from microgpt.cli import main
from microgpt.core.errors import ConfigError, TrainingStopped, UserError, as_keyword
from microgpt.model.checkpoint import CheckpointError
from microgpt.model.graph import parse_specs
from microgpt.settings import named_runs
from microgpt.training import plan as planning

TEXT = "the quick brown fox jumps over the lazy dog. " * 40
SHAPE = {"d_model": 12, "heads": 3, "n_layers": 1, "d_ff": 24, "seq_len": 16}
FLAGS = ["--d-model", "12", "--heads", "3", "--n-layers", "1", "--d-ff", "24", "--seq-len", "16", "--backend", "numpy",
         "--threads", "1", "--gen", "0", "--quiet"]
BAD = {"lr": 0.1, "min_lr": 0.5}  # a cosine schedule cannot end above its peak
TOKEN, PORT = "test-token", 8765  # the in-process studio's, as the studio tests have them


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)
    return tmp_path


@pytest.fixture
def planned(monkeypatch):
    """Every call of the plan's resolve, and the user error it raised (None where it planned)."""
    calls = []
    resolve = planning.resolve

    def recording(*given, **named):
        calls.append(None)
        try:
            return resolve(*given, **named)
        except UserError as exc:
            calls[-1] = exc
            raise

    monkeypatch.setattr(planning, "resolve", recording)
    return calls


def studio_check(workspace, settings: dict) -> dict:
    """The studio's check of a gpt draft with these settings, through its HTTP endpoint."""
    need("starlette")
    need("httpx")
    from starlette.testclient import TestClient

    from microgpt.studio.app import Studio
    from microgpt.studio.workspace import Workspace

    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    try:
        client = TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
        answer = client.post("/api/graph/check", json={"family": "gpt", "settings": settings})
        assert answer.status_code == 200, answer.text
        return answer.json()
    finally:
        studio.manager.stop_all()


def test_one_bad_setting_is_one_error_each_front_end_words_its_own_way(workdir, planned, capsys):
    assert main(["train", "text.txt", *FLAGS, "--lr", "0.1", "--min-lr", "0.5"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    (error,) = planned
    assert isinstance(error, ConfigError) and error.key == "min_lr"
    assert line == str(error) == "--min-lr 0.5 must be between 0 and --lr 0.1"

    planned.clear()
    with pytest.raises(ConfigError) as raised:
        microgpt.train("text.txt", save=False, backend="numpy", threads=1, **SHAPE, **BAD)
    assert raised.value is planned[0] and raised.value.key == "min_lr"
    assert str(raised.value) == "min_lr=0.5 must be between 0 and lr=0.1"

    planned.clear()
    (workdir / "W").mkdir()
    (workdir / "W" / "text.txt").write_text(TEXT)
    result = studio_check(workdir / "W", {"file": "text.txt", **{key: str(value) for key, value in BAD.items()}})
    assert planned[0] is not None and planned[0].key == "min_lr"
    assert [(e["setting"], e["message"]) for e in result["errors"]] == [
        ("min_lr", "min_lr: 0.5 must be between 0 and lr: 0.1")]


def test_the_dry_run_of_each_front_end_goes_through_the_plan_and_writes_nothing(workdir, planned, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "7", "--model", "ck", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert len(planned) == 1 and planned[0] is None
    assert out.startswith("dry run: nothing trained or written\nstart: a new run\n")
    assert "training: 7 steps of 12 sequences of 16 tokens" in out and "saves: ck" in out
    assert sorted(p.name for p in workdir.iterdir()) == ["text.txt"]

    plan = microgpt.plan("text.txt", steps=7, model="ck", backend="numpy", threads=1, **SHAPE)
    assert len(planned) == 2 and planned[1] is None
    assert plan.describe() == out.splitlines()[1:]  # the same lines, from the same plan
    assert plan.config.seq_len == 16 and plan.vocab_size == len(set(TEXT))
    assert sorted(p.name for p in workdir.iterdir()) == ["text.txt"]

    (workdir / "W").mkdir()
    (workdir / "W" / "text.txt").write_text(TEXT)
    result = studio_check(workdir / "W", {"file": "text.txt", **{key: str(value) for key, value in SHAPE.items()}})
    assert result["ok"], result["errors"]
    assert len(planned) == 3 and planned[2] is None
    assert result["parameters"] == planning.n_params(planning.family("gpt"), plan.config)


def test_a_dry_run_with_compare_is_refused_in_one_line(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--compare", "d12n1", "--dry-run"]) == 2
    assert capsys.readouterr().err.strip() == ("microgpt train: error: --dry-run plans one run, and --compare "
                                               "several; drop one of them")


def test_a_dry_run_of_a_resume_says_so_and_leaves_the_checkpoint_as_it_was(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "2", "--model", "ck"]) == 0
    before = {path: path.read_bytes() for path in workdir.rglob("*") if path.is_file()}
    capsys.readouterr()
    assert main(["train", "text.txt", *FLAGS, "--steps", "4", "--resume", "ck", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "start: resuming ck" and "saves: ck" in out
    assert {path: path.read_bytes() for path in workdir.rglob("*") if path.is_file()} == before


BASE = ["--backend", "numpy", "--threads", "1", "--gen", "0", "--quiet"]
QUIET = {"backend": "numpy", "threads": 1, "save": False}
# (flags, keywords, the setting at fault, the command line's line, Python's): a family config's own checks, an
# ensemble's experts, the lookahead heads', a compare list's
SOURCES = [
    (["--d-model", "12", "--heads", "5"], {"d_model": 12, "heads": 5}, "heads",
     "--heads 5 does not divide --d-model 12; pick a divisor or list the widths",
     "heads=5 does not divide d_model=12; pick a divisor or list the widths"),
    (["--heads", "8,8", "--d-model", "12"], {"heads": "8,8", "d_model": 12}, "heads",
     "--heads 8,8 makes the width 16, not --d-model 12; drop one of them",
     "heads='8,8' makes the width 16, not d_model=12; drop one of them"),
    (["--cooperative", "d8n1,,d8n1"], {"cooperative": "d8n1,,d8n1"}, "cooperative",
     "--cooperative d8n1,,d8n1 has an empty entry; list specs separated by commas, e.g. d64n2,d4x16n2",
     "cooperative='d8n1,,d8n1' has an empty entry; list specs separated by commas, e.g. d64n2,d4x16n2"),
    (["--cooperative", "d8n1", "--router-epsilon", "2"], {"cooperative": "d8n1", "router_epsilon": 2.0},
     "router_epsilon", "--router-epsilon must be between 0 and 1, got 2.0",
     "router_epsilon must be between 0 and 1, got 2.0"),
    (["--lookahead", "20", "--seq-len", "16"], {"lookahead": 20, "seq_len": 16}, "lookahead",
     ("--lookahead 20 asks head 20 for the token 21 positions ahead, past the end of every window of --seq-len 16; "
      "give a --lookahead below 16, or a longer --seq-len"),
     ("lookahead=20 asks head 20 for the token 21 positions ahead, past the end of every window of seq_len=16; "
      "give a lookahead below 16, or a longer seq_len")),
    (["--lookahead", "2", "--lookahead-mode", "gap", "--lookahead-distill", "0.5"],
     {"lookahead": 2, "lookahead_mode": "gap", "lookahead_distill": 0.5},
     "lookahead_distill", None, None),
]


def spelled_as_flags(line: str) -> None:
    assert "--" in line and not re.search(r"\b[a-z_]+=", line), line


def spelled_as_keywords(line: str) -> None:
    assert "--" not in line and re.search(r"\b[a-z_]+=|\b[a-z]+_[a-z_]+\b", line), line


@pytest.mark.parametrize(("flags", "keywords", "key", "flag_line", "keyword_line"), SOURCES)
def test_a_family_configs_errors_carry_their_setting_and_each_front_end_words_it(
        workdir, planned, capsys, flags, keywords, key, flag_line, keyword_line):
    assert main(["train", "text.txt", *BASE, "--no-save", *flags]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert planned[0].key == key and line == str(planned[0])
    spelled_as_flags(line)
    with pytest.raises(ConfigError) as raised:
        microgpt.train("text.txt", **QUIET, **keywords)
    assert raised.value.key == key
    spelled_as_keywords(str(raised.value))
    if flag_line is not None:
        assert (line, str(raised.value)) == (flag_line, keyword_line)


def test_a_named_runs_bad_value_carries_its_setting_in_the_files_words(workdir, capsys):
    (workdir / "runs.yaml").write_text("runs:\n  r:\n    lr: fast\n")
    assert main(["train", "text.txt", *BASE, "--config", "runs.yaml", "--run", "r"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line.startswith("lr (run r in runs.yaml) must be ") and "--" not in line
    with pytest.raises(ConfigError) as raised:
        named_runs.load_run("runs.yaml", "r")
    assert raised.value.key == "lr" and str(raised.value) == line
    (workdir / "runs.yaml").write_text("runs:\n  r:\n    lr: 0.01\n")
    assert main(["train", "text.txt", *BASE, "--config", "runs.yaml", "--run", "s"]) == 2
    assert capsys.readouterr().err.strip() == "microgpt train: error: --run s is not in runs.yaml; its runs are: r"


def test_compare_plans_each_spec_through_the_plan_and_says_its_settings_as_flags(workdir, planned, capsys):
    assert main(["train", "text.txt", *BASE, "--no-save", "--heads", "3", "--compare", "d12n1,d8n1"]) == 2
    assert capsys.readouterr().err.strip() == ("microgpt train: error: --heads 3 sets the model shape, but "
                                               "--compare takes it from each spec; drop it")
    assert main(["train", "text.txt", *BASE, "--no-save", "--compare", "d12n1,,d8n1"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line == "--compare d12n1,,d8n1 has an empty entry; list specs separated by commas, e.g. d64n2,d4x16n2"
    assert not planned  # refused before any spec was planned
    assert main(["train", "text.txt", *BASE, "--no-save", "--lr", "0.1", "--min-lr", "0.5",
                 "--compare", "d12n1,d8n1"]) == 2
    assert capsys.readouterr().err.strip() == "microgpt train: error: --min-lr 0.5 must be between 0 and --lr 0.1"
    assert len(planned) == 1 and planned[0].key == "min_lr"  # the plan's own check, met in the first spec's plan
    planned.clear()
    assert main(["train", "text.txt", *BASE, "--seq-len", "16", "--steps", "1", "--no-save",
                 "--compare", "d12n1,d8n1"]) == 0
    assert planned == [None, None]  # each spec planned once, by the plan


def test_sampling_settings_are_flags_on_the_command_line_and_keywords_in_python(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "1", "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["sample", "ck", "--backend", "numpy", "--fill", "t_e", "--temperature", "0.5"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt sample: error: ")
    assert line == "--temperature is for sampling, and --fill fills holes greedily; drop it"
    assert main(["sample", "ck", "--backend", "numpy", "--mask", "#"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt sample: error: ")
    assert line == "--mask marks the holes of --fill TEXT; give --fill, or drop --mask"
    model = microgpt.load("ck", backend="numpy")
    for call, key, said in ((lambda: model.sample(5, temperature=-1.0), "temperature", "temperature=-1.0 must be 0"),
                            (lambda: model.sample(5, top_p=2.0), "top_p", "top_p=2.0 must be in (0, 1]"),
                            (lambda: model.evaluate(TEXT, stride=99), "stride", "stride=99 must be between 1")):
        with pytest.raises(UserError) as raised:
            call()
        assert raised.value.key == key and str(raised.value).startswith(said) and "--" not in str(raised.value)


def test_a_resumes_notes_name_their_settings_in_each_front_ends_words(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "2", "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["train", "text.txt", *FLAGS, "--steps", "4", "--lr", "0.01", "--resume", "ck", "--dry-run"]) == 0
    flags = capsys.readouterr().out.splitlines()
    assert "note: --lr 0.01 overrides the checkpoint's 0.003" in flags
    assert "note: the cosine decay now ends at step 4 (--steps), not 2" in flags
    keywords = microgpt.plan("text.txt", resume="ck", steps=4, lr=0.01, backend="numpy", threads=1, **SHAPE).describe()
    assert "note: lr=0.01 overrides the checkpoint's 0.003" in keywords
    assert "note: the cosine decay now ends at step 4 (steps), not 2" in keywords
    assert not [line for line in keywords if "--" in line]


def test_a_diverged_runs_stop_names_its_settings_in_each_front_ends_words(workdir, capsys):
    """A stop is no user error, yet its message carries its settings as data (core/errors.py InParts): the
    command line says --no-save and --lr, Python save=False and lr."""
    assert main(["train", "text.txt", *FLAGS, "--steps", "30", "--lr", "1e9", "--no-save"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line.startswith("training stopped: the loss became ")
    assert line.endswith("; nothing was saved (--no-save). Try a lower --lr.")
    with pytest.raises(TrainingStopped) as stopped:
        microgpt.train("text.txt", steps=30, lr=1e9, **QUIET, **SHAPE)
    assert str(stopped.value) == line.replace("(--no-save). Try a lower --lr.", "(save=False). Try a lower lr.")


SHAPE_FLAGS = FLAGS[:10]
# (flags, keywords, the setting at fault, the end of the command line's line, the end of Python's): the checks of
# the library's modules below the settings (the memory cap, the batch's split, a prior's needs, the checkpoint's
# directory), which name settings too
LIBRARY_CHECKS = [
    ([*SHAPE_FLAGS, "--batch-size", "5", "--grad-accum", "2"], {**SHAPE, "batch_size": 5, "grad_accum": 2},
     "batch_size",
     "--batch-size 5 (the global batch) does not split evenly over 1 process x --grad-accum 2; use a multiple of 2",
     "batch_size=5 (the global batch) does not split evenly over 1 process x grad_accum=2; use a multiple of 2"),
    ([*SHAPE_FLAGS, "--max-memory", "1KiB"], {**SHAPE, "max_memory": "1KiB"}, "batch_size",
     ("but --max-memory is 1.0 KiB; use a smaller --batch-size (now 12) or --seq-len (now 16), a smaller model, or "
      "raise --max-memory"),
     ("but max_memory is 1.0 KiB; use a smaller batch_size (now 12) or seq_len (now 16), a smaller model, or raise "
      "max_memory")),
    (["--family", "ensemble", "--cooperative", "d8n1", "--prior", "calculator", "--tokenizer", "bpe"],
     {"family": "ensemble", "cooperative": "d8n1", "prior": "calculator", "tokenizer": "bpe"}, "prior",
     "--prior calculator reads characters; train it with --tokenizer char",
     "prior='calculator' reads characters; train it with tokenizer='char'"),
]


@pytest.mark.parametrize(("flags", "keywords", "key", "flag_end", "keyword_end"), LIBRARY_CHECKS)
def test_the_library_checks_name_their_settings_in_each_front_ends_words(
        workdir, capsys, flags, keywords, key, flag_end, keyword_end):
    assert main(["train", "text.txt", *BASE, "--no-save", *flags]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    with pytest.raises(UserError) as raised:
        microgpt.train("text.txt", **QUIET, **keywords)
    said = str(raised.value)
    assert raised.value.key == key and line.endswith(flag_end) and said.endswith(keyword_end)
    assert line.removesuffix(flag_end) == said.removesuffix(keyword_end)  # the rest, naming no setting, alike


def test_a_refused_checkpoint_directory_names_model_in_each_front_ends_words(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "1", "--model", "."]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line == ("--model . is the current directory or one above it; saving there would replace it; give a new "
                    "directory, e.g. --model checkpoints/mine")
    with pytest.raises(ConfigError) as raised:
        microgpt.train("text.txt", steps=1, model=".", backend="numpy", threads=1, **SHAPE)
    assert raised.value.key == "model"
    assert str(raised.value) == ("model='.' is the current directory or one above it; saving there would replace it; "
                                 "give a new directory, e.g. model='checkpoints/mine'")


def test_a_resume_on_another_backend_names_the_one_that_continues_exactly_in_each_front_ends_words(workdir, capsys):
    assert main(["train", "text.txt", *FLAGS, "--steps", "2", "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["train", *SHAPE_FLAGS, "--backend", "cpu", "--threads", "1", "--gen", "0", "--quiet", "--steps", "4",
                 "--resume", "ck"]) == 0
    moved = "its losses differ from an unbroken run's in the last bits"
    said = capsys.readouterr()
    (flags,) = [line for line in (said.out + said.err).splitlines() if moved in line]
    assert flags.endswith(f"{moved} (--backend numpy continues exactly)")
    run, _ = microgpt.train("text.txt", resume="ck", steps=6, backend="numpy", threads=1, gen=0, **SHAPE)  # back
    assert (f"resuming on the numpy backend, and ck trained on cpu: from here {moved} (backend='cpu' continues "
            "exactly)") in run.notes


def test_a_checkpoint_over_the_memory_cap_names_max_memory_in_each_front_ends_words(workdir, capsys):
    """A checkpoint's refusal is given in parts too (model/checkpoint.py CheckpointError), so resuming one says the
    cap as Python takes it."""
    assert main(["train", "text.txt", *FLAGS, "--steps", "1", "--model", "ck"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "ck", "--max-memory", "1KiB", "--steps", "2", "--backend", "numpy"]) == 2
    line = capsys.readouterr().err.strip().removeprefix("microgpt train: error: ")
    assert line.startswith("ck/config.json describes a model") and line.endswith(
        "over the 1.0 KiB cap; raise --max-memory if it is really meant")
    with pytest.raises(CheckpointError) as raised:
        microgpt.train(resume="ck", max_memory="1KiB", steps=2, backend="numpy")
    assert str(raised.value) == line.replace("raise --max-memory", "raise max_memory")


@pytest.mark.parametrize(("text", "says"), [("a.json,,b.json", "has an empty entry"),
                                            ("x/a.json,y/a.json", "names two documents alike (a, a)")])
def test_a_graph_compare_list_is_refused_in_each_front_ends_words(text, says):
    with pytest.raises(ConfigError) as caught:
        parse_specs(text, None)
    assert str(caught.value).startswith(f"--compare {text} {says}"), caught.value
    assert caught.value.worded(as_keyword).startswith(f"compare={text!r} {says}"), caught.value.worded(as_keyword)


def test_a_hung_rank_names_the_timeout_setting_in_each_front_ends_words():
    """HungRanks (parallel/mpi.py's watchdog) keeps its parts through `adding` (what the checkpoint holds), so
    the command line reads --collective-timeout and Python collective_timeout."""
    from microgpt.core.errors import HungRanks, Named

    hung = HungRanks("rank 1 of 2 did not reach the all-reduce within 5 s (", Named("collective_timeout"),
                     "): hung or stopped", reports=True)
    kept = hung.adding("nothing was saved (", Named("save", False), ")")
    assert kept.reports and isinstance(kept, RuntimeError)
    assert str(kept) == ("rank 1 of 2 did not reach the all-reduce within 5 s (--collective-timeout): hung or "
                         "stopped; nothing was saved (--no-save)")
    assert kept.worded(as_keyword) == ("rank 1 of 2 did not reach the all-reduce within 5 s (collective_timeout): "
                                       "hung or stopped; nothing was saved (save=False)")
