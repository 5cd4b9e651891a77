"""The policy keys of the site config: validation and compilation."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuclust.config import load_config, parse_config
from gpuclust.errors import ConfigError
from gpuclust.policy.compile import compile_policy

REPO = Path(__file__).resolve().parent.parent.parent
EXAMPLE = (REPO / "site.example.conf").read_text()


def test_example_compiles():
    pol = compile_policy(load_config(str(REPO / "site.example.conf")))
    assert pol.need_account and pol.default_partition == "gpu" and pol.fail_mode == "closed"
    assert [label.key for label in pol.labels] == ["team", "project"]
    assert pol.labels[0].exact == {"physics", "ml", "ops"} and pol.labels[1].any_value is False
    assert pol.partitions["gpu"].max_time_str == "2-00:00:00"
    assert pol.accounts["physics"].typed_limits and not pol.accounts["ml"].typed_limits


@pytest.mark.parametrize("replace,needle", [
    ("default_partition = gpu", "unknown partition 'gpu2'"),
    ("fail_mode = closed", "expected one of open, closed"),
    ("required_labels = team, project", "'model' is not in required_labels"),
])
def test_bad_policy_keys_are_config_errors(replace, needle):
    bad = {"default_partition = gpu": "default_partition = gpu2", "fail_mode = closed": "fail_mode = maybe",
           "required_labels = team, project": "required_labels = team, project\nlabel.model = x"}[replace]
    with pytest.raises(ConfigError) as exc:
        parse_config(EXAMPLE.replace(replace, bad), "site.conf")
    assert needle in str(exc.value)


def test_typed_qos_marks_partition():
    text = EXAMPLE.replace("[qos normal]\nmax_gpus_per_user = 8", "[qos normal]\nmax_gpus_per_user.h100 = 8")
    text = text.replace("require_wckey = no", "require_wckey = no\nqos = normal")
    pol = compile_policy(parse_config(text, "site.conf"))
    assert pol.partitions["gpu"].typed_limits and pol.qos_typed == {"normal"}
