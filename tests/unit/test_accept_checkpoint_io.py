"""save_checkpoint / restore_checkpoint (issue 18): a round trip gives the same tensors, the global CRC32 option
of torch.save is left as it was, and the CRC-less file still loads with torch.load."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuclust.accept.storage import make_state_dict, restore_checkpoint, save_checkpoint, state_digest  # noqa: E402


@pytest.mark.parametrize("crc32", [False, True])
def test_round_trip_and_crc_option_restored(tmp_path, crc32):
    state = make_state_dict(torch, 3 * 4 * 1024 * 1024 + 12, seed=7)
    before = torch.serialization.get_crc32_options()
    path = tmp_path / "ckpt.pt"
    seconds = save_checkpoint(torch, state, path, crc32=crc32)
    assert seconds > 0 and torch.serialization.get_crc32_options() == before
    loaded, read_seconds = restore_checkpoint(torch, path)
    assert read_seconds > 0 and state_digest(torch, loaded) == state_digest(torch, state)
    assert state_digest(torch, torch.load(path, weights_only=True)) == state_digest(torch, state)


def _direct_ok(directory) -> bool:
    import os

    try:
        fd = os.open(directory / "probe", os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o644)
    except OSError:
        return False
    os.close(fd)
    return True


def test_direct_writer_keeps_bytes_and_order(tmp_path):
    """Odd-sized headers, unaligned and page-aligned memory: the file is exactly the bytes written, in order."""
    import mmap
    import os

    from gpuclust.accept.storage import DIRECT_ALIGN, DirectWriter

    aligned = mmap.mmap(-1, 3 * DIRECT_ALIGN)
    aligned[:] = bytes(range(256)) * (3 * DIRECT_ALIGN // 256)
    pieces = [b"PK" * 15, os.urandom(4066), memoryview(aligned), os.urandom(5), bytes(9000), os.urandom(70001)]
    path = tmp_path / "out.bin"
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (getattr(os, "O_DIRECT", 0) if _direct_ok(tmp_path) else 0)
    fd = os.open(path, flags, 0o644)
    writer = DirectWriter(fd, threads=2, stage_bytes=4 * DIRECT_ALIGN)
    for piece in pieces:
        assert writer.write(piece) == len(memoryview(piece).cast("B"))
    writer.close()
    os.close(fd)
    assert path.read_bytes() == b"".join(bytes(p) for p in pieces)
    assert writer.zero_copy == 3 * DIRECT_ALIGN  # the aligned piece started on an aligned offset (30 + 4066)


def test_direct_round_trip_views_and_methods(tmp_path):
    """Shared storages, strided views and nesting survive the O_DIRECT save and the meta + one-buffer restore; the
    file is an ordinary torch.save file; restored tensors are writable."""
    base = torch.arange(4096 * 3, dtype=torch.float32)
    state = {"a": base, "b": base[::3], "c": {"d": [torch.ones(5, 7, dtype=torch.float64).t()], "n": 3},
             "e": torch.randn(2, 1024 * 1024)}
    path = tmp_path / "ckpt.pt"
    how: dict = {}
    save_checkpoint(torch, state, path, info=how)
    assert how["method"].startswith("torch.save, O_DIRECT" if _direct_ok(tmp_path) else "torch.save, buffered")
    meta = torch.load(path, map_location="meta", weights_only=True)
    assert meta["e"].untyped_storage()._checkpoint_offset % 4096 == 0  # records on pages: zero-copy O_DIRECT
    read_how: dict = {}
    loaded, _ = restore_checkpoint(torch, path, info=read_how)
    assert read_how["method"].startswith("meta torch.load")
    for got in (loaded, torch.load(path, weights_only=True)):
        assert torch.equal(got["a"], state["a"]) and torch.equal(got["b"], state["b"])
        assert got["b"].stride() == (3,) and got["c"]["n"] == 3
        assert torch.equal(got["c"]["d"][0], state["c"]["d"][0]) and torch.equal(got["e"], state["e"])
    loaded["e"][0, 0] = 42.0
    assert float(loaded["e"][0, 0]) == 42.0


def test_falls_back_to_buffered_where_o_direct_is_refused(tmp_path, monkeypatch):
    import errno
    import os

    from gpuclust.accept import storage

    real_open = os.open

    def no_direct(path, flags, *args):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "O_DIRECT refused (test)")
        return real_open(path, flags, *args)

    monkeypatch.setattr(storage.os, "open", no_direct)
    state = make_state_dict(torch, 2 * 4 * 1024 * 1024, seed=3)
    path = tmp_path / "ckpt.pt"
    how: dict = {}
    save_checkpoint(torch, state, path, info=how)
    assert how["method"] == "torch.save, buffered, CRC32 off"
    read_how: dict = {}
    loaded, _ = restore_checkpoint(torch, path, info=read_how)
    assert read_how["method"] == "meta torch.load + buffered read into one buffer"
    assert state_digest(torch, loaded) == state_digest(torch, state)
    loaded, _ = restore_checkpoint(torch, path, direct=False, info=read_how)
    assert read_how["method"] == "torch.load" and state_digest(torch, loaded) == state_digest(torch, state)


def test_preallocated_file_is_trimmed_to_its_length(tmp_path):
    state = make_state_dict(torch, 2 * 4 * 1024 * 1024 + 8, seed=5)
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    save_checkpoint(torch, state, a)
    how: dict = {}
    save_checkpoint(torch, state, b, preallocate=True, info=how)
    assert a.read_bytes() == b.read_bytes()
    assert "preallocated" in how["method"] or "buffered" in how["method"]
    loaded, _ = restore_checkpoint(torch, b)
    assert state_digest(torch, loaded) == state_digest(torch, state)


def test_restore_falls_back_to_torch_load_where_torch_gives_no_record_offsets(tmp_path, monkeypatch):
    """torch >= 2.1 is supported; meta storages carry their record's offset only in newer ones."""
    from gpuclust.accept import storage

    def no_offset(_storage):
        raise storage._NoRecordOffset

    monkeypatch.setattr(storage, "_record_offset", no_offset)
    state = make_state_dict(torch, 2 * 4 * 1024 * 1024, seed=7)
    path = tmp_path / "ckpt.pt"
    save_checkpoint(torch, state, path)
    read_how: dict = {}
    loaded, seconds = restore_checkpoint(torch, path, info=read_how)
    assert read_how["method"] == "torch.load (this torch gives no record offsets)"
    assert seconds >= 0 and state_digest(torch, loaded) == state_digest(torch, state)
