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


@pytest.mark.parametrize("options", [{}, {"prefault": False, "threads": 1}, {"huge": False, "threads": 3},
                                     {"chunk": 2 * 4096}])
def test_read_file_into_gives_the_exact_bytes(tmp_path, options):
    """Odd-sized files (not a multiple of a page or a chunk), any number of readers, with or without prefaulting."""
    import os

    from gpuclust.accept.storage import read_file_into

    for size in (0, 1, 4095, 4096, 3 * 8192 + 123, 5 * 1024 * 1024 + 17):
        path = tmp_path / f"f{size}.bin"
        data = os.urandom(size)
        path.write_bytes(data)
        buf, got, _ = read_file_into(path, **options)
        assert got == size and buf[:size] == data
        buf.close()


def test_read_file_into_without_madv_populate_write(tmp_path, monkeypatch):
    """A kernel without MADV_POPULATE_WRITE (before 5.14): the readers fault their own chunks in."""
    import os

    from gpuclust.accept import storage

    calls: list[int] = []

    def refuse(address: int, length: int) -> bool:
        calls.append(length)
        return False

    monkeypatch.setattr(storage, "_populate", refuse)
    data = os.urandom(3 * 1024 * 1024 + 5)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    buf, size, _ = storage.read_file_into(path, chunk=1024 * 1024)
    assert calls == [1024 * 1024] and size == len(data) and buf[:size] == data


@pytest.mark.parametrize("options", [{}, {"overlap": False}, {"threads": 1, "prefault": False, "chunk": 64 * 1024}])
def test_restore_keeps_dtypes_odd_sizes_and_shared_storages(tmp_path, options):
    """Odd-sized tensors of several dtypes (records end off a page), shared and strided views, nesting, with the
    restore's reader options."""
    gen = torch.Generator().manual_seed(11)
    shared = torch.randn(1001, generator=gen)
    state = {"w": torch.randn(3, 333, generator=gen).t(), "h": torch.randn(7, generator=gen).to(torch.bfloat16),
             "i": torch.arange(13, dtype=torch.int8), "m": torch.tensor([True, False, True]),
             "s": shared, "s2": shared[10:20], "n": {"l": [shared[::7], (torch.zeros(0),)], "x": "text"}}
    path = tmp_path / "ckpt.pt"
    save_checkpoint(torch, state, path)
    read_how: dict = {}
    loaded, _ = restore_checkpoint(torch, path, info=read_how, **options)
    assert read_how["method"].startswith("meta torch.load")
    for key in ("w", "h", "i", "m", "s", "s2"):
        assert loaded[key].dtype == state[key].dtype and loaded[key].stride() == state[key].stride()
        assert torch.equal(loaded[key], state[key])
    assert torch.equal(loaded["n"]["l"][0], shared[::7]) and loaded["n"]["l"][1][0].numel() == 0
    assert isinstance(loaded["n"]["l"][1], tuple) and loaded["n"]["x"] == "text"
    loaded["s"][12] = 5.0  # one storage, as saved: the views see the write
    assert float(loaded["s2"][2]) == 5.0 and float(loaded["n"]["l"][0][0]) == float(loaded["s"][0])
