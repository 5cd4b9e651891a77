"""`gpuclust report notify` (issue 43 item 3) on a generated month with prices (`benchmarks/accounting_bench.py
--messy --usage`): the notices' figures are the report's (report.json gpu_use.by_user / runs.by_user, by_account
for an owner), --dry-run writes .eml files with a text and an HTML part, delivery goes through the outbox to a real
SMTP server (tests/smtpsink.py) once, kept while the server is down and sent by the next run, never twice, and
[notify]'s config: opt-out, owners, the mail settings over [guard]'s, a template field it does not know."""

from __future__ import annotations

import json
import sys
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuclust.accounting import notify
from gpuclust.accounting.ingest.period import resolve_period
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.errors import ConfigError
from gpuclust.timespec import parse_time
from tests.smtpsink import SmtpSink, free_port

REPO = Path(__file__).resolve().parents[2]
WINDOW = ("--delimiter", "\\x1f|\\x1e", "--since", "2026-11-01", "--until", "2026-12-01")
OWNED = "physics"


def _conf(bench: Any, tmp: Path, port: int, extra: str = "", opted: str = "nobody") -> Path:
    conf = tmp / "site.conf"
    conf.write_text(bench.CONF.replace("[site]\n", f"[site]\nstate_dir = {tmp / 'state'}\n", 1)
                    + "\n[costs]\ncurrency = EUR\n[guard]\naddress_template = {user}@example.org\n"
                    f"smtp_host = 127.0.0.1\nsmtp_port = {port}\nsmtp_timeout = 2s\nmail_from = gpu@example.org\n"
                    f"[notify]\naccount_owners = {OWNED}=pi@example.org\nopt_out = {opted}\n" + extra)
    return conf


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import accounting_bench as bench
    finally:
        sys.path.pop(0)
    tmp = tmp_path_factory.mktemp("notify")
    dump = tmp / "month.txt"
    bench.generate(dump, 1500, messy=True, usage=True)
    conf = _conf(bench, tmp, free_port())
    out = tmp / "out"
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "build", "--input", str(dump), *WINDOW,
                                      "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "report.json").read_text())
    users = [r["user"] for r in doc["gpu_use"]["by_user"]]
    conf = _conf(bench, tmp, free_port(), opted=users[0])  # (the report's figures do not read [notify])
    return {"bench": bench, "dump": dump, "conf": conf, "json": doc, "opted": users[0], "other": users[1]}


def _notify(conf: Path, dump: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["--config", str(conf), "report", "notify", "--input", str(dump), *WINDOW,
                                      "--json", *extra])
    return result.exit_code, json.loads(result.stdout), result.stderr


