"""`sacct` for a few named jobs (`gpuclust job`): the rows of each job and its steps, read without the accounting
plane's columnar reader (no numpy, pyarrow or pandas: one job answers in a fraction of a second).

sacct runs as the calling user, with sacct's own permissions (a user sees their own jobs; never root). It is asked
with -D (every execution of a requeued job: the caller keeps the latest and says so) and without -X (the step rows
carry MaxRSS and the usage TRES), and a delimiter no field holds.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuclust.errors import InputError
from gpuclust.slurm.client import SlurmClient

JOB_FIELDS: tuple[str, ...] = (
    "JobID", "JobIDRaw", "User", "Account", "Partition", "QOS", "State", "ExitCode", "Start", "End", "Elapsed",
    "Timelimit", "AllocCPUS", "AllocTRES", "ReqMem", "NNodes", "NodeList", "TotalCPU", "MaxRSS",
    "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInTot", "ConsumedEnergyRaw",
)
REQUIRED: tuple[str, ...] = ("JobID", "State", "Start", "End")
DELIMITER = "\x1f|\x1e"  # (report fetch's: no job name, comment or TRES holds it)

# 123, 123_4 (an array task), 123+1 (a het component)
_JOB_ID = re.compile(r"^[0-9]+(?:_[0-9]+|\+[0-9]+)?$")


def check_job_id(text: str) -> str:
    """A job id as `gpuclust job` takes it, or InputError naming it."""
    raw = text.strip()
    if not _JOB_ID.match(raw):
        raise InputError(f"job id {text!r}: expected JOBID, JOBID_TASK (an array task) or JOBID+COMPONENT (a het "
                         "component), e.g. 123, 123_4, 123+1")
    return raw


def sacct_args(job_ids: Sequence[str]) -> list[str]:
    """The sacct command line for these ids (a het component is asked by its job: sacct -j takes no `+`)."""
    asked = list(dict.fromkeys(j.split("+", 1)[0] for j in job_ids))
    return ["-D", "--parsable2", f"--delimiter={DELIMITER}", "-j", ",".join(asked), "-o", ",".join(JOB_FIELDS)]


def read_rows(text: str, delimiter: str | None = None, source: str = "sacct",
              problems: list[str] | None = None) -> list[dict[str, str]]:
    """--parsable2 text with its header line -> one dict per row (keyed by the header; `_line`: its line number).
    The delimiter is told from the header when not given (gpuclust's, else `|`). A record that spans lines (a
    newline in a job name) is joined until it has the header's field count; a line with more fields than the
    header is InputError naming the line and the likely cause (with `problems`: listed there, the line skipped)."""
    lines = [line.removesuffix("\r") for line in text.split("\n")]  # (splitlines() splits at \x1e too)
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return []
    if delimiter is None:
        delimiter = DELIMITER if DELIMITER in lines[0] else "|"
    header = lines[0].split(delimiter)
    if header and header[-1] == "":  # `sacct -p`: a trailing delimiter
        header.pop()
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise InputError(f"{source}: line 1 is not a sacct --parsable2 header with {', '.join(missing)} (got "
                         f"{lines[0][:120]!r}): give the dump with its header line (no -n), asking at least "
                         f"{','.join(REQUIRED)}")
    rows: list[dict[str, str]] = []
    i = 1
    while i < len(lines):
        lineno = i + 1
        record = lines[i]
        i += 1
        if not record.strip():
            continue
        fields = record.split(delimiter)
        while len(fields) < len(header) and i < len(lines):  # a newline inside a field
            record += "\n" + lines[i]
            i += 1
            fields = record.split(delimiter)
        if len(fields) == len(header) + 1 and fields[-1] == "":
            fields.pop()
        if len(fields) != len(header):
            problem = (f"{source}:{lineno}: expected {len(header)} fields, got {len(fields)}: a field holds the "
                       f"delimiter {delimiter!r}? (give --delimiter, or dump with --delimiter=$'\\x1f|\\x1e')")
            if problems is None:
                raise InputError(problem)
            problems.append(problem + "; line skipped")
            continue
        row = dict(zip(header, fields, strict=True))
        row["_line"] = str(lineno)
        rows.append(row)
    return rows


def fetch_rows(client: SlurmClient, job_ids: Sequence[str]) -> list[dict[str, str]]:
    """The rows sacct gives for these jobs (as the calling user)."""
    return read_rows(client.sacct(sacct_args(job_ids)), DELIMITER)
