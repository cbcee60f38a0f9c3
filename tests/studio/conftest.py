"""The browser tests' studio and browser, one of each per test file, whose tests run in order on them.

`served` is a real `microgpt studio` process on a fresh tiny workspace (studio_workspace.py): (url, workspace);
Ctrl-C stops it after the file, and it must stop cleanly. A file that needs more in its workspace overrides
`served` with a fixture of the same name that asks for this one. `browser` is headless Chromium on its page
(studio_browser.py), ready. The API tests' in-process studio (`workspace`, `studio`, `client`) is in
tests/conftest.py, shared with the hostile tests.
"""

from __future__ import annotations

import pytest

from studio_server import start_studio, stop_studio
from studio_workspace import make_workspace


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workspace = make_workspace(tmp_path_factory.mktemp("workspace"))
    process, url = start_studio(workspace)
    yield url, workspace
    out, _ = stop_studio(process)
    assert "microgpt studio: stopped" in out


@pytest.fixture(scope="module")
def browser(served):
    from studio_browser import start_browser  # selenium: each browser test asks for the studio extra first

    driver = start_browser(served[0])
    yield driver
    driver.quit()
