"""Field parsers: the scalar definitions, and the vectorised forms agreeing with them on any input."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuclust.accounting.ingest import fields as f
from gpuclust.errors import SlurmOutputError


@pytest.mark.parametrize(
    "text,expected",
    [
        ("123", f.JobId(123)),
        ("123_4", f.JobId(123, array_task=4)),
        ("123_[1-5]", f.JobId(123, array_pending="1-5")),
        ("123_[1,3-5%2]", f.JobId(123, array_pending="1,3-5%2")),
        ("123+0", f.JobId(123, het_offset=0)),
        ("123+1.batch", f.JobId(123, het_offset=1, step="batch")),
        ("123.batch", f.JobId(123, step="batch")),
        ("123.extern", f.JobId(123, step="extern")),
        ("123_4.0", f.JobId(123, array_task=4, step="0")),
    ],
)
def test_job_ids(text, expected):
    assert f.parse_job_id(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12a", "123_", "123+", "123\n", " 123"])
def test_bad_job_ids(text):
    with pytest.raises(SlurmOutputError):
        f.parse_job_id(text)


@pytest.mark.parametrize(
    "text,state",
    [("CANCELLED by 0", "CANCELLED"), ("CANCELLED by 1000", "CANCELLED"), ("REQUEUED", "REQUEUED"),
     ("NODE_FAIL", "NODE_FAIL"), ("PREEMPTED", "PREEMPTED"), ("OUT_OF_MEMORY", "OUT_OF_MEMORY"),
     ("TIMEOUT", "TIMEOUT"), ("COMPLETED", "COMPLETED")],
)
def test_states(text, state):
    assert f.parse_state(text) == state


def test_exit_code_and_times():
    assert f.parse_exit_code("1:0") == (1, 0)
    assert f.parse_exit_code("0:9") == (0, 9)
    for unknown in ("Unknown", "None", ""):
        assert f.parse_time_epoch(unknown) is None
    assert f.parse_time_epoch("1970-01-02T00:00:00") == 86400
    with pytest.raises(SlurmOutputError):
        f.parse_time_epoch("2026-13-02 10:00")


@pytest.mark.parametrize(
    "text,secs",
    [("00:05", 5), ("01:05", 65), ("1:00:00", 3600), ("12:34:56", 45296), ("2-00:00:00", 172800),
     ("1-02:03:04", 93784), ("10-00:00:01", 864001)],
)
def test_elapsed(text, secs):
    assert f.parse_elapsed(text) == secs


@pytest.mark.parametrize(
    "tres,gpus,gtype,mem",
    [
        ("billing=8,cpu=8,gres/gpu=2,gres/gpu:h100=2,mem=64G,node=1", 2, "h100", 65536.0),
        ("cpu=1,mem=1000M,node=1", 0, None, 1000.0),
        ("cpu=1,mem=512K,node=1,gres/gpu=1", 1, None, 0.5),
        # (was "h100", the largest type: every GPU then priced at the h100 rate; issue 13) a mix is priced per type
        ("cpu=1,mem=2T,gres/gpu=4,gres/gpu:a100=1,gres/gpu:h100=3", 4, "a100=1,h100=3", 2 * 1024.0**2),
        ("gres/gpu:h100=4,mem=4G,node=1", 4, "h100", 4096.0),  # typed keys alone (sacct 24.11): 4 GPUs
        ("gres/gpu:a100=1,gres/gpu:h100=3", 4, "a100=1,h100=3", None),
        ("gres/gpu=5,gres/gpu:h100=3", 5, "h100=3,*=2", None),  # 2 GPUs of no stated type
        ("gres/gpu=2,gres/gpu:h100=3", 2, "h100", None),
        ("cpu=1,gres/gpu:h100=0,gres/gpu=0", 0, None, None),
        ("", 0, None, None),
    ],
)
def test_alloc_tres(tres, gpus, gtype, mem):
    facts = f.parse_alloc_tres(tres)
    assert (facts.gpus, facts.gpu_type, facts.mem_mb) == (gpus, gtype, mem)
    vg, vt, vm, bad = f.v_alloc_tres(pa.array([tres]))
    assert (vg[0].as_py(), vt[0].as_py(), vm[0].as_py(), bool(bad[0])) == (gpus, gtype, mem, False)


# ---- vectorised == scalar, for arbitrary text -------------------------------------------------------

_alphabet = st.sampled_from(list("0123456789_+.[]-:,=/abcABCgresgpumh GKMTP|\n\"'é") + ["gres/gpu", "mem=", ":h100"])
_texts = st.lists(_alphabet, max_size=24).map("".join)
_job_ids = st.one_of(_texts, st.from_regex(r"\d{1,6}(_\d{1,3}|_\[[0-9,\-%]{0,6}\]|\+\d)?(\.(batch|extern|\d))?", fullmatch=True))
_tres = st.one_of(
    _texts,
    st.lists(st.sampled_from(["cpu=4", "mem=64G", "mem=100M", "gres/gpu=2", "gres/gpu:h100=2", "gres/gpu:a100=1",
                              "node=1", "billing=8", "gres/gpu=x", "mem=1Q", "bad"]), max_size=6).map(",".join),
)


def _scalar(fn, value):
    try:
        return fn(value), False
    except SlurmOutputError:
        return None, True


@settings(max_examples=150, deadline=None)
@given(st.lists(_job_ids, min_size=1, max_size=20))
def test_v_job_id_matches_scalar(values):
    out, is_step, bad = f.v_job_id(pa.array(values, pa.string()))
    for i, text in enumerate(values):
        ref, err = _scalar(f.parse_job_id, text)
        assert bool(bad[i]) == err, text
        if not err:
            assert out["job_base"][i].as_py() == ref.base
            assert out["array_task"][i].as_py() == ref.array_task
            assert out["het_offset"][i].as_py() == ref.het_offset
            assert out["array_pending"][i].as_py() == ref.array_pending
            assert bool(is_step[i]) == (ref.step is not None)


def test_v_job_id_a_step_named_like_a_range_is_no_range():
    """`12._[` is step `_[` of job 12, not a pending range: the vectorised parser agrees with the scalar one
    (hypothesis found it through the direct reader's step ids)."""
    values = ["12._[", "12._[1-3]", "12_[1-3]", "12_[]", "12_[1-3].batch", "7_[", "7.x_[1]"]
    out, is_step, bad = f.v_job_id(pa.array(values, pa.string()))
    for i, text in enumerate(values):
        ref, err = _scalar(f.parse_job_id, text)
        assert bool(bad[i]) == err, text
        if not err:
            assert out["array_pending"][i].as_py() == ref.array_pending, text
            assert bool(is_step[i]) == (ref.step is not None), text


@settings(max_examples=150, deadline=None)
@given(st.lists(_tres, min_size=1, max_size=20))
def test_v_alloc_tres_matches_scalar(values):
    gpus, gtype, mem, bad = f.v_alloc_tres(pa.array(values, pa.string()))
    for i, text in enumerate(values):
        ref, err = _scalar(f.parse_alloc_tres, text)
        assert bool(bad[i]) == err, text
        if not err:
            assert (gpus[i].as_py(), gtype[i].as_py()) == (ref.gpus, ref.gpu_type), text
            assert mem[i].as_py() == pytest.approx(ref.mem_mb), text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_texts, st.from_regex(r"(\d{1,2}-)?(\d{1,2}:)?\d{1,2}:\d{2}", fullmatch=True)), min_size=1, max_size=20))
def test_v_elapsed_state_exit_match_scalar(values):
    arr = pa.array(values, pa.string())
    secs, bad = f.v_elapsed(arr)
    states, sbad = f.v_state(arr)
    code, sig, ebad = f.v_exit_code(arr, pa.array([True] * len(values)))
    times, tbad = f.v_time(arr)
    for i, text in enumerate(values):
        ref, err = _scalar(f.parse_elapsed, text)
        assert bool(bad[i]) == err and (err or secs[i].as_py() == ref), text
        ref, err = _scalar(f.parse_state, text)
        assert bool(sbad[i]) == err and (err or states[i].as_py() == ref), text
        ref, err = _scalar(f.parse_exit_code, text)
        assert bool(ebad[i]) == err and (err or (code[i].as_py(), sig[i].as_py()) == ref), text
        ref, err = _scalar(f.parse_time_epoch, text)
        assert bool(tbad[i]) == err, text
        if not err:
            got = times[i].as_py()
            assert (None if got is None else int(got.timestamp())) == ref, text