def test_notices_figures_equal_the_reports(month: dict[str, Any]) -> None:
    site = parse_config(month["conf"].read_text(), str(month["conf"]))
    doc = month["json"]
    period = resolve_period(parse_time("2026-11-01"), parse_time("2026-12-01"), None, site.timezone)
    run = notify.run_notify(site, period, input_path=str(month["dump"]), delimiter="\x1f|\x1e",
                            dry_run_dir=str(month["dump"].parent / "unused"))
    users = {n.name: n for n in run.notices if n.kind == "user"}
    use_by_user = {r["user"]: r for r in doc["gpu_use"]["by_user"]}
    runs_by_user = {r["user"]: r for r in doc["runs"]["by_user"]}
    assert len(use_by_user) > 100 and set(users) == set(use_by_user) | set(runs_by_user)
    for name, n in users.items():
        assert n.gpu_use == use_by_user.get(name), name
        assert n.runs == runs_by_user.get(name), name
        assert (n.period_start, n.period_end) == (doc["period"]["start"], doc["period"]["end"])
    (owned,) = [n for n in run.notices if n.kind == "account"]
    assert owned.name == OWNED
    assert owned.gpu_use == next(r for r in doc["gpu_use"]["by_account"] if r["account"] == OWNED)
    assert owned.runs == next(r for r in doc["runs"]["by_account"] if r["account"] == OWNED)
    # the account's users add up to its allocated GPU-hours
    assert sum(u["allocated_gpu_hours"] for u in owned.users) == pytest.approx(owned.gpu_use["allocated_gpu_hours"])
    # the worst jobs: ranked by held-idle GPU-hours, each as the report's worst list has it where it lists it
    worst = {r["job_id"]: r for r in doc["gpu_use"]["worst_held_idle"]}
    seen = 0
    for n in users.values():
        held = [j.held_idle_gpu_hours for j in n.worst_jobs]
        assert held == sorted(held, reverse=True) and len(held) <= site.notify.worst_jobs
        for j in n.worst_jobs:
            assert j.held_idle_gpu_hours > 0
            if j.job_id in worst:
                seen += 1
                r = worst[j.job_id]
                assert (r["user"], r["gpus"]) == (n.name, j.gpus)
                assert j.held_idle_gpu_hours == r["held_idle_gpu_hours"]
                assert j.allocated_gpu_hours == r["allocated_gpu_hours"]
                price = site.price_per_gpu_hour(j.gpu_type, j.partition)
                assert price is not None and j.held_idle_cost == pytest.approx(j.held_idle_gpu_hours * price)
    assert seen >= min(len(worst), 10)
    # a user's held-idle cost is their jobs' held-idle GPU-hours at each job's price
    top = max(users.values(), key=lambda n: (n.gpu_use or {}).get("held_idle_gpu_hours") or 0)
    assert top.held_idle_cost and top.held_idle_cost > 0
    # the one-job detectors' advice, where the report has the facts (a one-GPU job held idle)
    kinds = {f["kind"] for n in users.values() for j in n.worst_jobs for f in j.findings}
    assert "idle_gpu" in kinds


def test_dry_run_writes_eml_files_with_both_parts(month: dict[str, Any], tmp_path: Path) -> None:
    code, doc, _ = _notify(month["conf"], month["dump"], "--dry-run", str(tmp_path / "eml"))
    assert code == 0
    by_name = {(o["kind"], o["name"]): o for o in doc["notices"]}
    assert by_name[("user", month["opted"])]["status"] == "skipped" and by_name[("user", month["opted"])]["why"] == "opted_out"
    assert by_name[("account", OWNED)]["to"] == "pi@example.org"
    written = [o for o in doc["notices"] if o["status"] == "written"]
    files = sorted((tmp_path / "eml").glob("*.eml"))
    assert len(files) == len(written) == doc["counts"]["written"] > 100
    assert {f.stem for f in files} == {o["key"] for o in written}
    assert not (month["conf"].parent / "state" / "notify").exists()  # a dry run leaves the outbox alone
    for path in files:
        msg = BytesParser(policy=policy.default).parsebytes(path.read_bytes())
        kinds = [p.get_content_type() for p in msg.walk() if not p.is_multipart()]
        assert kinds == ["text/plain", "text/html"], path
        assert msg["From"] == "gpu@example.org" and msg["X-Gpuclust-Notice"] == path.stem
    one = next(f for f in files if f.stem.endswith("-user-" + written[0]["name"]))
    msg = BytesParser(policy=policy.default).parsebytes(one.read_bytes())
    assert msg["To"] == f"{written[0]['name']}@example.org"
    assert msg["Subject"].startswith("[bench] GPU use of " + written[0]["name"])
    text = msg.get_body(("plain",)).get_content()
    page = msg.get_body(("html",)).get_content()
    for words in ("Allocated GPU-hours", "Busy GPU-hours", "Held-idle GPU-hours", "Cost of the allocated"):
        assert words in text and words in page


