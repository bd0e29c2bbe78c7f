"""The private attributes curator_dask uses exist in the installed versions (issue 23, item 4).

``curator_dask/utils/private_api.py`` holds every private CPython, distributed, dask and
dask-jobqueue attribute the package reads or writes; an upgrade that removes one fails here
instead of degrading a run silently. The package's own code goes through that module.
"""

from __future__ import annotations

import pathlib
import re

from curator_dask.utils import private_api

PACKAGE = pathlib.Path(private_api.__file__).parents[1]
# the private names private_api.py wraps: anywhere else in the package they are a bypass
WRAPPED = re.compile(r"\._forkserver\b|_forkserver_pid|_forkserver_alive_fd|_forkserver_address"
                     r"|ORIGINAL_DIR|get_preparation_data\s*=|_forkserver_preload_set"
                     r"|\._dummy_job|shuffle\._scheduler_plugin|isinstance\(.*_SubParsersAction"
                     r"|\._actions\b|\._broker\b|\._getframe\b")


def test_every_private_attribute_is_there_in_the_installed_versions():
    assert private_api.missing() == []


def test_the_package_reaches_them_through_private_api_only():
    bypasses = [f"{path.relative_to(PACKAGE)}:{n}" for path in sorted(PACKAGE.rglob("*.py"))
                if path.name != "private_api.py"
                for n, line in enumerate(path.read_text().splitlines(), 1)
                if WRAPPED.search(line.split("#")[0])]
    assert bypasses == []


def test_the_forkserver_state_reads_back_as_multiprocessing_keeps_it():
    server = private_api.forkserver()
    assert server is not None
    pid = private_api.forkserver_pid(server)
    assert pid is None or isinstance(pid, int)
    assert private_api.caller_frame(0).f_code.co_name == (
        "test_the_forkserver_state_reads_back_as_multiprocessing_keeps_it")
