"""The Slurm edge against the real lab: the client, its pinned environment and its typed errors."""

import pytest

from gpuclust.errors import SlurmCommandError, SlurmTimeout
from gpuclust.slurm.client import CommandSlurmClient
from gpuclust.slurm.parse import parse_gres, parse_scontrol_oneliners, parse_slurm_time

pytestmark = pytest.mark.slurm


def test_client_reads_nodes_and_times_in_pinned_format(slurm_lab):
    client = CommandSlurmClient(slurm_conf=slurm_lab.slurm_conf)
    nodes = parse_scontrol_oneliners(client.scontrol(["show", "node", "-o"]))
    assert {n["NodeName"] for n in nodes} == set(slurm_lab.nodes)
    for node in nodes:
        assert parse_gres(node["Gres"])[0].type == parse_gres(slurm_lab.node_gres[node["NodeName"]])[0].type
        # SLURM_TIME_FORMAT is pinned per call, so times parse as ISO whatever the caller's env says
        assert parse_slurm_time(node["SlurmdStartTime"]) is not None


def test_bad_sacct_field_is_a_typed_error_with_argv_and_stderr(slurm_lab):
    client = CommandSlurmClient(slurm_conf=slurm_lab.slurm_conf)
    with pytest.raises(SlurmCommandError) as info:
        # a field no Slurm version has (Restarts, used here before, exists from 23.02 on)
        client.sacct(["-a", "-X", "-o", "NoSuchField"])
    assert info.value.argv[0] == "sacct"
    assert info.value.returncode != 0
    assert "NoSuchField" in info.value.stderr or "Invalid" in info.value.stderr


def test_timeout_is_a_typed_error(slurm_lab):
    client = CommandSlurmClient(slurm_conf=slurm_lab.slurm_conf)
    name = "gpuclust-timeout-test"
    try:
        with pytest.raises(SlurmTimeout):
            client.run("srun", ["-N1", "-t", "1", "-J", name, "sleep", "30"], timeout=1)
    finally:
        # the killed srun's allocation would otherwise hold a node until its time limit
        client.scancel(["-n", name])
