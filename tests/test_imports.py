"""The package's import graph, read with ``ast`` (imports inside functions count: a lazy import is still an arrow).

The layering, lowest first; a module may import its own layer and the layers below it, never one above:

1. shared: ``errors``, ``atomic``, ``logs``, ``device``, ``figures``, ``tables``, ``assets``, ``validate``,
   ``outputs``, ``params``, ``processes``, ``vllm_env``, ``progress`` (and ``eagle3kit`` itself) -- no stage
   knowledge, used by all.
2. ``verifier``: the model every stage measures against (it finds its GGUF through ``assets``); ``attention``: the
   block-sparse training attention registered with speculators (torch and speculators only).
3. ``draft``: the draft config and model, from a verifier; knows nothing of data directories.
4. ``masks``: speculators' attention masks for a draft (``ttt_steps``, the block-size rule).
5. ``data``: conversations, hidden states and vocab mappings on disk; builds drafts for a data directory, draws
   packed batches with the masks' views.
6. ``evaluate``: τ, decoding and export of a draft on prompts from data (``evaluate.vllm``: vLLM by subprocess).
6b. ``plan``: the GPU run's cost from the verifier and draft shapes (and a data directory's token counts);
   ``train.launch`` checks a run fits with it.
7. ``train``: the session and loop over data; the overfit check decodes with ``evaluate``.
8. ``doctor``: checks any of the above (draft configs, masks, data directories, exports for vLLM).
9. ``presets``, ``runner``, ``notebook``, ``course``, ``next_run``, ``gpu_steps``: the notebooks' settings (train's
   settings), running them, what every notebook shares (its first cell's setup, the workdir's data), notebook 06's
   conclusion, the next run it proposes and the GPU hand-off it closes with.
10. ``cli``: the commands, over everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eagle3kit"

LAYERS: list[set[str]] = [
    {"eagle3kit", "errors", "atomic", "logs", "device", "figures", "tables", "assets", "validate", "outputs", "params",
     "processes", "vllm_env", "progress"},
    {"verifier", "attention"},
    {"draft"},
    {"masks"},
    {"data"},
    {"evaluate"},
    {"plan"},
    {"train"},
    {"doctor"},
    {"presets", "runner", "notebook", "course", "next_run", "gpu_steps"},
    {"cli"},
]


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted module name -> file, for every module and package of ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The eagle3kit modules that module ``name`` imports anywhere in its file (top level or inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from pkg import module` imports the module, else the name's module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def layer_of(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else parts[0]
    for i, layer in enumerate(LAYERS):
        if key in layer:
            return i
    raise AssertionError(f"{module} is in no layer: add {key!r} to LAYERS (and to this file's docstring)")


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each a list of names."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycles():
    edges = graph()
    assert sum(map(len, edges.values())) > 100  # the graph was read (not an empty walk)
    assert cycles(edges) == []


def test_no_module_imports_a_layer_above_its_own():
    edges = graph()
    upward = [f"{a} -> {b}" for a, targets in sorted(edges.items()) for b in sorted(targets)
              if layer_of(b) > layer_of(a)]
    assert upward == []
    print(f"layers (lowest first): {[sorted(layer) for layer in LAYERS]}; {sum(map(len, edges.values()))} edges")


def test_the_checks_fire_on_a_cycle_and_an_upward_import(tmp_path):
    root = tmp_path / "eagle3kit"
    (root / "draft").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "__init__.py").write_text("")
    (root / "draft" / "__init__.py").write_text("")
    (root / "data" / "__init__.py").write_text("")
    (root / "draft" / "model.py").write_text("def f():\n    from eagle3kit.data.vocab import load\n")
    (root / "data" / "vocab.py").write_text("from eagle3kit.draft import model\n")
    known = modules(root)
    edges = {name: imported(name, path, known) for name, path in known.items()}
    assert edges["eagle3kit.draft.model"] == {"eagle3kit.data.vocab"}  # the lazy import counts
    assert cycles(edges) == [["eagle3kit.data.vocab", "eagle3kit.draft.model"]]
    assert layer_of("eagle3kit.draft.model") < layer_of("eagle3kit.data.vocab")  # so that arrow points up


@pytest.mark.parametrize("name", ["evaluate.vllm.worker", "data.regenerate_worker"])
def test_the_vllm_workers_run_without_eagle3kit(name):
    """The standalone scripts run under the vLLM environment's python, where eagle3kit is not installed."""
    worker = PACKAGE.joinpath(*name.split(".")).with_suffix(".py")
    assert imported(f"eagle3kit.{name}", worker, modules()) == set()
    assert not any("eagle3kit" in (getattr(n, "module", None) or "") or
                   any("eagle3kit" in a.name for a in getattr(n, "names", []))
                   for n in ast.walk(ast.parse(worker.read_text())) if isinstance(n, ast.Import | ast.ImportFrom))


def listed(init: Path) -> set[str]:
    """The names a package docstring lists: lines that start with ````name````."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    return {line.split("``")[1] for line in doc.splitlines() if line.startswith("``")}


@pytest.mark.parametrize("init", sorted(PACKAGE.glob("**/__init__.py")), ids=lambda p: p.parent.name)
def test_each_package_docstring_lists_exactly_its_modules(init):
    """Every package's map, the top level's included, names each of its modules and subpackages once."""
    here = {p.stem for p in init.parent.glob("*.py") if p.name != "__init__.py"}
    here |= {p.parent.name for p in init.parent.glob("*/__init__.py")}
    assert listed(init) == here


def bars_from_tqdm(root: Path = PACKAGE) -> list[str]:
    """Modules under ``root`` that import tqdm themselves instead of :mod:`eagle3kit.progress` (whose bars stay off in
    a headless notebook run, where a widget bar would be saved at its first frame)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "progress.py" and path.parent == root:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            if any(n == "tqdm" or n.startswith("tqdm.") for n in names):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_every_bar_comes_from_eagle3kit_progress(tmp_path):
    assert bars_from_tqdm() == []
    (tmp_path / "eagle3kit").mkdir()
    (tmp_path / "eagle3kit" / "progress.py").write_text("from tqdm.auto import tqdm\n")
    (tmp_path / "eagle3kit" / "ok.py").write_text("from eagle3kit.progress import tqdm\n")
    (tmp_path / "eagle3kit" / "bad.py").write_text("import os\nfrom tqdm.auto import tqdm\n")
    assert bars_from_tqdm(tmp_path / "eagle3kit") == ["eagle3kit/bad.py:2"]
