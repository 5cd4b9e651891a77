"""`policy replay` (issue 47): stored requests through the submit policy, from real recorded submit lines."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from gpuclust.accounting.ingest.jsonin import parse_input
from gpuclust.cli.main import cli
from gpuclust.config import load_config
from gpuclust.errors import ConfigError
from gpuclust.policy.compile import compile_policy
from gpuclust.policy.evaluate import Evaluator
from gpuclust.policy.replay import (
    ACCOUNT_RECORDED,
    INFINITE,
    NO_LINE,
    NO_REQUEST,
    TIME_DEFAULT,
    TIME_UNKNOWN,
    UNPARSEABLE,
    WIDTH,
    fields_desc,
    line_descs,
    line_readings,
    partition_time_defaults,
    readings,
    render_table,
    replay,
    split_words,
)
from gpuclust.policy.sbatch import NO_VAL, option_table

DATA = Path(__file__).resolve().parent.parent / "data"
SITE = DATA / "policy" / "lab-site.conf"
COLUMNS = ["job_id", "job_id_raw", "job_base", "array_task", "het_offset", "job_name", "user", "account", "partition",
           "qos", "wckey", "comment", "state", "submit", "elapsed_s", "nnodes", "alloc_tres", "timelimit_s",
           "submit_line", "req_tres"]

# Real SubmitLine recordings (tests/data/policy/replay/README.md names each one's source).
ARRAY = ('sbatch --parsable -o /dev/null -e /dev/null -D /tmp --comment=team=ml project=acct7884f1de model=m-array '
         '-A ml -p debug -J acct-array --array=0-2 --gres=gpu:h100:1 --wrap sleep 1; test "$SLURM_ARRAY_TASK_ID" -ne 1')
REQUEUE = ('sbatch --parsable -o /dev/null -e /dev/null -D /tmp --comment=team=ml project=acct7884f1de '
           'model=m-requeue -A ml -J acct-requeue --gres=gpu:h100:1 --requeue --wrap if [ "${SLURM_RESTART_COUNT:-0}" '
           '-gt 0 ]; then sleep 1; else sleep 60; fi')
PIPE = ('sbatch --parsable -o /dev/null -e /dev/null -D /tmp --comment=team=ml project=acct7884f1de model=m-pipe -A ml '
        '-J acct|pipe "q" ü --gres=gpu:h100:1 --wrap sleep 1')
SLURMWEB = "sbatch --time 1 --wrap sleep 30 && true --partition gpu --gpus 4"
SCRIPT = ("sbatch --parsable --partition=gpu --nodes=4 --job-name=accept-allreduce --export=ALL "
          "--output=/tmp/pytest-of-root/pytest-15/test_real_acceptance_jobs_make0/results/logs/%x-%j.out "
          "--gres=gpu:h100:4 --ntasks-per-node=4 --account=ml --comment=team=ml,project=audit "
          "/work/wt/acct-versions/sbatch_templates/allreduce.sbatch")
HET = ("sbatch --parsable -o /dev/null -e /dev/null -D /tmp --comment=team=ml project=acct7884f1de model=m-het -A ml "
       "-J acct-het --gres=gpu:h100:1 --wrap sleep 2 : --gres=gpu:h100:2")


def _evaluator(path: Path = SITE) -> Evaluator:
    return Evaluator(compile_policy(load_config(str(path))))


def _row(**kw):
    row = {c: None for c in COLUMNS}
    row.update({"user": "alice", "account": "ml", "partition": "gpu", "qos": "normal", "wckey": "", "comment":
                "team=ml project=p", "state": "COMPLETED", "submit": 1_700_000_000, "elapsed_s": 3600, "nnodes": 1,
                "alloc_tres": "billing=1,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=1G,node=1", "timelimit_s": 3600,
                "req_tres": "billing=1,cpu=1,gres/gpu:h100=1,gres/gpu=1,mem=1G,node=1"})
    row.update(kw)
    jid = str(row["job_id"])
    row.setdefault("job_name", "j")
    row["job_base"] = row["job_base"] if row["job_base"] is not None else int(jid.split("_")[0].split("+")[0])
    row["job_id_raw"] = row["job_id_raw"] if row["job_id_raw"] is not None else row["job_base"]
    return row


def _table(rows):
    t = pa.Table.from_pylist(rows)
    return t.set_column(t.schema.get_field_index("submit"), "submit",
                        pa.array([r["submit"] for r in rows], pa.int64()).cast(pa.timestamp("s", tz="UTC")))


@pytest.mark.parametrize(("line", "expect", "value"), [
    (ARRAY, {"job_name": "acct-array", "comment": "team=ml project=acct7884f1de model=m-array"},
     ("--wrap", 'sleep 1; test "$SLURM_ARRAY_TASK_ID" -ne 1')),
    (REQUEUE, {"job_name": "acct-requeue"}, ("--wrap", 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ]; then sleep 1; '
                                                     'else sleep 60; fi')),
    (PIPE, {"job_name": "acct|pipe `q` ü"}, ("-J", 'acct|pipe "q" ü')),
    (SLURMWEB, {"job_name": "wrap"}, ("--wrap", "sleep 30 && true")),
    (SCRIPT, {"job_name": "accept-allreduce"}, ("--comment", "team=ml,project=audit")),
])
def test_recorded_lines_split_back_into_their_argv(line, expect, value):
    table = option_table("24.11")
    got = split_words(line.split(" ")[1:], table, expect, version="24.11")
    assert got is not None
    args, desc, _ = got
    flag, text = value
    assert (f"{flag}={text}" in args) or (args[args.index(flag) + 1] == text)
    if line == SLURMWEB:  # the options after the wrapped command are sbatch's
        assert desc["partition"] == "gpu" and desc["tres_per_job"] == "gres/gpu:4"


def test_comment_with_spaces_is_rebuilt():
    args, desc, wrap = split_words(ARRAY.split(" ")[1:], option_table("22.05"),
                                   {"job_name": "acct-array",
                                    "comment": "team=ml project=acct7884f1de model=m-array"})
    assert desc["comment"] == "team=ml project=acct7884f1de model=m-array" and wrap


def test_a_line_that_disagrees_with_the_record_is_not_read():
    # the recorded name is another one: no reading of the words gives it
    assert split_words(SCRIPT.split(" ")[1:], option_table("24.11"), {"job_name": "other"}) is None


def test_fields_desc_reads_the_request():
    desc, why = fields_desc(_row(job_id="5", req_tres="billing=8,cpu=8,gres/gpu:h100=2,gres/gpu=3,mem=8G,node=2",
                                 nnodes=2, timelimit_s=7200))
    assert why is None
    assert desc["tres_per_job"] == "gres/gpu:h100=2,gres/gpu=1" and desc["min_cpus"] == 8
    assert desc["time_limit"] == 120 and desc["min_nodes"] == 2 and desc["user_name"] == "alice"
    desc, _ = fields_desc(_row(job_id="5", timelimit_s=None))
    assert desc["time_limit"] == NO_VAL
    assert fields_desc(_row(job_id="6", req_tres=None, alloc_tres=""))[1] == NO_REQUEST


def test_line_alone_with_wrap_over_fields_with_a_script():
    fields, _ = fields_desc(_row(job_id="1", partition="gpu", account="ml", timelimit_s=365 * 86400))
    (desc,), why = line_descs(SLURMWEB, [{"job_name": "wrap"}], [fields], "24.11", frozenset({"gpu"}))
    assert why is None and desc["time_limit"] == 1 and desc.get("account") is None  # --wrap: no script, no -A
    fields, _ = fields_desc(_row(job_id="2", partition="gpu", account="ml", timelimit_s=1800,
                                 req_tres="cpu=16,gres/gpu:h100=16,gres/gpu=16,node=4"))
    (desc,), why = line_descs(SCRIPT, [{"job_name": "accept-allreduce"}], [fields], "24.11", frozenset({"gpu"}))
    assert why is None and desc["time_limit"] == 30  # from the fields (the script's #SBATCH --time)
    assert desc["tres_per_node"] == "gres/gpu:h100:4" and desc.get("tres_per_job") is None  # the line's GPUs


def test_replay_counts_arrays_once_and_sums_their_gpu_hours():
    rows = [_row(job_id=f"7_{i}", job_base=7, job_id_raw=70 + i, array_task=i, submit_line=ARRAY, partition="debug",
                 job_name="acct-array", comment="team=ml project=acct7884f1de model=m-array", elapsed_s=1800)
            for i in range(3)]
    # a requeued job: two executions, one job, both executions' GPU-hours
    rows += [_row(job_id="8", job_base=8, submit_line=None, elapsed_s=3600, req_tres="cpu=1,gres/gpu=8,node=2",
                  alloc_tres="cpu=1,gres/gpu=8,node=2", state=s) for s in ("REQUEUED", "COMPLETED")]
    rows.append(_row(job_id="9", submit_line="srun hostname", comment="team=ml project=p"))
    rows.append(_row(job_id="10", submit_line="sbatch --comment=a b c", comment="x y z"))
    rows.append(_row(job_id="11", submit_line=None, req_tres=None, alloc_tres="", elapsed_s=0, state="PENDING"))
    result = replay(_table(rows), {"current": _evaluator()}, version="24.11")
    doc = result.as_dict()
    assert doc["replayed"]["submissions"] == 4 and doc["replayed"]["jobs"] == 6
    assert doc["replayed"]["from_submit_line"] == 1
    assert doc["replayed"]["from_fields"] == {NO_LINE: 1, "submit line of srun (not sbatch), used fields": 1,
                                              UNPARSEABLE: 1}
    assert doc["not_replayed"]["reasons"] == [{"reason": NO_REQUEST, "submissions": 1, "jobs": 1, "gpu_hours": 0.0,
                                               "gpu_hours_unknown_jobs": 0}]
    current = doc["configs"]["current"]
    # job 8: 8 untyped GPUs on gpu (require_typed_gpu): refused, 2 executions x 1 h x 8 GPUs
    assert current["refused_by_rule"][0] == {"rule": "partition_typed_gpu", "submissions": 1, "jobs": 1,
                                             "gpu_hours": 16.0, "gpu_hours_unknown_jobs": 0}
    # job 10's recorded comment has no labels: refused from its fields
    assert current["refused_by_rule"][1]["rule"] == "label_missing"
    assert current["accepted"]["jobs"] == 4
    assert current["accepted"]["gpu_hours"] == pytest.approx(1.5 + 1)


def test_new_config_lists_changed_verdicts(tmp_path):
    strict = tmp_path / "strict.conf"
    strict.write_text(SITE.read_text().replace("[partition debug]\nmax_time = 1h",
                                               "[partition debug]\nmax_time = 1h\nallowed_accounts = physics"))
    rows = [_row(job_id=f"7_{i}", job_base=7, array_task=i, job_id_raw=70 + i, submit_line=ARRAY, partition="debug",
                 job_name="acct-array", comment="team=ml project=acct7884f1de model=m-array", elapsed_s=1800)
            for i in range(3)]
    rows.append(_row(job_id="12", submit_line=None))
    result = replay(_table(rows), {"current": _evaluator(), "new": _evaluator(strict)}, version="24.11").as_dict()
    assert result["configs"]["current"]["refused"]["jobs"] == 0
    assert result["configs"]["new"]["refused_by_account"] == [
        {"account": "ml", "submissions": 1, "jobs": 3, "gpu_hours": 1.5, "gpu_hours_unknown_jobs": 0}]
    assert result["changed"]["submissions"] == 1
    (c,) = result["changed"]["list"]
    assert c["job_id"] == "7" and c["new"]["rule"] == "partition_account" and c["current"]["accepted"]


def test_het_job_from_its_split_line():
    rows = [_row(job_id=f"13+{k}", job_base=13, het_offset=k, submit_line=HET, job_name="acct-het",
                 comment="team=ml project=acct7884f1de model=m-het",
                 req_tres=f"cpu=1,gres/gpu:h100={k + 1},gres/gpu={k + 1},node=1",
                 alloc_tres=f"cpu=1,gres/gpu:h100={k + 1},gres/gpu={k + 1},node=1") for k in range(2)]
    doc = replay(_table(rows), {"current": _evaluator()}, version="24.11").as_dict()
    assert doc["replayed"] == {"submissions": 1, "jobs": 2, "gpu_hours": 3.0, "gpu_hours_unknown_jobs": 0,
                               "from_submit_line": 1, "from_fields": {}}


def test_recorded_24_11_day_replays_every_line():
    parsed = parse_input((DATA / "accounting" / "24.11" / "day-json.json").read_bytes(), "|", "day-json.json")
    doc = replay(parsed.table.select(COLUMNS), {"current": _evaluator()}, version="24.11").as_dict()
    assert doc["replayed"]["submissions"] == 32 and doc["replayed"]["from_submit_line"] == 32
    assert doc["not_replayed"]["submissions"] == 0


def test_cli_replay_reads_the_store_and_names_a_bad_new_config(tmp_path, monkeypatch):
    from gpuclust.accounting.history import store

    conf = tmp_path / "site.conf"
    conf.write_text(SITE.read_text().replace("[site]\n", f"[site]\nstate_dir = {tmp_path / 'state'}\n"))
    parsed = parse_input((DATA / "accounting" / "24.11" / "day-json.json").read_bytes(), "|", "day-json.json")
    days = sorted({d.date() for d in parsed.table.column("submit").to_pylist() if d})
    root = store.store_dir(str(tmp_path / "state"))
    with store.staged(root, days, cluster="policy") as stage:
        for day in days:
            stage.write_day(day, parsed.table.filter(pa.compute.equal(
                pa.compute.cast(parsed.table.column("submit"), pa.date32()), pa.scalar(day, pa.date32()))))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    runner = CliRunner()
    since = min(days).isoformat()
    res = runner.invoke(cli, ["--config", str(conf), "policy", "replay", "--since", since, "--until",
                              "2030-01-01", "--json", "--slurm-version", "24.11"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.output)
    assert doc["replayed"]["submissions"] == 32
    bad = tmp_path / "bad.conf"
    bad.write_text(SITE.read_text() + "\n[policy]\nbogus = 1\n")
    res = runner.invoke(cli, ["--config", str(conf), "policy", "replay", "--since", since, "--config", str(bad)])
    assert res.exit_code == 2
    assert f"{bad}:" in res.output and "bogus" in res.output
    with pytest.raises(ConfigError):
        load_config(str(bad))
    res = runner.invoke(cli, ["--config", str(conf), "policy", "replay", "--since", since, "--until", "2030-01-01",
                              "--slurm-version", "24.11"])
    assert "policy replay: jobs submitted" in res.output and "label_missing" in res.output


# What the lab's 22.05 scontrol -o show partition prints (the fields read; the rest of each line cut).
PARTITIONS = ("PartitionName=gpu AllowGroups=ALL Default=YES DefaultTime=NONE MaxTime=UNLIMITED Nodes=node[1-4]\n"
              "PartitionName=debug AllowGroups=ALL Default=NO DefaultTime=NONE MaxTime=01:00:00 Nodes=node[1-4]\n"
              "PartitionName=short DefaultTime=00:20:00 MaxTime=2-00:00:00\n")
# Script jobs as the lab recorded them (tests/integration/test_policy_replay_lab.py): no -A, no --time on the line.
LAB_SCRIPT = "sbatch --parsable -o /dev/null -e /dev/null -D /tmp -p debug /tmp/gpuclust-replay-x/j.sh"
LAB_WRAP = "sbatch --parsable -o /dev/null -e /dev/null -D /tmp --gres=gpu:h100:3 --comment team=physics --wrap sleep 3"


def test_partition_time_defaults_from_scontrol():
    assert partition_time_defaults(PARTITIONS) == {"gpu": None, "debug": 60, "short": 20}


def _script_reading(timelimit_s, limits, partition="debug"):
    fields, _ = fields_desc(_row(job_id="40", partition=partition, account="physics", timelimit_s=timelimit_s,
                                 comment="team=physics"))
    descs, why, sets = line_readings(LAB_SCRIPT, [{"job_name": "j.sh", "comment": "team=physics"}], [fields],
                                     "22.05", frozenset({"gpu"}))
    assert why is None and sets == [frozenset()]
    return readings(descs, [fields], sets, limits)


def test_a_script_jobs_default_time_limit_reads_as_no_time():
    limits = partition_time_defaults(PARTITIONS)
    (desc,), other = _script_reading(3600, limits)  # debug's MaxTime, no DefaultTime: what a job without --time gets
    assert desc["time_limit"] == NO_VAL and other[TIME_DEFAULT][0]["time_limit"] == 60
    (desc,), other = _script_reading(365 * 86400, limits, "gpu")  # 22.05's record of an unlimited partition's
    assert desc["time_limit"] == NO_VAL and other[TIME_DEFAULT][0]["time_limit"] == INFINITE
    (desc,), other = _script_reading(None, limits, "gpu")  # 24.11: UNLIMITED
    assert desc["time_limit"] == NO_VAL and other[TIME_DEFAULT][0]["time_limit"] == INFINITE
    (desc,), other = _script_reading(2700, limits)  # 45 min is no default: the script's --time
    assert desc["time_limit"] == 45 and set(other) == {ACCOUNT_RECORDED}
    (desc,), other = _script_reading(2700, None)  # defaults unknown: as asked, the other reading tried
    assert desc["time_limit"] == 45 and other[TIME_UNKNOWN][0]["time_limit"] == NO_VAL
    (desc,), other = _script_reading(365 * 86400, None, "gpu")
    assert desc["time_limit"] == NO_VAL and TIME_DEFAULT in other
    # the account the line did not give: read as given, and as the user's default
    assert desc["account"] == "physics"
    assert (other[ACCOUNT_RECORDED][0]["account"], other[ACCOUNT_RECORDED][0]["default_account"]) == (None, "physics")


def test_a_wrap_line_without_account_used_the_default_one():
    fields, _ = fields_desc(_row(job_id="33", user="gpuclust-user", account="physics", timelimit_s=None,
                                 comment="team=physics", req_tres="cpu=1,gres/gpu:h100=3,gres/gpu=3,node=1"))
    (desc,), why, sets = line_readings(LAB_WRAP, [{"job_name": "wrap", "comment": "team=physics"}], [fields],
                                       "22.05", frozenset({"gpu"}))
    assert why is None and sets == [None]
    assert desc.get("account") is None and desc["default_account"] == "physics"
    primary, other = readings([desc], [fields], sets, None)
    assert other == {} and primary == [desc]  # --wrap: the line is the whole request


def _lab_rows():
    return [_row(job_id="33", user="gpuclust-user", account="physics", timelimit_s=None, submit_line=LAB_WRAP,
                 job_name="wrap", comment="team=physics", req_tres="cpu=1,gres/gpu:h100=3,gres/gpu=3,node=1",
                 alloc_tres="cpu=1,gres/gpu:h100=3,gres/gpu=3,node=1", elapsed_s=1200),
            _row(job_id="40", user="gpuclust-user", account="physics", partition="debug", timelimit_s=3600,
                 submit_line=LAB_SCRIPT, job_name="j.sh", comment="team=physics", elapsed_s=1800)]


LENIENT = "[site]\ncluster_name = lab\n[partition gpu]\ngpu_type = h100\ngpus_per_node = 4\n"
STRICT = LENIENT + ("[partition debug]\nmax_time = 30m\n[account physics]\nmax_gpus_per_job = 2\n"
                    "[policy]\ndefault_partition = gpu\n")


def test_replay_counts_verdicts_the_record_cannot_decide(tmp_path):
    lenient, strict = tmp_path / "lenient.conf", tmp_path / "strict.conf"
    lenient.write_text(LENIENT)
    strict.write_text(STRICT)
    evaluators = {"current": _evaluator(lenient), "new": _evaluator(strict)}
    limits = partition_time_defaults(PARTITIONS)
    doc = replay(_table(_lab_rows()), evaluators, version="22.05", partition_limits=limits).as_dict()
    assert doc["partition_defaults"] == "scontrol"
    new = doc["configs"]["new"]
    # 33: 3 GPUs over physics' 2 by its default account; 40: no --time read as none, accepted, but uncertain
    assert [(r["rule"], r["jobs"]) for r in new["refused_by_rule"]] == [("account_max_gpus", 1)]
    assert new["uncertain"] == [{"reason": TIME_DEFAULT, "submissions": 1, "jobs": 1, "gpu_hours": 0.5,
                                 "gpu_hours_unknown_jobs": 0, "job_ids": ["40"]}]
    assert doc["configs"]["current"]["uncertain"] == []
    (c,) = doc["changed"]["list"]
    assert (c["job_id"], c["new"]["rule"], c["uncertain"]) == ("33", "account_max_gpus", [])
    # without the partitions' defaults, 60 min reads as asked: refused, and said to be uncertain
    doc = replay(_table(_lab_rows()), evaluators, version="22.05").as_dict()
    assert doc["partition_defaults"] == "unknown"
    assert [u["reason"] for u in doc["configs"]["new"]["uncertain"]] == [TIME_UNKNOWN]
    assert {c["job_id"]: c["uncertain"] for c in doc["changed"]["list"]} == {"33": [], "40": [TIME_UNKNOWN]}


def test_table_fits_80_columns(tmp_path):
    lenient, strict = tmp_path / "lenient.conf", tmp_path / "strict.conf"
    lenient.write_text(LENIENT)
    strict.write_text(STRICT)
    gpus3 = "cpu=1,gres/gpu:h100=3,gres/gpu=3,node=1"
    rows = _lab_rows() + [_row(job_id=str(100 + i), user="a-rather-long-user-name", account="physics", comment="",
                               submit_line=None, req_tres=gpus3, alloc_tres=gpus3) for i in range(3)]
    rows.append(_row(job_id="200", submit_line="srun hostname"))
    result = replay(_table(rows), {"current": _evaluator(lenient), "new": _evaluator(strict)}, version="22.05",
                    since="2026-11-01T00:00:00+00:00", until="2026-12-01T00:00:00+00:00")
    text = render_table(result, limit=2)
    assert max(len(line) for line in text.splitlines()) <= WIDTH, text
    assert "policy replay: jobs submitted 2026-11-01 00:00:00 .. 2026-12-01 00:00:00 +00:00" in text
    assert "a-rather-lo+" in text  # a name cut as squeue cuts it
    assert "verdict uncertain" in text and "... 3 more (--json lists them)" in text
    assert "accept -> account_max_gpus" in text
