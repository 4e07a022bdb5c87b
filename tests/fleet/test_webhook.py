"""Regression flags delivered (leadwire.fleet.webhook): the flags file, the POST to a local HTTP
server started here on 127.0.0.1, and the exit status."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from leadwire.fleet.webhook import (
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_WEBHOOK_FAILED,
    WebhookError,
    deliver,
    post_json,
)

FLAGGED = {
    "firmware_version": "1.1.0",
    "previous_version": "1.0.0",
    "metric": "loss",
    "devices_seen": 22,
    "rate": 0.0855,
    "lo": 0.0630,
    "hi": 0.1150,
    "previous_devices_seen": 40,
    "previous_rate": 0.0264,
    "previous_lo": 0.0153,
    "previous_hi": 0.0450,
    "regression": True,
    "moved_devices": 22,
    "before_rate": 0.03,
    "after_rate": 0.0855,
    "same_devices_regression": float("nan"),
}
CLEAN = {**FLAGGED, "metric": "dup", "regression": False}


class _Sink:
    """A local HTTP server that records POSTs and answers `status`."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[tuple[str, str, bytes]] = []
        self.status = status
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers["Content-Length"])
                sink.bodies.append((self.path, self.headers["Content-Type"], self.rfile.read(n)))
                self.send_response(sink.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d/hook" % self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def sink() -> Iterator[_Sink]:
    s = _Sink()
    yield s
    s.close()


def test_webhook_posts_flagged_regressions_and_exits_3(sink: _Sink, tmp_path: Any) -> None:
    logs: list[str] = []
    status = deliver([CLEAN, FLAGGED], str(tmp_path), sink.url, run={"out": "x"}, log=logs.append)
    assert status == EXIT_REGRESSION == 3
    assert len(sink.bodies) == 1
    path, ctype, body = sink.bodies[0]
    assert (path, ctype) == ("/hook", "application/json")
    doc = json.loads(body)
    assert doc["run"] == {"out": "x"} and doc["source"] == "leadwire fleet"
    [flag] = doc["regressions"]
    assert (flag["firmware_version"], flag["previous_version"], flag["metric"]) == ("1.1.0", "1.0.0", "loss")
    assert (flag["lo"], flag["previous_hi"]) == (0.0630, 0.0450)
    assert flag["same_devices_regression"] is None  # NaN goes out as null
    # the file a scheduler reads holds the same document
    assert json.loads((tmp_path / "regressions.json").read_text()) == doc
    assert any("sent to %s" % sink.url in m for m in logs)


def test_webhook_not_called_without_regression(sink: _Sink, tmp_path: Any) -> None:
    assert deliver([CLEAN], str(tmp_path), sink.url) == EXIT_OK == 0
    assert sink.bodies == []
    assert json.loads((tmp_path / "regressions.json").read_text())["regressions"] == []


def test_webhook_failure_keeps_the_file_and_exits_4(tmp_path: Any) -> None:
    s = _Sink(status=500)
    try:
        logs: list[str] = []
        assert deliver([FLAGGED], str(tmp_path), s.url, log=logs.append) == EXIT_WEBHOOK_FAILED == 4
        assert len(s.bodies) == 3  # retried: 5xx
        assert logs[-1] == "webhook %s: HTTP 500" % s.url
        assert len(json.loads((tmp_path / "regressions.json").read_text())["regressions"]) == 1
    finally:
        s.close()


def test_webhook_client_error_not_retried_and_no_server(tmp_path: Any) -> None:
    s = _Sink(status=404)
    try:
        with pytest.raises(WebhookError, match="HTTP 404"):
            post_json(s.url, {"a": 1})
        assert len(s.bodies) == 1
    finally:
        s.close()
    with pytest.raises(WebhookError, match=r"^webhook http://127\.0\.0\.1:9/: "):
        post_json("http://127.0.0.1:9/", {"a": 1}, timeout=2, retries=1)


def test_webhook_exit_status_of_leadwire_fleet() -> None:
    from leadwire.fleet.webhook import exit_for

    assert exit_for({"regression_status": 3, "regressions": 1}, fail_on_regression=False) is None
    assert exit_for({"regression_status": 0, "regressions": 0}, fail_on_regression=True) is None
    assert exit_for({"regression_status": 3, "regressions": 1}, True) == (
        3,
        "1 regression flag(s), in regressions.json",
    )
    for fail in (False, True):
        assert exit_for({"regression_status": 4, "regressions": 1}, fail) == (
            4,
            "the webhook did not take the regression flags (they are in regressions.json)",
        )


@pytest.mark.timeout(420)
def test_webhook_from_the_fleet_job(spark: Any, sink: _Sink, tmp_path: Any) -> None:
    """The job's rollout stage on a synthetic rollout where 1.1.0 was made worse: the flag reaches
    the local server, regressions.json, the rollout tables and the report."""
    from leadwire.fleet.job import run_job
    from leadwire.fleet.rollout_synth import RolloutConfig, rollout_synth_config, write_rollout

    export, out = tmp_path / "export", tmp_path / "out"
    cfg = rollout_synth_config(rows=12_000, seed=0)
    write_rollout(cfg, RolloutConfig(worse="1.1.0", extra_loss=0.05, latency_factor=2.0), str(export))
    summary = run_job(str(export), str(out), spark, progress=False, webhook=sink.url)
    assert (summary["regressions"], summary["regression_status"]) == (1, EXIT_REGRESSION)
    [(_, _, body)] = sink.bodies
    flags = json.loads(body)["regressions"]
    assert [(f["firmware_version"], f["previous_version"], f["metric"]) for f in flags] == [
        ("1.1.0", "1.0.0", "loss")
    ]
    assert json.loads((out / "regressions.json").read_text())["regressions"] == flags
    assert (out / "parquet" / "rollout_regressions.parquet").is_file()
    assert (out / "csv" / "rollout_releases.csv").is_file()
    page = (out / "index.html").read_text()
    assert 'class="banner bad" id="rollout-verdict"' in page and "<b>1.1.0</b> loss rate" in page
    assert (out / "rollout.png").stat().st_size > 5_000
