"""Issue 45 items 8-10: an input error leads to its fix. Built on the recorded lab dump (lab-parsable.txt,
written with gpuclust's fetch delimiter), converted by each test to what a site's sacct writes instead: another
delimiter, or times in a site's SLURM_TIME_FORMAT.

* a dump in another delimiter is told the `--delimiter` value that reads it, as it is pasted into a shell;
* a `,` dump is refused, saying why (AllocTRES holds commas), whether told or detected;
* a dump whose every row is rejected is an input error (exit 2) naming the field, the value and the fix;
* rows rejected among good ones end the warnings with their total and the likely fix.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuclust.cli.main import cli
from gpuclust.exitcodes import EXIT_INPUT, EXIT_OK

DATA = Path(__file__).resolve().parent.parent / "data" / "accounting"
FETCH = b"\x1f|\x1e"
MONTHS = "Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec".split()
TIME = re.compile(rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):\d\d")


def _recorded() -> bytes:
    data = (DATA / "lab-parsable.txt").read_bytes()
    assert data.split(b"\n", 1)[0].count(FETCH) > 10  # the recording is in the fetch delimiter
    return data


def _site_times(line: bytes) -> bytes:
    """A line's times as a site's SLURM_TIME_FORMAT="%b %d %H:%M" writes them (`Dec 02 11:21`)."""
    return TIME.sub(lambda m: b"%s %s %s:%s" % (MONTHS[int(m[2]) - 1].encode(), m[3], m[4], m[5]), line)


def _run(tmp_path: Path, dump: bytes, command: str = "build", *extra: str):
    src = tmp_path / "dump.txt"
    src.write_bytes(dump)
    conf = tmp_path / "site.conf"
    conf.write_text((DATA / "site.conf").read_text().replace("/nonexistent/replaced-by-tests", str(tmp_path / "st")))
    args = ["--config", str(conf), "report", command, "--input", str(src), *extra]
    if command == "build":
        args += ["--out", str(tmp_path / "out")]
    return CliRunner().invoke(cli, args)


@pytest.mark.parametrize("delimiter", [b"\t", b";", b"#|#"])
def test_delimiter_advice_pasted_into_a_shell_reads_the_dump(tmp_path, delimiter):
    dump = _recorded().replace(FETCH, delimiter)
    refused = _run(tmp_path, dump)
    assert refused.exit_code == EXIT_INPUT, refused.output
    assert "no header" not in refused.output and "is not a header" not in refused.output, refused.output
    advice = re.search(r"pass (--delimiter \S+)", refused.output)
    assert advice, refused.output
    # what the shell hands gpuclust when the advice is pasted
    words = shlex.split(advice[1])
    done = _run(tmp_path, dump, "build", *words)
    assert done.exit_code == EXIT_OK, (words, done.output)
    assert "warning" not in done.output, done.output


@pytest.mark.parametrize("told", [False, True])
def test_a_comma_dump_is_refused_saying_why(tmp_path, told):
    dump = _recorded().replace(FETCH, b",")
    result = _run(tmp_path, dump, "build", *(["--delimiter", ","] if told else []))
    assert result.exit_code == EXIT_INPUT, result.output
    assert "AllocTRES holds commas" in result.output and "dump.txt" in result.output, result.output
    assert "pass --delimiter" not in result.output, result.output


@pytest.mark.parametrize("command", ["build", "show"])
def test_a_dump_of_site_times_names_field_value_and_fix(tmp_path, command):
    dump = _site_times(_recorded())
    for extra in ((), ("--since", "2026-12-02", "--until", "2026-12-03")):
        result = _run(tmp_path, dump, command, *extra)
        assert result.exit_code == EXIT_INPUT, result.output
        assert "give --since and --until" not in result.output, result.output
        assert "all 15 row(s) were rejected" in result.output, result.output
        assert "Submit 'Dec 02 11:21'" in result.output and "SLURM_TIME_FORMAT=standard" in result.output
    assert not (tmp_path / "out" / "report.json").exists()  # never an empty report


@pytest.mark.parametrize("command", ["build", "show"])
def test_rejected_rows_end_with_their_total_and_the_fix(tmp_path, command):
    lines = _recorded().split(b"\n")
    lines[3] = _site_times(lines[3])
    result = _run(tmp_path, b"\n".join(lines), command)
    assert result.exit_code == EXIT_OK, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert "[Submit] cannot parse Submit 'Dec 02 11:21'" in warnings[0], warnings
    assert re.search(r"1 of 15 row\(s\) rejected", warnings[-1]) and "SLURM_TIME_FORMAT=standard" in warnings[-1]


def test_the_total_says_how_many_are_not_listed(tmp_path):
    """Past the 50 problems listed, the total still counts every rejected row."""
    lines = _recorded().rstrip(b"\n").split(b"\n")
    body = lines[1:] * 8  # 120 rows (the same jobs again: rejected rows are counted before any dedupe)
    bad = [_site_times(row) if i % 2 else row for i, row in enumerate(body)]
    rejected = sum(a != b for a, b in zip(bad, body, strict=True))
    assert rejected > 50
    result = _run(tmp_path, b"\n".join([lines[0], *bad]) + b"\n", "show")
    assert result.exit_code == EXIT_OK, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 51, warnings
    assert warnings[-1].startswith(f"warning: {rejected} of 120 row(s) rejected"), warnings[-1]
    assert "the first 50 listed above" in warnings[-1], warnings[-1]
