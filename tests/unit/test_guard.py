"""`gpuclust guard` end to end on recorded squeue text, a stand-in Prometheus API (http.server) and the real
SMTP sink (tests/smtpsink.py, aiosmtpd in its own process): stages, exemptions, coverage, outages, state,
the outbox and the CLI's exit codes and --json."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.exitcodes import EXIT_BUSY, EXIT_TELEMETRY
from gpuclust.guard import GuardBusy, run_guard
from gpuclust.guard.state import Lock
from gpuclust.slurm.queue import SQUEUE_ARGS
from gpuclust.slurm.replay import ReplaySlurmClient
from tests.smtpsink import SmtpSink, free_port

NOW = 1_800_000_000.0
H = 3600.0
SQUEUE = "\n".join([
    # job, user, account, partition, qos, start, nodes, tres, comment
    "10|alice|ml|gpu|normal|2027-01-15T05:00:00|node1|cpu=1,mem=1G,node=1,gres/gpu=2,gres/gpu:h100=2|",
    "11|bob|ml|gpu|normal|2027-01-15T05:00:00|node2|cpu=1,node=1,gres/gpu=1,gres/gpu:h100=1|",
    "12|carol|ml|gpu|normal|2027-01-15T05:00:00|node3|cpu=1,node=1,gres/gpu=1|",  # exempt user
    "13|dave|ml|gpu|normal|2027-01-15T05:00:00|node4|cpu=1,node=1,gres/gpu=2|",  # one GPU without a series
    "14|erin|ml|gpu|normal|2027-01-15T05:00:00|node4|cpu=1,node=1,gres/gpu=1|x=1 guard=off",  # opt-out
    "15|frank|ml|cpu|normal|2027-01-15T05:00:00|node4|cpu=1,node=1|",  # no GPU: not read
]) + "\n"
# every job started at 2027-01-15T05:00:00Z = 1_800_000_000 - 3 h
START = NOW - 3 * H


class Prom:
    """What the stand-in Prometheus answers; `mode`: ok, http500, empty, stale, skew."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.idle_since = START  # job 10's GPUs are at 0 % from here, 95 % before
        self.queries: list[str] = []

    def util(self, job: str, t: float) -> float | None:
        if job == "10":
            return 0.0 if t >= self.idle_since else 95.0
        if job in ("11",):
            return 80.0
        if job in ("12", "13", "14"):
            return 0.0
        return None

    def series(self) -> list[tuple[str, str, str]]:
        return [("10", "node1", "0"), ("10", "node1", "1"), ("11", "node2", "0"), ("12", "node3", "0"),
                ("13", "node4", "0"), ("14", "node4", "3")]


