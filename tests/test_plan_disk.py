"""The disk prediction against the bytes `eagle3kit data` actually wrote (tiny verifier; SmolLM2, slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eagle3kit.data.dataset import build_dataset
from eagle3kit.data.directory import DataDir
from eagle3kit.plan.disk import data_token_stats, disk_plan

from conftest import TINY_DATA_VOCAB

TOLERANCE = 0.01
ARROW_SCHEMA = 2048  # bytes of Arrow schema and HF metadata the prediction leaves out


def written(data_dir: Path) -> dict[str, int]:
    """Bytes on disk, by the parts the prediction names, and everything else (metadata)."""
    def size(paths) -> int:
        return sum(p.stat().st_size for p in paths if p.is_file())
    parts = {"hidden_states": size((data_dir / "hidden_states").iterdir()),
             "arrow": size(data_dir.glob("data-*.arrow")),
             "vocab_mapping": size([*data_dir.glob("d2t-*.npy"), *data_dir.glob("t2d-*.npy")])}
    parts["all"] = size(p for p in data_dir.rglob("*"))
    return parts


def predicted(data_dir: Path, width: int, draft_vocab_size: int | None):
    m = DataDir(data_dir).require_manifest()
    return disk_plan(data_token_stats(data_dir), m.verifier.hidden_size, len(m.aux_layer_ids) + 1, width,
                     m.verifier.vocab_size, draft_vocab_size)


def check(data_dir: Path, width: int, draft_vocab_size: int | None) -> None:
    got, plan = written(data_dir), predicted(data_dir, width, draft_vocab_size)
    assert plan.hidden_states == pytest.approx(got["hidden_states"], rel=TOLERANCE)
    assert 0 <= got["arrow"] - plan.arrow <= ARROW_SCHEMA  # the columns exactly, + the schema
    assert plan.vocab_mapping == got["vocab_mapping"]
    assert plan.total == pytest.approx(got["all"], rel=TOLERANCE)  # metadata files are the rest


def test_disk_equals_what_tiny_data_wrote(tiny_data):
    check(Path(tiny_data), width=4, draft_vocab_size=TINY_DATA_VOCAB)  # the fixture stores float32


def test_disk_check_can_fail(tiny_data):
    """The same comparison with the wrong width (bf16 for float32 files) misses by far: the check is not vacuous."""
    got, plan = written(Path(tiny_data)), predicted(Path(tiny_data), 2, TINY_DATA_VOCAB)
    assert plan.hidden_states < 0.6 * got["hidden_states"]


@pytest.mark.slow
@pytest.mark.parametrize("dtype,width", [("bfloat16", 2), ("float32", 4)])
def test_disk_equals_what_smollm2_data_wrote(smollm2, tmp_path, dtype, width):
    out = tmp_path / "data"
    build_dataset(smollm2, out, n_conversations=3, seq_length=128, held_out=1, dtype=dtype, progress=False)
    check(out, width=width, draft_vocab_size=None)