def test_delivery_kept_while_smtp_is_down_then_sent_once(month: dict[str, Any], tmp_path: Path) -> None:
    sink = SmtpSink(tmp_path / "maildir")
    conf = _conf(month["bench"], tmp_path, sink.port, "subject = {cluster}: {kind} {name} {start}\n",
                 month["opted"])
    code, first, err = _notify(conf, month["dump"])  # the server is down: every mail is kept
    assert code == 0 and "kept in the outbox for the next run" in err
    wanted = {o["key"] for o in first["notices"] if o["status"] != "skipped"}
    assert wanted and {o["status"] for o in first["notices"] if o["key"] in wanted} == {"kept"}
    assert len(list((tmp_path / "state" / "notify" / "outbox" / "pending").glob("*.eml"))) == len(wanted)
    sink.start("ok")
    try:
        code, second, _ = _notify(conf, month["dump"])  # the next run: queued already, sent now
        assert code == 0
        assert {o["status"] for o in second["notices"] if o["key"] in wanted} == {"sent"}
        assert sum(d["sent"] for d in second["deliveries"]) == len(wanted)
        code, third, _ = _notify(conf, month["dump"])  # and never again
        assert code == 0 and third["deliveries"] == []
        assert {o["status"] for o in third["notices"] if o["key"] in wanted} == {"already_queued"}
        messages = sink.messages()
        assert sorted(m["X-Gpuclust-Notice"] for m in messages) == sorted(wanted)
        pi = next(m for m in messages if m["To"] == "pi@example.org")
        assert pi["Subject"] == f"bench: account {OWNED} 2026-11-01"
        assert [p.get_content_type() for p in pi.walk() if not p.is_multipart()] == ["text/plain", "text/html"]
    finally:
        sink.stop()


def test_keys_are_safe_and_distinct() -> None:
    a = notify.notice_key("c", "2026-11-01T00:00:00+00:00", "2026-11-08T00:00:00+00:00", "user", "alice")
    assert a == "notify-c-20261101000000-20261108000000-user-alice"
    odd = [notify.notice_key("c", "2026-11-01", "2026-11-08", "user", name) for name in ("a/b", "a_b", "a b", "x" * 300)]
    assert len(set(odd)) == 4
    from gpuclust.mail import Outbox

    for key in odd:
        Outbox("/nonexistent")._name(key)  # a valid outbox key (raises otherwise)


BASE = "[site]\ncluster_name = lab\n"


def test_notify_config_mail_over_guard_and_defaults() -> None:
    site = parse_config(BASE)
    assert site.notify.account_owners == {} and site.notify.opt_out == () and site.notify.worst_jobs == 5
    assert site.notify.mail == site.guard.mail
    site = parse_config(BASE + "[guard]\nsmtp_host = mx\nsmtp_port = 2525\naddress_template = {user}@example.org\n"
                        "[notify]\nsmtp_port = 26\nopt_out = alice, bob\naccount_owners = ml=a@example.org, "
                        "bio=b@example.org\nworst_jobs = 3\nsubject = {name} on {cluster}\n")
    n = site.notify
    assert (n.mail.smtp_host, n.mail.smtp_port, n.mail.address_template) == ("mx", 26, "{user}@example.org")
    assert site.guard.mail.smtp_port == 2525
    assert n.opt_out == ("alice", "bob") and n.account_owners == {"ml": "a@example.org", "bio": "b@example.org"}
    assert (n.worst_jobs, n.subject) == (3, "{name} on {cluster}")


