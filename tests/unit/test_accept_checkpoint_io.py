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
