"""Catalogue rows the doctor's new checks catch: the uncompiled BlockMask at long context on CPU, speculators' trainer
on a machine without an accelerator, and vLLM's hidden-state extraction on CPU (docs/failures.md). The seed's other
rows are tests in tests/test_doctor.py."""

from __future__ import annotations

import copy

import pytest
import torch
from speculators.models.eagle3 import Eagle3DraftModel

from eagle3kit.cli import main
from eagle3kit.doctor.catalogue.rows import CatalogueError, catalogue_row, demonstrate
from eagle3kit.doctor.checks.run import check, trainer_findings
from eagle3kit.doctor.checks.facts import attention_facts
from eagle3kit.doctor.checks.model import hidden_state_extraction_findings
from eagle3kit.draft.config import build_config, resolve_aux_layer_ids

from conftest import TINY_DATA_SEQ

NO_ACCELERATOR = pytest.mark.skipif(torch.accelerator.is_available(),
                                    reason="shows what happens without an accelerator")


@pytest.fixture(scope="module")
def build():
    return build_config(verifier="tiny", device="cpu")


def _found(findings, check_name):
    return [(f.severity, f.what) for f in findings if f.check == check_name]


@pytest.mark.catalogue("blockmask-cpu-memory")
def test_a_long_blockmask_on_cpu_is_a_warning(build):
    config = copy.deepcopy(build.config)
    config.transformer_layer_config._attn_implementation = "simple_flex_attention"
    model = Eagle3DraftModel(copy.deepcopy(config))  # the real draft: it builds its mask with create_block_mask
    assert attention_facts(model)["mask"] == "BlockMask"
    long = check(model, device="cpu", training=False, loss="eager", seq_len=32768)
    [found] = [f for f in long if f.check == "blockmask_memory"]
    assert found.severity == "warning" and "32768" in found.what and "sdpa" in found.fix
    for subject, seq_len in ((model, 8192), (build.config, 32768)):  # speculators' default length; sdpa's dense mask
        assert not _found(check(subject, device="cpu", training=False, loss="eager", seq_len=seq_len),
                          "blockmask_memory")


@pytest.mark.catalogue("trainer-needs-accelerator")
@NO_ACCELERATOR
def test_speculators_trainer_without_an_accelerator_is_an_error(tiny_data, tmp_path, capsys, monkeypatch):
    import speculators.train.distributed as dist

    for name in ("_local_rank", "_is_distributed"):  # restored after the test: the failed setup sets them
        monkeypatch.setattr(dist, name, getattr(dist, name))
    monkeypatch.setenv("LOCAL_RANK", "0")  # as torchrun sets it
    with pytest.raises((RuntimeError, ValueError), match="No accelerator|NVIDIA driver"):
        dist.maybe_setup_distributed()  # what `speculators train` does first
    assert [s for s, _ in _found(trainer_findings(), "trainer")] == ["warning"]
    assert trainer_findings(dry_run=True) == []  # its --dry-run runs on CPU
    assert main(["launch", "--data", str(tiny_data), "--out", str(tmp_path), "--total-seq-len",
                 str(TINY_DATA_SEQ)]) == 0
    assert "[WARNING] speculators train needs a GPU" in capsys.readouterr().out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="skipped: no CUDA")
def test_speculators_trainer_with_a_gpu_is_silent():
    assert trainer_findings() == []


@pytest.mark.catalogue("vllm-cpu-hidden-state-connector")
def test_vllm_hidden_state_extraction_on_cpu_is_an_error(build):
    n_layers = build.verifier.text_config.num_hidden_layers
    extraction = {"method": "extract_hidden_states", "num_speculative_tokens": 1,  # speculators' pipeline asks this
                  "draft_model_config": {"hf_config": {
                      "eagle_aux_hidden_state_layer_ids": [*resolve_aux_layer_ids(build.verifier), n_layers]}}}
    assert [s for s, _ in _found(hidden_state_extraction_findings(extraction, "cpu"),
                                 "hidden_state_extraction")] == ["error"]
    assert hidden_state_extraction_findings(extraction, "cuda") == []
    serve = {"method": "eagle3", "model": "draft", "num_speculative_tokens": 3}  # as eagle3kit's serve_command
    assert hidden_state_extraction_findings(serve, "cpu") == []  # serving a draft on vLLM CPU is fine


def test_a_row_demonstrated_live_names_the_doctors_finding_and_the_caught_failure(build):
    unloaded = Eagle3DraftModel(copy.deepcopy(build.config))  # load_verifier_weights() forgotten
    assert catalogue_row("verifier-weights-nan").check == "weights"

    def fails():
        raise RuntimeError("block_mask was created for a larger length\nsecond line")

    text = demonstrate("verifier-weights-nan", check(unloaded, device="cpu", loss="eager"), fails)
    assert "[ERROR] embed_tokens.weight is NaN: verifier weights never loaded" in text
    assert "running it fails: RuntimeError: block_mask was created for a larger length" in text
    assert "second line" not in text and "[WARNING]" not in text  # only the row's check (not serving)
    unloaded.load_verifier_weights()
    healthy = demonstrate("verifier-weights-nan", check(unloaded, device="cpu", loss="eager"), lambda: "ran")
    assert "no weights finding" in healthy and "running it: ran" in healthy
    with pytest.raises(CatalogueError, match="not a row"):
        catalogue_row("no-such-row")