@pytest.mark.parametrize(("text", "words"), [
    ("subject = GPU use of {login}\n", "unknown field {login}"),
    ("account_owners = ml=nobody\n", "expected an address"),
    ("smtp_port = 70000\n", "TCP port"),
])
def test_notify_config_problems_name_file_and_line(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(BASE + "[notify]\nworst_jobs = 2\n" + text, "site.conf")
    (problem,) = [str(p) for p in caught.value.problems]
    assert problem.startswith("site.conf:5:") and words in problem, problem


def test_opt_out_and_owner_files(month: dict[str, Any], tmp_path: Path) -> None:
    owners = tmp_path / "owners"
    owners.write_text("# account owner\nml ml-pi@example.org\nbad line here\n")
    opt = tmp_path / "optout"
    opt.write_text(f"{month['other']}  # asked on 2026-11-03\n")
    conf = _conf(month["bench"], tmp_path, free_port(), f"account_owners_file = {owners}\nopt_out_file = {opt}\n",
                 month["opted"])
    code, doc, err = _notify(conf, month["dump"], "--dry-run", str(tmp_path / "eml"))
    assert code == 0
    by_name = {(o["kind"], o["name"]): o for o in doc["notices"]}
    assert by_name[("user", month["other"])]["why"] == "opted_out" and by_name[("user", month["opted"])]["why"] == "opted_out"
    assert by_name[("account", "ml")]["to"] == "ml-pi@example.org" and ("account", OWNED) in by_name
    assert f"{owners}:3: expected `account address`" in err


def test_config_check_names_an_unknown_subject_field(tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text(BASE + "[notify]\nsubject = {cluster}: {who}\n")
    result = CliRunner().invoke(cli, ["config", "check", str(conf)])
    assert result.exit_code == 2
    assert f"{conf}:4:" in result.output and "unknown field {who}" in result.output


def test_from_the_store_as_report_build(tmp_path: Path) -> None:
    """The default source: the store that `report fetch` filled; the notices' figures are report build's."""
    from tests.unit import store_trees as st

    conf = st.write_config(tmp_path)
    conf.write_text(conf.read_text() + "[guard]\naddress_template = {user}@example.org\n")
    st.fetch_all(conf)
    day = st.DAYS[0]
    window = ("--since", day.isoformat(), "--until", st.until(day))
    built = st.run(conf, "build", *window, "--format", "json", "--out", str(tmp_path / "out"))
    assert built.exit_code == 0, built.output
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    result = st.run(conf, "notify", *window, "--json", "--dry-run", str(tmp_path / "eml"))
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)
    assert [(o["name"], o["status"]) for o in run["notices"]] == [("u0", "written")]
    (eml,) = (tmp_path / "eml").glob("*.eml")
    text = BytesParser(policy=policy.default).parsebytes(eml.read_bytes()).get_body(("plain",)).get_content()
    (use,) = doc["gpu_use"]["by_user"]
    (runs,) = doc["runs"]["by_user"]
    assert use["allocated_gpu_hours"] == st.GPU_HOURS_PER_DAY and runs["cost"] == 2 * st.GPU_HOURS_PER_DAY
    assert "Allocated GPU-hours" in text and f"{use['allocated_gpu_hours']:,.2f}" in text
    assert f"{runs['cost']:,.2f}" in text


def test_html_escapes_what_users_name() -> None:
    from gpuclust.accounting.figures.notices import UseNotice, WorstJob
    from gpuclust.accounting.output.notice_render import render

    job = WorstJob("7", "<script>x</script>\x1b[2J", "gpu", "h100", 1, "n1", None, None, 2.0, 0.0, 2.0, 0.0,
                   "usage_tres", 4.0, 4.0, [])
    n = UseNotice("user", "alice", "c", "2026-11-01T00:00:00+00:00", "2026-11-08T00:00:00+00:00", "EUR", 10.0,
                  {"jobs": 1, "allocated_gpu_hours": 2.0, "busy_gpu_hours": 0.0, "held_idle_gpu_hours": 2.0,
                   "coverage": 1.0, "util_mean_pct": 0.0}, None, 4.0, 0.0, [job])
    mail = render(n, key="k", to="alice@example.org", subject_template="{name}\n{cluster}")
    assert "<script>" not in mail.html and "&lt;script&gt;" in mail.html
    assert "\x1b" not in mail.text and "\n" not in mail.subject and mail.subject == "alice\\x0ac"
