"""Dask's performance report of a run opens offline: bokeh's JavaScript is in the file."""

from __future__ import annotations

import re

import pytest

from curator_dask.backends.dask.perf_report import performance_report

pytestmark = pytest.mark.slow


def test_performance_report_is_self_contained(executor, tmp_path):
    client = executor.start()
    path = tmp_path / "dask-performance-report.html"
    with performance_report(client, str(path)):
        assert client.submit(sum, [1, 2, 3], pure=False).result() == 6
    html = path.read_text()
    assert "Dask Performance Report" in html
    assert not re.search(r"<script[^>]+src=", html)  # nothing loaded from a CDN
    assert "cdn.bokeh.org" not in html
    assert len(html) > 500_000  # the inlined bokeh library (a CDN page is ~100 KB)
