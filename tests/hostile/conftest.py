"""The hostile tests' shared fixtures.

`client`: where the studio tests' `client` (tests/conftest.py) lets an exception in the server fail the test,
this one answers it as a served studio does, with a 500, so a test can say that a hostile request gets one line
and never a traceback. One event loop serves every request, as in a server.

`no_process_outlives_its_test`: after every hostile test, each process it started (child_processes.started)
and left running is killed: a failing test must not leave a million-step run behind.
"""

from __future__ import annotations

import pytest

from child_processes import end_all
from studio_server import PORT, TOKEN


@pytest.fixture
def client(studio):
    from starlette.testclient import TestClient  # the studio extra: each studio test asks for it first

    with TestClient(studio.app, base_url=f"http://127.0.0.1:{PORT}", headers={"X-Studio-Token": TOKEN},
                    raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(autouse=True)
def no_process_outlives_its_test():
    yield
    end_all()