def _handler(prom: Prom) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
            params = dict(urllib.parse.parse_qsl(body))
            prom.queries.append(params.get("query", ""))
            if prom.mode == "http500":
                self.send_response(500)
                self.end_headers()
                return
            q = params["query"]
            if q == "time()":
                server = NOW + (600 if prom.mode == "skew" else 0)
                data: dict[str, Any] = {"resultType": "scalar", "result": [server, str(server)]}
            elif q.startswith("max(timestamp("):
                newest = NOW - (3600 if prom.mode == "stale" else 1)
                result = [] if prom.mode == "empty" else [{"metric": {}, "value": [NOW, str(newest)]}]
                data = {"resultType": "vector", "result": result}
            else:
                start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
                result = []
                if prom.mode != "empty":
                    for job, node, gpu in prom.series():
                        points = []
                        t = start
                        while t <= end + 1e-9:
                            value = prom.util(job, t)
                            if value is not None:
                                points.append([t, str(value)])
                            t += step
                        result.append({"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "hpc_job": job,
                                                  "Hostname": node, "gpu": gpu}, "values": points})
                data = {"resultType": "matrix", "result": result}
            out = json.dumps({"status": "success", "data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    return Handler


@pytest.fixture
def prom() -> Iterator[tuple[Prom, str]]:
    state = Prom()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def sink(tmp_path: Path) -> Iterator[SmtpSink]:
    s = SmtpSink(tmp_path / "maildir").start()
    yield s
    s.stop()


def _site(tmp_path: Path, url: str, smtp_port: int, **guard: str) -> Any:
    keys = {"warn_after": "60m", "second_warn_after": "90m", "cancel_after": "120m", "lookback": "3h",
            "action": "warn", "exempt_users": "carol", "user_optout_label": "guard=off",
            "address_template": "{user}@example.org", "smtp_host": "127.0.0.1", "smtp_port": str(smtp_port),
            "smtp_timeout": "2s", "textfile_dir": str(tmp_path / "textfile"), **guard}
    text = (f"[site]\ncluster_name = lab\nstate_dir = {tmp_path / 'state'}\n[gpu_type h100]\n"
            f"price_per_gpu_hour = 2.5\n[costs]\ncurrency = EUR\n[telemetry]\nprometheus_url = {url}\nstep = 60\n"
            "timeout = 5s\n[guard]\n" + "".join(f"{k} = {v}\n" for k, v in keys.items()))
    return parse_config(text, str(tmp_path / "site.conf"))


def _slurm(cancel_fails: str = "") -> ReplaySlurmClient:
    client = ReplaySlurmClient()
    client.add("squeue", SQUEUE_ARGS, SQUEUE)
    client.add("scancel", ["10"], "")
    if cancel_fails:
        client.fail("scancel", ["10"], 1, f"scancel: error: Kill job error on job id 10: {cancel_fails}\n")
    return client


def _log(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "state" / "guard" / "actions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_stages_exemptions_and_coverage(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    site = _site(tmp_path, url, sink.port)
    state.idle_since = NOW - 30 * 60  # idle 30 min: nothing yet
    report = run_guard(site, _slurm(), now=NOW)
    verdicts = {j["job"]: j for j in report.jobs}
    assert report.status == "ok" and report.actions == []
    assert set(verdicts) == {"10", "11", "12", "13", "14"}  # 15 holds no GPU
    assert verdicts["10"]["verdict"] == "idle" and 29 * 60 <= verdicts["10"]["idle_s"] <= 31 * 60
    assert verdicts["11"]["verdict"] == "busy"
    assert verdicts["12"] == {**verdicts["12"], "verdict": "exempt", "why": "user carol"}
    assert verdicts["13"]["verdict"] == "unknown" and "1 of 2 GPUs" in verdicts["13"]["why"]
    assert verdicts["14"]["verdict"] == "exempt" and verdicts["14"]["why"] == "comment guard=off"
    # util only: time(), freshness, one query_range (3 h at 60 s is one window)
    assert report.queries == 3 and len(state.queries) == 3

    state.idle_since = NOW - 61 * 60
    report = run_guard(site, _slurm(), now=NOW)
    assert [(a["job"], a["stage"], a["action"], a["mail"]) for a in report.actions if "stage" in a] == \
        [("10", "warn", "notice", "queued")]
    warn = next(a for a in report.actions if "stage" in a)
    assert warn["cost"] == pytest.approx(2.5 * 2 * 61 / 60, abs=0.02) and warn["currency"] == "EUR"
    mails = sink.messages()
    assert len(mails) == 1 and mails[0]["To"] == "alice@example.org"
    parts = {p.get_content_type(): p.get_payload(decode=True).decode() for p in mails[0].walk()
             if not p.is_multipart()}
    assert set(parts) == {"text/plain", "text/html"}
    assert "Job 10" in parts["text/plain"] and "node1 GPU 1" in parts["text/plain"] and "EUR" in parts["text/plain"]
    assert "fewer GPUs" in parts["text/plain"] and "--time" in parts["text/plain"]

    # the same stage is never mailed twice, whatever the number of runs; a restart keeps that (state on disk)
    for _ in range(2):
        assert [a for a in run_guard(site, _slurm(), now=NOW + 60).actions if "stage" in a] == []
    assert len(sink.messages()) == 1

    state.idle_since = NOW - 150 * 60  # past cancel_after, but action = warn: the second notice only
    report = run_guard(site, _slurm(), now=NOW)
    assert [(a["stage"], a["action"]) for a in report.actions if "stage" in a] == [("second_warn", "notice")]
    assert len(sink.messages()) == 2
    assert all(a["job"] not in ("11", "12", "13", "14") for a in _log(tmp_path) if "job" in a)
    prom_text = (tmp_path / "textfile" / "gpuclust_guard.prom").read_text()
    assert "gpuclust_guard_telemetry_ok 1" in prom_text and "gpuclust_guard_jobs_seen 5" in prom_text


def test_cancel_only_when_set_and_old_enough(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    site = _site(tmp_path, url, sink.port, action="cancel")
    state.idle_since = NOW - 130 * 60
    slurm = _slurm()
    report = run_guard(site, slurm, now=NOW)
    assert [(a["job"], a["stage"], a["action"]) for a in report.actions if "stage" in a] == [("10", "cancel", "cancel")]
    assert ("scancel", "10") in slurm.calls and sum(c[0] == "scancel" for c in slurm.calls) == 1
    plain = sink.messages()[0].get_body(("plain",))
    assert plain is not None
    body = plain.get_content()
    assert "was cancelled" in body and "120 min" in body
    # a job younger than cancel_after is never cancelled (its idle time cannot be longer than its age)
    young = _site(tmp_path / "young", url, sink.port, action="cancel")
    slurm = _slurm()
    run_guard(young, slurm, now=START + 100 * 60)
    assert not any(c[0] == "scancel" for c in slurm.calls)


def test_job_ending_between_read_and_act_is_logged(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    site = _site(tmp_path, url, sink.port, action="cancel")
    state.idle_since = NOW - 130 * 60
    report = run_guard(site, _slurm(cancel_fails="Invalid job id specified"), now=NOW)
    assert [(a["job"], a["action"]) for a in report.actions if "stage" in a] == [("10", "ended")]
    assert report.counters["ended_before_cancel"] == 1 and sink.messages() == []


@pytest.mark.parametrize("mode", ["down", "http500", "empty", "stale", "skew"])
def test_untrusted_telemetry_acts_on_nothing(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink,
                                            mode: str) -> None:
    state, url = prom
    if mode == "down":
        url = f"http://127.0.0.1:{free_port()}"
    else:
        state.mode = mode
    site = _site(tmp_path, url, sink.port, action="cancel")
    state.idle_since = NOW - 130 * 60
    slurm = _slurm()
    report = run_guard(site, slurm, now=NOW)
    assert report.status == "telemetry" and report.warnings
    assert [a for a in report.actions if "stage" in a] == []
    assert not any(c[0] == "scancel" for c in slurm.calls) and sink.messages() == []
    assert report.counters["telemetry_ok"] == 0 and report.counters["jobs_unknown"] == 3


def test_cli_exit_codes_and_json(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    site = _site(tmp_path, url, sink.port, action="cancel")
    state.idle_since = 0.0  # idle since long before: the guard reads "now" from the clock here

    def invoke(*args: str, client: ReplaySlurmClient | None = None) -> Any:
        app = AppContext(client=client or _slurm())
        app.config = site
        return CliRunner().invoke(cli, ["guard", *args], obj=app)

    state.mode = "skew"  # the stand-in's clock is fixed at NOW; the CLI's is real: skew is what the CLI sees
    result = invoke("--json")
    assert result.exit_code == EXIT_TELEMETRY, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "telemetry" and doc["actions"] == []
    # busy lock: exit 75, nothing done
    lock = Lock(tmp_path / "state" / "guard" / "guard.lock")
    lock.acquire()
    try:
        assert invoke().exit_code == EXIT_BUSY
        with pytest.raises(GuardBusy):
            run_guard(site, _slurm(), now=NOW)
    finally:
        lock.release()


def test_dry_run_changes_nothing(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    site = _site(tmp_path, url, sink.port, action="cancel")
    state.idle_since = NOW - 130 * 60
    slurm = _slurm()
    report = run_guard(site, slurm, now=NOW, dry_run=True)
    assert [(a["job"], a["action"]) for a in report.actions] == [("10", "would_cancel")]
    assert not any(c[0] == "scancel" for c in slurm.calls) and sink.messages() == []
    assert not (tmp_path / "state" / "guard").exists() and not (tmp_path / "textfile").exists()


def test_user_without_address_is_counted(tmp_path: Path, prom: tuple[Prom, str], sink: SmtpSink) -> None:
    state, url = prom
    book = tmp_path / "addresses"
    book.write_text("# user address\nbob bob@lab.example.org\n")
    site = _site(tmp_path, url, sink.port)
    site = type(site)(**{**site.__dict__, "guard": type(site.guard)(**{
        **site.guard.__dict__, "mail": type(site.guard.mail)(**{**site.guard.mail.__dict__,
                                                              "address_template": None,
                                                              "address_file": str(book)})})})
    state.idle_since = NOW - 61 * 60
    report = run_guard(site, _slurm(), now=NOW)
    action = next(a for a in report.actions if "stage" in a)
    assert action["mail"] == "no_address" and report.counters["no_address"] == 1
    assert sink.messages() == []
