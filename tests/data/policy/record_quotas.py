"""Record `policy quotas` inputs on a running lab, before and after `policy quotas apply`, then restore the lab.

    python tests/data/policy/record_quotas.py LABNAME   # writes tests/data/policy/quotas-<version>/

Files: qos.before.txt, assoc.before.txt, qos.after.txt, assoc.after.txt (sacctmgr --parsable2 with the formats
gpuclust uses), show-config.txt (scontrol show config), meta.json (version, cluster). tests/unit/test_policy_quotas.py
replays them: the plan from 'before' is what apply ran, the plan from 'after' is empty.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
sys.path.insert(0, str(REPO))
from gpuclust.policy.quotas import ASSOC_FORMAT, QOS_FORMAT  # noqa: E402

NAME = sys.argv[1]
env_json = json.loads(subprocess.run([str(REPO / "tests/slurm_lab/slurm-lab"), "--name", NAME, "env", "--json"],
                                     capture_output=True, text=True, check=True).stdout)
os.environ.update(env_json["env"])
cluster = env_json["cluster_name"]
version = subprocess.run(["sinfo", "--version"], capture_output=True, text=True).stdout.split()[-1]
key = ".".join(version.split(".")[:2])
out = HERE / f"quotas-{key}"
out.mkdir(exist_ok=True)


def sh(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout


def snap(when: str) -> None:
    (out / f"qos.{when}.txt").write_text(sh("sacctmgr", "show", "qos", QOS_FORMAT, "--parsable2"))
    (out / f"assoc.{when}.txt").write_text(
        sh("sacctmgr", "show", "assoc", "where", f"cluster={cluster}", ASSOC_FORMAT, "--parsable2"))


conf = Path(tempfile.mkdtemp()) / "lab-site.conf"
conf.write_text((HERE / "lab-site.conf").read_text().replace("cluster_name = policy", f"cluster_name = {cluster}"))
(out / "show-config.txt").write_text(sh("scontrol", "show", "config"))
snap("before")
applied = subprocess.run([str(REPO / ".venv/bin/gpuclust"), "--config", str(conf), "policy", "quotas", "apply", "--yes",
                          "--json"], capture_output=True, text=True)
snap("after")
(out / "meta.json").write_text(json.dumps({"slurm_version": version, "cluster": cluster, "apply_rc": applied.returncode,
                                           "applied": json.loads(applied.stdout or "{}").get("applied")}, indent=1))
for args in (["modify", "account", "where", "name=physics", f"cluster={cluster}", "set", "GrpTRES=gres/gpu:h100=-1",
              "GrpTRESMins=gres/gpu=-1", "MaxTRES=gres/gpu=-1"],
             ["modify", "account", "where", "name=ml", f"cluster={cluster}", "set", "MaxTRES=gres/gpu=-1"],
             *[["modify", "user", "where", f"name={u}", "account=ml", f"cluster={cluster}", "set", "GrpTRES=gres/gpu=-1"]
               for u in ("root", env_json["unprivileged_user"])],
             ["delete", "qos", "gpuclust-test"]):
    subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True)
print(out)
