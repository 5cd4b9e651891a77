"""Issue 42: property and fuzz tests of the health surfaces, in the style of test_fuzz_inputs.py (issue 28).

- snapshot files: the lab's recorded snapshots (tests/data/accept/health/lab-24.11) with one value somewhere
  in one source replaced by a value of another type (a string for a count, a list for a map, a number past 64
  bits, NaN, an escape sequence), run through `accept report` (text and --json);
- nvidia-smi XML: the real recordings (tests/data/accept/health/*.xml, SOURCES.md) mutated (a number of
  thousands of digits, an element removed or emptied, the document cut short, a foreign root, a DTD, bytes
  that are no UTF-8), read through the real collector;
- kernel logs: the real recordings (xid-*.txt) mixed with random bytes, escape sequences, huge codes and
  rotated logs (an older log after a newer one), read through the real collector and judged.

Asserted for every case: no exception escapes (no exit 70), a bad source is UNKNOWN for that source on that node
only (the other nodes' judgements stay what they were), what the collector writes fits the shape the reader
checks, and what reaches a terminal carries no control character. Deterministic (derandomize=True); the case
counts are in the test names.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuclust.accept.health import collect
from gpuclust.accept.health.kit import HealthPaths, parse_iso_time, to_finding
from gpuclust.accept.health.rules import judge_node
from gpuclust.accept.health.sources import nvidia_smi, xid
from gpuclust.cli.context import AppContext
from gpuclust.cli.main import cli
from gpuclust.config import parse_config
from gpuclust.findings import status_line
from gpuclust.output import terminal_safe
from gpuclust.slurm.runner import _text as command_text  # how a command's output is decoded

TESTS = Path(__file__).resolve().parents[1]
HEALTH = TESTS / "data" / "accept" / "health"
LAB = HEALTH / "lab-24.11"
SITE = (TESTS / "slurm_lab" / "lab-site.conf").read_text()
CONFIG = parse_config(SITE)
XML_SEEDS = sorted(HEALTH.glob("*.xml")) + sorted((HEALTH / "lab").glob("*.xml"))
LOG_SEEDS = sorted(HEALTH.glob("xid-*.txt"))
NAGIOS = {0, 1, 2, 3}

N_SNAPSHOT, N_XML, N_LOG = 100, 150, 150


def _settings(n: int) -> Callable[[Any], Any]:
    n *= max(1, int(os.environ.get("GPUCLUST_FUZZ_SCALE", "1")))
    fixed = os.environ.get("GPUCLUST_FUZZ_RANDOM", "") in ("", "0")
    return settings(max_examples=n, deadline=None, derandomize=fixed, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example])


ESCAPES = ["\x1b[31m", "\x1b]0;owned\x07", "\x1b[2J", "\r", "\n", "\x00", "\x9b", "\u202e", "\udcff", "\x08"]
HOSTILE = st.one_of(
    st.text(max_size=12), st.sampled_from(ESCAPES), st.integers(), st.sampled_from([2**64, -(2**63) - 1, 10**4000]),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
    st.just([[[]]]), st.just({"a": {"b": {}}}))


def _no_crash(result: Any) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert result.exit_code in NAGIOS, (result.exit_code, result.output)


def _unsafe_free(text: str) -> None:
    for line in text.splitlines():
        assert terminal_safe(line) == line, line


# ---- snapshot files ----------------------------------------------------------------------------------------

JOB = "15"  # node3 lost IPv4 packets (the cause); the other nodes' retransmits are its symptom
_CLEAN: dict[str, Any] = {}


def _verdicts(doc: dict[str, Any], node: str) -> list[tuple[str, str, str]]:
    return sorted((f["check"], str((f.get("details") or {}).get("detail")), f["severity"])
                  for f in doc["nodes"][node]["reasons"])


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a source's data a value can be replaced."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            if key != "status":
                out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value[:3]):
            out.extend(_paths(item, (*prefix, i)))
    return out


def _report(root: Path, *args: str) -> Any:
    conf = root.parent / "site.conf"
    conf.write_text(SITE.replace("/var/lib/gpuclust-lab/site-state/results", str(root)))
    result = CliRunner().invoke(cli, ["--config", str(conf), "accept", "report", "--job", JOB, *args],
                                obj=AppContext())
    _no_crash(result)
    return result


@_settings(N_SNAPSHOT)
@given(data=st.data(), node=st.sampled_from(["node1", "node2", "node4"]), phase=st.sampled_from(["before", "after"]))
def test_snapshot_type_confusion_fuzz_100_cases(data: st.DataObject, node: str, phase: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        shutil.copytree(LAB / "health" / JOB, root / "health" / JOB)
        shutil.copy(LAB / f"allreduce-{JOB}.jsonl", root)
        if not _CLEAN:
            _CLEAN.update(json.loads(_report(root, "--json").output))
        path = root / "health" / JOB / f"{node}-{phase}.json"
        snap = json.loads(path.read_text())
        source = data.draw(st.sampled_from(sorted(snap["sources"])))
        places = _paths(snap["sources"][source])
        where = data.draw(st.sampled_from(places)) if places else ()
        value = data.draw(HOSTILE)
        if where:
            target = snap["sources"][source]
            for key in where[:-1]:
                target = target[key]
            target[where[-1]] = value
        else:
            snap["sources"][source] = value
        path.write_text(json.dumps(snap))
        entry = collect.checked_source(source, snap["sources"][source])
        doc = json.loads(_report(root, "--json").output)
        _unsafe_free(_report(root).output)
        for other in ("node1", "node2", "node3", "node4"):
            if other != node:  # the other nodes are judged as before
                assert _verdicts(doc, other) == _verdicts(_CLEAN, other), (other, source, where, value)
        mine = _verdicts(doc, node)
        if entry.get("invalid"):
            assert ("health-unavailable", f"{source}-invalid", "UNKNOWN") in mine
            assert doc["nodes"][node]["status"] != "OK"
            invalid = [f for f in doc["nodes"][node]["reasons"] if f["details"]["detail"] == f"{source}-invalid"]
            assert node in invalid[0]["message"] and entry["invalid"]["field"] in invalid[0]["message"]
        else:  # a value of the right type: judged as hardware state, every other source's findings as before
            assert not any(d.endswith("-invalid") for _, d, _ in mine)


# ---- nvidia-smi XML --------------------------------------------------------------------------------------

_XML = {p.name: p.read_text() for p in XML_SEEDS}
_NUMBERS = ["9" * 4400, "-" + "9" * 5000, "1" + "0" * 25, "1e999", "NaN", "inf", "-0", "4294967295", "٣"]


@st.composite
def xml_mutated(draw: st.DrawFn) -> str:
    text = _XML[draw(st.sampled_from(sorted(_XML)))]
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.integers(0, 7))
        tags = [t for t in {m.split(">", 1)[0] for m in text.split("<")[1:]} if t and t[0].isalpha() and " " not in t]
        tag = draw(st.sampled_from(sorted(tags))) if tags else "gpu"
        start = text.find(f"<{tag}>")
        end = text.find(f"</{tag}>", start)
        if op == 0 and start >= 0 and end > start:  # a number where a value goes
            text = text[:start + len(tag) + 2] + draw(st.sampled_from(_NUMBERS)) + text[end:]
        elif op == 1 and start >= 0 and end > start:  # the element removed
            text = text[:start] + text[end + len(tag) + 3:]
        elif op == 2 and start >= 0 and end > start:  # emptied
            text = text[:start + len(tag) + 2] + text[end:]
        elif op == 3:  # cut short
            text = text[:draw(st.integers(0, len(text)))]
        elif op == 4:  # a foreign document
            text = draw(st.sampled_from(["<html><body>no</body></html>", "<?xml version='1.0'?><x/>",
                                         "<nvidia_smi_log><gpu><gpu><gpu/></gpu></gpu></nvidia_smi_log>",
                                         '<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
                                         "<nvidia_smi_log>" + "<gpu>" * 5000 + "</gpu>" * 5000 + "</nvidia_smi_log>"]))
        elif op == 5:  # bytes that are no UTF-8, as the runner decodes them
            at = draw(st.integers(0, len(text)))
            text = text[:at] + command_text(draw(st.binary(min_size=1, max_size=8))) + text[at:]
        elif op == 6:  # an escape sequence in a name
            text = text.replace("<product_name>", "<product_name>" + draw(st.sampled_from(ESCAPES)), 1)
        else:  # a GPU duplicated
            g0, g1 = text.find("<gpu "), text.find("</gpu>")
            if g0 >= 0 and g1 > g0:
                text = text[:g1 + 6] + text[g0:g1 + 6] + text[g1 + 6:]
    return text


def _snapshot(**sources: Any) -> dict[str, Any]:
    return {"schema": 1, "node": "n1", "phase": "x", "sources": sources}


@_settings(N_XML)
@given(text=xml_mutated())
def test_nvidia_smi_xml_mutation_fuzz_150_cases(text: str) -> None:
    with mock.patch.object(nvidia_smi, "run", return_value=text):
        entry = nvidia_smi.collect_nvidia_smi(HealthPaths(), 30.0)
    assert entry["status"] in ("ok", "unavailable"), entry
    json.dumps(entry, allow_nan=False)  # what the snapshot program writes is JSON
    checked = collect.checked_source("nvidia_smi", json.loads(json.dumps(entry)))
    assert not checked.get("invalid"), checked  # the reader takes what the writer writes
    before = json.loads((LAB / "health" / "14" / "node1-before.json").read_text())
    after = _snapshot(**{**before["sources"], "nvidia_smi": checked})
    found = judge_node("n1", before, after, CONFIG.health)
    for f in found:
        line = status_line("acceptance", f.severity, to_finding(f, "1", "allreduce").message)
        assert "\n" not in line and terminal_safe(line) == line


# ---- kernel logs -------------------------------------------------------------------------------------------

_LOGS = {p.name: p.read_bytes() for p in LOG_SEEDS}


@st.composite
def kernel_log(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 4))
        if kind == 0:  # a recorded log (several: a rotated one after the current)
            parts.append(_LOGS[draw(st.sampled_from(sorted(_LOGS)))])
        elif kind == 1:
            parts.append(draw(st.binary(max_size=200)))
        elif kind == 2:  # an Xid line with a hostile process name, message or code
            code = draw(st.sampled_from([b"79", b"48", b"9" * 5000, b"-1", b"013"]))
            junk = draw(st.sampled_from(ESCAPES)).encode("utf-8", "surrogateescape")
            stamp = draw(st.sampled_from([b"2026-12-04T17:25:00+0000 n1 kernel: ", b"[Fri Aug 30 11:43:09 2024] ",
                                          b"May 99 12:00:01 n1 kernel: ", b"0001-01-01T00:00:00+2359 ", b""]))
            parts.append(stamp + b"NVRM: Xid (PCI:0000:3b:00): " + code + b", pid=7, name=" + junk + b"python"
                         + junk + b", Ch 00000008\n")
        elif kind == 3:
            parts.append(b"x" * draw(st.integers(0, 100_000)) + b"\n")
        else:
            parts.append(draw(st.sampled_from([b"\r\n", b"\x00", b"\xff\xfe", b"\x1b[2J\n"])))
    return b"".join(parts)


@_settings(N_LOG)
@given(log=kernel_log(), since=st.booleans())
def test_kernel_log_fuzz_150_cases(log: bytes, since: bool) -> None:
    before = json.loads((LAB / "health" / "14" / "node1-before.json").read_text())
    start = parse_iso_time(before["time"]) if since else None
    with mock.patch.object(xid, "run", return_value=command_text(log)):
        entry = xid.collect_xid(HealthPaths(), start)
    assert entry["status"] == "ok", entry
    checked = collect.checked_source("xid", json.loads(json.dumps(entry, allow_nan=False)))
    assert not checked.get("invalid"), checked
    after = _snapshot(**{**before["sources"], "xid": checked})
    for f in judge_node("n1", before, after, CONFIG.health):
        line = status_line("acceptance", f.severity, f.message)
        assert "\n" not in line and terminal_safe(line) == line
