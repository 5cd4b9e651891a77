"""The shared parsers on real output recorded from the lab (Slurm 22.05.8, tests/data/lab)."""

from gpuclust.slurm.parse import (
    gpu_count,
    gpu_type,
    parse_gres,
    parse_parsable,
    parse_scontrol_oneliners,
    parse_scontrol_record,
    parse_slurm_time,
    parse_tres,
)

LAB = "lab"


def read(data_dir, name):
    return (data_dir / LAB / name).read_text(encoding="utf-8")


def test_nodes_oneliner(data_dir):
    nodes = parse_scontrol_oneliners(read(data_dir, "scontrol_show_node_oneliner.txt"))
    assert [n["NodeName"] for n in nodes] == ["node1", "node2", "node3", "node4"]
    for node in nodes:
        assert parse_gres(node["Gres"])[0].count == 4
        assert parse_gres(node["Gres"])[0].type == "h100"
        assert gpu_count(parse_tres(node["CfgTRES"])) == 4
        assert node["Version"] == "22.05.8"
        assert node["OS"].startswith("Linux ")  # a value with spaces and '#'
        assert parse_slurm_time(node["BootTime"]) is not None


def test_running_job_record_has_gres_indexes(data_dir):
    job = parse_scontrol_record(read(data_dir, "scontrol_show_job_d_running_2node_gres.txt"))
    assert job["JobState"] == "RUNNING"
    assert job["Account"] == "physics"


def test_qos_and_assoc_tables(data_dir):
    qos = {row["Name"]: row for row in parse_parsable(read(data_dir, "sacctmgr_show_qos_parsable2.txt"))}
    assert "normal" in qos
    assert gpu_count(parse_tres(qos["gpu-normal"]["MaxTRESPU"])) == 8
    assoc = parse_parsable(read(data_dir, "sacctmgr_show_assoc_parsable2.txt"))
    physics = [a for a in assoc if a["Account"] == "physics" and not a["User"]]
    assert physics and gpu_count(parse_tres(physics[0]["GrpTRES"])) == 4


def test_completed_job_alloc_tres(data_dir):
    text = read(data_dir, "sacct_completed_2node_gres_X_alloctres.txt")
    assert "gres/gpu" in text
    rows = parse_parsable(read(data_dir, "sacct_completed_2node_gres_parsable2.txt"))
    alloc = next(r for r in rows if "." not in r.get("JobID", "x.") and r.get("AllocTRES"))
    tres = parse_tres(alloc["AllocTRES"])
    assert gpu_count(tres) == 2 and gpu_type(tres) == "h100"
