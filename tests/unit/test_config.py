import textwrap

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.config import load_config, parse_config
from gpuclust.config.values import parse_duration, parse_size
from gpuclust.errors import ConfigError

MINIMAL = "[site]\ncluster_name = lab\n"


def test_example_config_is_clean(example_config_path):
    result = CliRunner().invoke(cli, ["config", "check", str(example_config_path)])
    assert result.exit_code == 0, result.output
    config = load_config(str(example_config_path))
    assert config.partitions["gpu"].gpu_type == "h100"
    assert config.price_per_gpu_hour("h100", "gpu") == 2.5
    assert config.price_per_gpu_hour("unknown-type", "gpu") == 2.5
    assert config.accounts["physics"].limits.gpu_limit_by_type == {"h100": 4}


def test_typo_key_names_the_line_and_suggests(tmp_path):
    conf = tmp_path / "site.conf"
    conf.write_text(MINIMAL + "[partition gpu]\ngpu_tpye = h100\n")
    result = CliRunner().invoke(cli, ["config", "check", str(conf)])
    assert result.exit_code == 2
    assert f"{conf}:4:" in result.output
    assert "did you mean 'gpu_type'" in result.output


def test_every_problem_is_reported_not_just_the_first(tmp_path):
    text = textwrap.dedent(
        """\
        [site]
        cluster_name = lab
        retry_window = soon
        [partiton gpu]
        [partition gpu]
        price_per_gpu_hour = -1
        allowed_accounts = nobody
        [account ml]
        allowed_partitions = gpu
        allowed_partitions = cpu
        """
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, "x.conf")
    messages = [str(p) for p in info.value.problems]
    assert any(m.startswith("x.conf:3:") and "duration" in m for m in messages)
    assert any(m.startswith("x.conf:4:") and "did you mean 'partition'" in m for m in messages)
    assert any(m.startswith("x.conf:6:") and ">= 0" in m for m in messages)
    assert any("unknown account 'nobody'" in m for m in messages)
    assert any(m.startswith("x.conf:10:") and "duplicate key" in m for m in messages)


def test_missing_site_section():
    with pytest.raises(ConfigError, match=r"\[site\]"):
        parse_config("[partition gpu]\n", "x.conf")


def test_search_order_env_then_default(tmp_path, monkeypatch):
    conf = tmp_path / "env.conf"
    conf.write_text(MINIMAL)
    monkeypatch.setenv("GPUCLUST_CONFIG", str(conf))
    assert load_config().cluster_name == "lab"
    explicit = tmp_path / "explicit.conf"
    explicit.write_text("[site]\ncluster_name = other\n")
    assert load_config(str(explicit)).cluster_name == "other"
    monkeypatch.delenv("GPUCLUST_CONFIG")
    with pytest.raises(ConfigError, match="/etc/gpuclust/site.conf"):
        load_config()


def test_values_reject_unsafe_names_and_parse_units(tmp_path):
    with pytest.raises(ConfigError, match="not a valid Slurm name"):
        parse_config(MINIMAL + "[partition gpu]\nallowed_accounts = ml;rm\n[account ml]\n", "x.conf")
    assert parse_duration("2-00:00:00") == 172800
    assert parse_duration("24h") == 86400
    assert parse_duration("90:00") == 5400
    assert parse_duration("1-02:03") == 93780  # Slurm's days-hours:minutes
    with pytest.raises(ValueError):
        parse_duration("1:2.5")
    assert parse_size("64M") == 64 * 1024**2


def test_check_json(tmp_path):
    conf = tmp_path / "site.conf"
    conf.write_text(MINIMAL + "bogus = 1\n")
    result = CliRunner().invoke(cli, ["config", "check", "--json", str(conf)])
    assert result.exit_code == 2
    assert '"line": 3' in result.output
