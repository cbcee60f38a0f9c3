"""The fixtures every layer's tests share: the backends under test.

`backend_name` runs a test once per backend kind in `backend_kinds.BACKENDS` (numpy and cpu always, cuda where
usable); `backend` is a float32 backend of that kind and `reference` the NumPy backend in float64.

`emulated` is (backend, cublas): a `CuBLASBackend` whose CuPy is `cuda_emulator.fake_cupy` and whose cuBLAS is
`FakeCublas`. The backend's own Python runs unchanged; only `loader.load_cupy` is replaced. Its kernels run on
the emulator, compiled from exactly the text the backend hands `RawModule`. The process-wide module cache is
emptied for the test and restored after, so an emulated module never reaches a real backend in the same session.

`workspace`, `studio` and `client` are the studio served in this process, for the studio's tests and the hostile
ones: a tiny workspace (studio_workspace.py) in tmp_path/W (tmp_path keeps room for what lies outside it), the
`Studio` on it (its runs stopped after the test) and a Starlette TestClient sending its token, through which an
exception in the server fails the test (tests/hostile/conftest.py's client answers it with a 500 instead).

`all_cores_after`, for a module that changes the thread count (`pytest.mark.usefixtures`): the next test
starts from every core again.

`workdir` is tmp_path made the current directory, holding text.txt (tiny_corpus.TEXT), where a command-line
test runs `microgpt train text.txt`; a file that needs more there (or another text) defines its own.

`checkpoint`, once per test module (the API's and inspect's), is a directory holding text.txt and ck: a gpt of
two layers with heads 2, 4 and 6 wide, trained 20 steps on it with the numpy backend; a module writes what else
it needs beside them.

A suite started with Ctrl-C ignored (a shell's background job: `(cmd &)`, nohup) would hand that ignore to every
subprocess it starts, and the tests that stop a child with SIGINT, as a terminal's Ctrl-C does, would find it
deaf to it. So the ignore is lifted here, once: children then start with SIGINT at its default, as from a
terminal.

The suite multiplies with OpenBLAS (`MICROGPT_BLAS=openblas`, set here for this process and every child it
starts): the bit-identity fixture was recorded with it, and no test waits for the BLAS measurement or writes the
user's cache. tests/backends/test_blas_choice.py sets the variable itself where it tests the choice.

Helpers a test imports live in modules beside this file (`extras`, `peak_memory`, `backend_kinds`, ...), never
here: each folder has a conftest.py of its own, and `import conftest` would find whichever was loaded last.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

import microgpt
from backend_kinds import BACKENDS
from cuda_emulator.build import GXX
from cuda_emulator.fake_cupy import FakeCublas, fake_cupy
from microgpt.backends import get_backend
from microgpt.backends.cuda import CuBLASBackend, loader
from microgpt.core.threads import set_threads
from studio_server import PORT, TOKEN
from studio_workspace import make_workspace
from tiny_corpus import TEXT

os.environ["MICROGPT_BLAS"] = "openblas"

if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(params=BACKENDS)
def backend_name(request) -> str:
    return request.param


@pytest.fixture
def backend(backend_name, request):
    """A float32 backend of each available kind; for "cuda-emulated", which a module adds to `backend_name`'s
    kinds to run its tests once more on the cuda backend's kernels where no GPU is, the `emulated` one."""
    if backend_name == "cuda-emulated":
        yield request.getfixturevalue("emulated")[0]
        return
    be = get_backend(backend_name)
    yield be
    be.finalize()


@pytest.fixture
def reference():
    """The NumPy backend in float64: the reference other backends are held against."""
    return get_backend("numpy", dtype=np.float64)


@pytest.fixture
def emulated(monkeypatch):
    """(backend, cublas): a CuBLASBackend on the CPU emulator, and its fake cuBLAS (skipped without g++)."""
    if GXX is None:
        pytest.skip("g++ is not on PATH; the CUDA emulator needs it")
    cublas = FakeCublas()
    saved = dict(loader.MODULES)
    loader.MODULES.clear()
    monkeypatch.setattr(loader, "load_cupy", lambda: (fake_cupy(), cublas))
    backend = CuBLASBackend()
    yield backend, cublas
    backend.finalize()
    loader.MODULES.clear()
    loader.MODULES.update(saved)


@pytest.fixture
def all_cores_after():
    yield
    set_threads()


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    return tmp_path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    where = tmp_path_factory.mktemp("checkpoint")
    (where / "text.txt").write_text(TEXT, encoding="utf-8")
    microgpt.train(str(where / "text.txt"), steps=20, model=str(where / "ck"), d_model=12, heads="2,4,6",
                   n_layers=2, d_ff=24, seq_len=16, backend="numpy")
    return where


@pytest.fixture
def workspace(tmp_path):
    root = tmp_path / "W"
    root.mkdir()
    return make_workspace(root)


@pytest.fixture
def studio(workspace):
    # the studio extra: each studio test asks for it first (extras.need)
    from microgpt.studio.app import Studio
    from microgpt.studio.workspace import Workspace

    studio = Studio(Workspace(workspace), TOKEN, "127.0.0.1", PORT)
    yield studio
    studio.manager.stop_all()


@pytest.fixture
def client(studio):
    from starlette.testclient import TestClient

    return TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN})
