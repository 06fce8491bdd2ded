"""A data directory as one object: :class:`DataDir` reads ``eagle3kit_data.json`` once and owns its format, the
names of the files inside, the verifier identity, the compatibility check and the folder a build resumes in.

Two kinds open under one rule (docs/handoff.md): one ``eagle3kit data`` made (``has_manifest``: the
:class:`~eagle3kit.data.manifest.Manifest` answers), and one speculators' own pipeline made (``prepare-data``, then
``generate-offline-data`` or ``eagle3kit data --out DIR``), without a manifest. There, what the files tell is read
from them (``hidden_size``, ``n_states`` and ``dtype`` from the first hidden-state file, ``n_samples`` and
``complete`` from the Arrow dataset, ``draft_vocab_sizes`` from the ``t2d`` files); what only the user knows is told
(``DataDir.open(path, verifier=..., aux_layer_ids=...)``, ``--verifier`` / ``--aux-layer-ids``, or the draft's
config) and read back as ``verifier_ref`` / ``aux_layer_ids``; ``require_verifier`` / ``require_aux_layer_ids``
refuse in one sentence naming the option when it was not. ``seq_length`` and ``request`` stay None.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
from speculators.data_generation.offline import get_existing_hidden_state_indices

from eagle3kit.data import hidden_states as hs
from eagle3kit.data.manifest import MANIFEST, Manifest, Request, VerifierIdentity, load_manifest, verifier_identity
from eagle3kit.errors import UserError
from eagle3kit.verifier import Verifier, resolve

SAFETENSORS_DTYPES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}
NO_MANIFEST = f"has no {MANIFEST} (speculators' pipeline made it?)"


class DataError(UserError):
    """A data directory that cannot be used as asked, with the fix in the message."""


class DataDir:
    """A data directory, its manifest read once. ``DataDir.open(path)``; ``str()`` / ``os.fspath()`` give its path,
    so it goes wherever a path does. See the module doc for a directory without an eagle3kit manifest.

    The names of the files inside are stated here, once; readers ask for them (a path) rather than spell them."""

    ARROW = ("data-*.arrow", "dataset_info.json", "state.json")  # speculators' Arrow dataset (``save_to_disk``)
    HIDDEN_STATES = "hidden_states"  # the folder of hs_{i}.safetensors (speculators' ArrowDataset reads this name)
    TOKEN_FREQ = "token_freq.pt"  # {token id: count} over the supervised tokens (speculators' counter)
    D2T, T2D = "d2t-{n}.npy", "t2d-{n}.npy"  # the draft vocab mapping of size n (speculators' names)
    HELD_OUT = "held_out.jsonl"  # conversations kept out of training (eagle3kit's)
    WRITTEN = (*ARROW, TOKEN_FREQ, D2T.format(n="*"), T2D.format(n="*"), HELD_OUT, MANIFEST, ".*.tmp*", HIDDEN_STATES)
    """Every entry ``eagle3kit data`` writes (as glob patterns), temporary files included."""

    def __init__(self, path: str | os.PathLike, verifier: Verifier | str | os.PathLike | None = None,
                 aux_layer_ids: list[int] | None = None):
        self.path = Path(path)
        self.manifest: Manifest | None = load_manifest(self.path)
        self._told: dict = {}
        self._shape: tuple | None = None
        self.tell(verifier, aux_layer_ids)

    @classmethod
    def open(cls, data: DataDir | str | os.PathLike, verifier: Verifier | str | os.PathLike | None = None,
             aux_layer_ids: list[int] | None = None) -> DataDir:
        """``data`` itself when it is a :class:`DataDir`, else the directory at that path (manifest read now); what
        is given is told (:meth:`tell`)."""
        data = data if isinstance(data, DataDir) else cls(data)
        return data.tell(verifier, aux_layer_ids)

    def tell(self, verifier: Verifier | str | os.PathLike | None = None,
             aux_layer_ids: list[int] | None = None) -> DataDir:
        """Record what a directory without a manifest cannot say: the verifier that made its hidden states and the
        aux layer ids they hold (checked against the files first, :meth:`check_compatible`). Ignored for a directory
        with a manifest (it knows them; :meth:`check_compatible` compares). Returns self."""
        return self if self.manifest else self.for_draft(verifier, aux_layer_ids)

    def for_draft(self, verifier: Verifier | str | os.PathLike | None, aux_layer_ids: list[int] | None) -> DataDir:
        """The directory checked, once, for a draft of ``verifier`` reading ``aux_layer_ids``: refused as
        :meth:`check_compatible` refuses; a directory without a manifest also keeps them as told. Returns self."""
        self.check_compatible(verifier, aux_layer_ids)
        if self.manifest is None:
            if verifier is not None:
                self._told["verifier"] = ((verifier.path or verifier.name) if isinstance(verifier, Verifier)
                                          else str(verifier))
            if aux_layer_ids is not None:
                self._told["aux_layer_ids"] = list(aux_layer_ids)
        return self

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"DataDir({str(self.path)!r}, has_manifest={self.has_manifest})"

    # ------------------------------------------------------------------------------------------- paths
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def hidden_states_dir(self) -> Path:
        return self.path / self.HIDDEN_STATES

    @property
    def token_freq_path(self) -> Path:
        return self.path / self.TOKEN_FREQ

    @property
    def held_out_path(self) -> Path:
        return self.path / self.HELD_OUT

    def mapping_paths(self, draft_vocab_size: int) -> tuple[Path, Path]:
        """``(d2t-{N}.npy, t2d-{N}.npy)`` for draft vocab size N."""
        return self.path / self.D2T.format(n=draft_vocab_size), self.path / self.T2D.format(n=draft_vocab_size)

    def hidden_state_file(self, index: int) -> Path:
        """``hidden_states/hs_{index}.safetensors`` (speculators' name for dataset row ``index``)."""
        return hs.hs_path(self.hidden_states_dir, index)

    def hidden_state_files(self) -> list[Path]:
        """The ``hs_*.safetensors`` files present, by row index (speculators' own listing)."""
        return [self.hidden_state_file(i) for i in get_existing_hidden_state_indices(self.hidden_states_dir)]

    @property
    def has_arrow(self) -> bool:
        """True when the Arrow dataset (``save_to_disk``: state.json, dataset_info.json, data-*.arrow) is there."""
        return all(any(self.path.glob(pattern)) for pattern in self.ARROW)

    # ------------------------------------------------------------------------------------------- manifest facts
    @property
    def has_manifest(self) -> bool:
        """False for a directory made without eagle3kit (e.g. by speculators' own pipeline) or not made yet."""
        return self.manifest is not None

    def require_manifest(self) -> Manifest:
        if self.manifest is None:
            raise DataError(f"{self.path} has no {MANIFEST}; make the data with `eagle3kit data --out DIR`.")
        return self.manifest

    @property
    def verifier(self) -> VerifierIdentity | None:
        return self.manifest.verifier if self.manifest else None

    @property
    def verifier_ref(self) -> str | None:
        """The verifier the directory was made with (its path, else its name): the manifest's, else the one told."""
        return self.manifest.verifier.ref if self.manifest else self._told.get("verifier")

    @property
    def aux_layer_ids(self) -> list[int] | None:
        """The verifier layers the stored aux states are: the manifest's, else the ones told (else None)."""
        return list(self.manifest.aux_layer_ids) if self.manifest else self._told.get("aux_layer_ids")

    def require_verifier(self, flag: str = "--verifier NAME_OR_DIR") -> str:
        """:attr:`verifier_ref`, or a :class:`DataError` saying to pass it (``flag``: the option that passes it)."""
        if self.verifier_ref is None:
            raise DataError(f"{self.path} {NO_MANIFEST}, so the verifier its hidden states came from is unknown; "
                            f"pass {flag} (the model that made them).")
        return self.verifier_ref

    def require_aux_layer_ids(self, flag: str = "--aux-layer-ids") -> list[int]:
        """:attr:`aux_layer_ids`, or a :class:`DataError` saying to pass them (``flag``: the option that does)."""
        if self.aux_layer_ids is None:
            n = (self.n_states or 1) - 1
            raise DataError(f"{self.path} {NO_MANIFEST}, so which verifier layers its {n} aux hidden states are is "
                            f"unknown; pass {flag} with the {n} ids they were extracted from (vLLM's "
                            "eagle_aux_hidden_state_layer_ids without the last layer; `eagle3kit doctor --data DIR "
                            "--verifier V` measures them).")
        return self.aux_layer_ids

    @property
    def request(self) -> Request | None:
        return self.manifest.request if self.manifest else None

    @property
    def seq_length(self) -> int | None:
        return self.manifest.request.seq_length if self.manifest else None

    @property
    def dtype(self) -> str | None:
        """The dtype the verifier ran and stored the hidden states in: the manifest's, else the first file's."""
        if self.manifest:
            return self.manifest.request.dtype
        shape = self._first_file_shape()
        return SAFETENSORS_DTYPES.get(shape[1]) if shape else None

    @property
    def n_samples(self) -> int | None:
        """Training rows: the manifest's count, else the Arrow dataset's rows (None without one)."""
        if self.manifest:
            return self.manifest.counts.get("n_samples")
        if not self.has_arrow:
            return None
        from datasets import load_from_disk

        return load_from_disk(str(self.path)).num_rows

    @property
    def complete(self) -> bool | None:
        """True once every hidden-state file was written: the manifest's word, else every row has a file."""
        if self.manifest:
            return self.manifest.complete
        n = self.n_samples
        if n is None:
            return None
        return set(range(n)) <= set(get_existing_hidden_state_indices(self.hidden_states_dir))

    @property
    def draft_vocab_sizes(self) -> list[int]:
        """Draft vocab sizes with a mapping: the manifest's, else the ``t2d-{N}.npy`` files present."""
        if self.manifest:
            return sorted(self.manifest.vocab)
        head, tail = self.T2D.split("{n}")
        sizes = (p.name.removeprefix(head).removesuffix(tail) for p in self.path.glob(self.T2D.format(n="*")))
        return sorted(int(n) for n in sizes if n.isdigit())

    @property
    def draft_vocab_size(self) -> int | None:
        """The draft vocab size the directory has a mapping for, when it has exactly one (else None)."""
        sizes = self.draft_vocab_sizes
        return sizes[0] if len(sizes) == 1 else None

    # ------------------------------------------------------------------------------------------- file facts
    def _first_file_shape(self) -> tuple[tuple[int, ...], str] | None:
        """(shape, safetensors dtype) of the first readable file's ``hidden_states`` (read once)."""
        if self._shape is None:
            self._shape = hs.first_shape(self.hidden_state_files())
        return self._shape

    @property
    def hidden_size(self) -> int | None:
        """The verifier's hidden size: the manifest's, else the first readable hidden-state file's last dim."""
        if self.manifest:
            return self.manifest.verifier.hidden_size
        shape = self._first_file_shape()
        return shape[0][-1] if shape else None

    @property
    def n_states(self) -> int | None:
        """States stored per token (aux layers + the last): from the manifest, else the first readable file."""
        if self.manifest:
            return len(self.manifest.aux_layer_ids) + 1
        shape = self._first_file_shape()
        return shape[0][1] if shape and len(shape[0]) == 3 else None

    # ------------------------------------------------------------------------------------------- checks
    def check_compatible(self, verifier: Verifier | str | os.PathLike | None = None,
                         aux_layer_ids: list[int] | None = None) -> DataDir:
        """Refuse a directory made with another verifier (fingerprinted once here) or other aux layers; self. Without
        a manifest, what the files tell is compared: hidden size, states per token, the mappings' vocab."""
        if self.manifest is None:
            return self._check_files(verifier, aux_layer_ids)
        m = self.manifest
        if verifier is not None:
            mine, theirs = verifier_identity(resolve(verifier)), m.verifier
            if mine.fingerprint != theirs.fingerprint:
                raise DataError(
                    f"{self.path} was made with verifier {theirs.name!r} ({theirs.path}), not {mine.name!r} "
                    f"({mine.path}); its hidden states do not fit this verifier. Use verifier={theirs.name!r} "
                    "or build a new data directory."
                )
        if aux_layer_ids is not None and list(aux_layer_ids) != m.aux_layer_ids:
            raise DataError(
                f"{self.path} holds hidden states of aux layers {m.aux_layer_ids}, but {list(aux_layer_ids)} were "
                f"asked for; build the draft with aux_layer_ids={m.aux_layer_ids} or build a new data directory."
            )
        return self

    def _check_files(self, verifier, aux_layer_ids) -> DataDir:
        """:meth:`check_compatible` for a directory without a manifest: the files against what was told or given."""
        told_v, told_aux = self._told.get("verifier"), self._told.get("aux_layer_ids")
        if aux_layer_ids is not None and told_aux is not None and list(aux_layer_ids) != told_aux:
            raise DataError(f"{self.path} holds hidden states of aux layers {told_aux} (as told), but "
                            f"{list(aux_layer_ids)} were asked for; build the draft with aux_layer_ids={told_aux}.")
        aux = aux_layer_ids if aux_layer_ids is not None else told_aux
        if aux is not None and self.n_states is not None and len(aux) + 1 != self.n_states:
            raise DataError(f"{self.path} stores {self.n_states} hidden states per token ({self.n_states - 1} aux + "
                            f"the last), so it cannot hold aux layers {list(aux)}; pass {self.n_states - 1} aux "
                            "layer ids (--aux-layer-ids).")
        if verifier is None and told_v is None:
            return self
        v = resolve(verifier if verifier is not None else told_v)
        if told_v is not None and verifier is not None and resolve(told_v).path != v.path:
            raise DataError(f"{self.path} was told it was made with verifier {told_v}, not {v.path or v.name}; "
                            "use one verifier for the data and the draft.")
        text = v.text_config
        if self.hidden_size is not None and self.hidden_size != text.hidden_size:
            raise DataError(f"{self.path}'s hidden states are {self.hidden_size} wide, verifier {v.name!r}'s "
                            f"{text.hidden_size}; pass the verifier that made them (--verifier).")
        wrong = [n for n in self.draft_vocab_sizes if self._t2d_length(n) not in (None, text.vocab_size)]
        if wrong:
            raise DataError(f"{self.mapping_paths(wrong[0])[1]} maps a vocabulary of {self._t2d_length(wrong[0])} "
                            f"tokens, verifier {v.name!r} has {text.vocab_size}; pass the verifier that made the data.")
        return self

    def _t2d_length(self, n: int) -> int | None:
        import numpy as np

        path = self.mapping_paths(n)[1]
        return int(np.load(path, mmap_mode="r").shape[0]) if path.exists() else None

    # ------------------------------------------------------------------------------------------- building here
    @property
    def prepared_elsewhere(self) -> bool:
        """An Arrow dataset without an eagle3kit manifest or held-out file: what ``speculators prepare-data`` writes
        (an interrupted ``eagle3kit data`` has written ``held_out.jsonl`` first)."""
        return self.has_arrow and not self.has_manifest and not self.held_out_path.exists()

    def clear(self) -> None:
        """Delete everything ``eagle3kit data`` writes here (:attr:`WRITTEN`); the manifest is gone with it."""
        for pattern in self.WRITTEN:
            for p in self.path.glob(pattern):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        self.manifest = None

    def prepare_build(self, request: Request, verifier: Verifier, aux_layer_ids: list[int],
                      overwrite: bool = False) -> Manifest | None:
        """The folder made ready for ``eagle3kit data`` with ``request``: its manifest when it was made with the same
        verifier, aux layers and request (the build resumes), else None, the folder empty (``overwrite``, or a first
        build interrupted before its manifest). Refuses a folder made with other settings, or holding other files."""
        if self.manifest is not None and overwrite:
            self.clear()
        if self.manifest is not None:
            self.check_compatible(verifier, aux_layer_ids)
            if changed := self.manifest.request.changes(request):
                raise DataError(f"{self.path} was made with other settings ({changed}); pass --overwrite "
                                "(overwrite=True) to rebuild it, or choose another --out.")
            return self.manifest
        if self.path.exists():
            ours = all(any(p.match(pattern) for pattern in self.WRITTEN) for p in self.path.iterdir())
            if not ours or self.prepared_elsewhere:
                raise DataError(f"{self.path} is not empty and has no {MANIFEST}; choose an empty or new out_dir (a "
                                "dataset `speculators prepare-data` wrote is filled by `eagle3kit data --out DIR "
                                "--verifier V`).")
            self.clear()  # a first build interrupted before its manifest: start again
        return None

    def files_table(self) -> pd.DataFrame:
        """What the directory holds: one row per top-level entry (a folder's name ends in ``/``), with its size in
        MB and how many files it is."""
        rows = []
        for p in sorted(self.path.iterdir()):
            files = [f for f in p.rglob("*") if f.is_file()] if p.is_dir() else [p]
            rows.append({"name": p.name + "/" * p.is_dir(),
                         "MB": round(sum(f.stat().st_size for f in files) / 1e6, 2), "files": len(files)})
        return pd.DataFrame(rows, columns=["name", "MB", "files"])


def as_data_dir(data: DataDir | str | os.PathLike) -> DataDir:
    """``data`` as a :class:`DataDir`: one already opened is handed on as it is, a path is opened (once a trip)."""
    return data if isinstance(data, DataDir) else DataDir.open(data)
