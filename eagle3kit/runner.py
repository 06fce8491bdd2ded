"""Execute ``notebooks/NN_*.ipynb`` in order with papermill, with a named preset, into an output folder.

The notebooks live in the repository, not in the package: the caller names their folder (``notebook_dir``;
``eagle3kit run-notebooks --notebooks DIR``, whose default is ``notebooks/`` of the working directory, the
repository's root where ``make demo`` runs it).
"""

from __future__ import annotations

import difflib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from eagle3kit import params, presets
from eagle3kit.atomic import write_text
from eagle3kit.errors import UserError
from eagle3kit.outputs import check_output
from eagle3kit.params import fold_injected
from eagle3kit.tables import markdown_table

@dataclass
class NotebookResult:
    notebook: str
    status: str  # "ok" | "failed"
    seconds: float
    failing_cell: int | None = None
    error: str | None = None
    summary: dict | None = None


def notebooks(directory: str | os.PathLike, select: list[str] | None = None) -> list[Path]:
    """The numbered notebooks of ``directory`` in order, optionally only those whose number or name is in ``select``."""
    paths = sorted(Path(directory).resolve().glob("[0-9][0-9]_*.ipynb"))
    if select:
        paths = [p for p in paths if p.name[:2] in select or p.stem in select or p.name in select]
    return paths


def declared_parameters(path: str | os.PathLike) -> set[str]:
    """Names declared in the notebook's ``parameters`` cell."""
    import papermill  # not at the top: notebooks import record_summary from here, papermill (nbformat) costs ~1.4 s

    return set(papermill.inspect_notebook(str(path)))


def parse_value(text: str) -> object:
    """A ``--set key=value`` value as the parameters cell would hold it: int, float, bool, None or string."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def parse_overrides(items: list[str]) -> dict[str, object]:
    """``["ttt_steps=4", ...]`` (the ``--set`` options) -> ``{"ttt_steps": 4, ...}``."""
    bad = [item for item in items if "=" not in item]
    if bad:
        raise UserError(f"--set expects KEY=VALUE, got {bad[0]!r}; e.g. eagle3kit run-notebooks --set ttt_steps=4")
    return {key: parse_value(value) for key, value in (item.split("=", 1) for item in items)}


def check_parameters(paths: list[Path], preset: str, overrides: dict) -> None:
    """Refuse, before anything runs, a ``--set`` key that no selected notebook declares, and a preset key that its
    notebook does not declare: a typo would otherwise run silently with the default."""
    declared = {p: declared_parameters(p) for p in paths}
    known = set().union(*declared.values()) | {"workdir"}
    for key in overrides:
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            names = ", ".join(p.name for p in paths)
            hint = f"; did you mean {' or '.join(close)}?" if close else f"; they declare {', '.join(sorted(known))}"
            raise UserError(f"--set {key}=...: no notebook of this run ({names}) declares a parameter {key!r}{hint}")
    for path, names in declared.items():
        own = set(presets.parameters(preset, path.name[:2]))
        unknown = sorted(own - names)
        if unknown:
            close = [m for k in unknown for m in difflib.get_close_matches(k, sorted(names), n=1)]
            raise UserError(f"The preset {preset!r} sets {', '.join(unknown)} for {path.name}, whose parameters "
                            f"cell does not declare it" + (f" (closest: {', '.join(close)})" if close else "")
                            + "; fix eagle3kit/presets.py or the notebook's parameters cell.")


def check_values(paths: list[Path], preset: str, overrides: dict, workdir: Path) -> None:
    """Refuse, before anything runs, a value that a notebook's parameter type or the library's rule for it does not
    allow (:mod:`eagle3kit.params`), naming the notebook, the parameter, the value and where it came from."""
    for path in paths:
        sources = {**dict.fromkeys(presets.parameters(preset, path.name[:2]), f"the preset {preset!r}"),
                   **dict.fromkeys(overrides, "--set")}
        params.check_values(path, notebook_parameters(path, preset, overrides, workdir), sources)


def notebook_parameters(path: Path, preset: str, overrides: dict, workdir: Path) -> dict:
    """What the runner passes to one notebook: the typed defaults, then the preset, then the overrides, restricted
    to the names its parameters cell declares."""
    declared = declared_parameters(path)
    params = {**presets.typed_defaults(), **presets.parameters(preset, path.name[:2]), **overrides,
              "workdir": str(workdir)}
    return {k: v for k, v in params.items() if k in declared}


def _failure(output: Path) -> tuple[int | None, str]:
    """The first cell with an error output in an executed notebook, and its error line."""
    try:
        nb = json.loads(output.read_text())
    except (OSError, ValueError):
        return None, "the executed notebook could not be read"
    code_index = 0
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code" or "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            continue  # numbered as in the source notebook: papermill's injected cell does not count
        code_index += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                return code_index, f"{out.get('ename')}: {out.get('evalue')}"
    return None, "unknown error"


def run_notebooks(
    out_dir: str | os.PathLike,
    notebook_dir: str | os.PathLike,
    preset: str = "ci",
    overrides: dict | None = None,
    select: list[str] | None = None,
    stop_on_failure: bool = True,
    progress: bool = True,
) -> list[NotebookResult]:
    """Run the notebooks of ``notebook_dir`` in order; write executed copies and ``summary.json`` /
    ``summary.md`` into ``out_dir``."""
    presets.parameters(preset, "00")  # fail early on an unknown preset
    out = Path(out_dir).resolve()
    workdir = out / "work"
    paths = notebooks(notebook_dir, select)
    if not paths:
        raise FileNotFoundError(f"No notebooks matched {select or 'NN_*.ipynb'} in "
                                f"{Path(notebook_dir).resolve()}: run from the repository's root, or pass "
                                "--notebooks DIR.")
    check_parameters(paths, preset, overrides or {})
    check_values(paths, preset, overrides or {}, workdir)
    check_output(out, "out_dir")
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[NotebookResult] = []
    for i, path in enumerate(paths, 1):
        target = out / path.name
        params = notebook_parameters(path, preset, overrides or {}, workdir)
        if progress:
            print(f"[{i}/{len(paths)}] {path.name} {params}", flush=True)
        t0 = time.perf_counter()
        try:
            import papermill

            from eagle3kit.progress import headless_env

            with headless_env():  # no frontend draws the kernel's bars: they would be saved at "0%"
                papermill.execute_notebook(
                    str(path), str(target), parameters=params, kernel_name="python3", progress_bar=progress,
                    cwd=str(path.parent),
                )
            result = NotebookResult(path.name, "ok", time.perf_counter() - t0)
        except Exception as exc:  # papermill raises PapermillExecutionError; anything else is reported too
            cell, error = _failure(target) if target.exists() else (None, f"{type(exc).__name__}: {exc}")
            result = NotebookResult(path.name, "failed", time.perf_counter() - t0, cell, error)
        if target.exists():
            fold_injected(target, preset)  # one parameters cell, holding the values that ran
        result.summary = read_summary(workdir, path.name[:2])
        results.append(result)
        if progress:
            print(f"    {result.status} in {result.seconds:.1f}s" + (f" - {result.error}" if result.error else ""))
        _write_summary(out, preset, results)
        if result.status != "ok" and stop_on_failure:
            break
    return results


def read_summary(workdir: str | os.PathLike, number: str) -> dict | None:
    """A notebook may leave ``workdir/summary_NN.json`` with its headline numbers."""
    path = Path(workdir) / f"summary_{number}.json"
    return json.loads(path.read_text()) if path.exists() else None


CLOSING = "closing"  # a notebook's summary key for the lines the run ends with (notebook 06: the speed line)


def summary_table(results: list[NotebookResult]) -> pd.DataFrame:
    rows = [
        {"notebook": r.notebook, "status": r.status, "seconds": round(r.seconds, 1),
         "failing cell": r.failing_cell or "", "error": r.error or "",
         "headline": ", ".join(f"{k}={v}" for k, v in (r.summary or {}).items() if k != CLOSING)}
        for r in results
    ]
    return pd.DataFrame(rows)


def closing_lines(results: list[NotebookResult]) -> list[str]:
    """The lines the notebooks left to end the run's summary with (``record_summary(..., closing=[...])``)."""
    return [line for r in results for line in (r.summary or {}).get(CLOSING, [])]


def _write_summary(out: Path, preset: str, results: list[NotebookResult]) -> None:
    payload = {"preset": preset, "ok": all(r.status == "ok" for r in results),
               "seconds": round(sum(r.seconds for r in results), 1), "notebooks": [asdict(r) for r in results]}
    write_text(out / "summary.json", json.dumps(payload, indent=2))
    closing = "".join(f"\n{line}\n" for line in closing_lines(results))
    write_text(out / "summary.md",
               f"# eagle3kit run ({preset})\n\n{markdown_table(summary_table(results))}\n{closing}")


def record_summary(workdir: str | os.PathLike, notebook: str, **numbers) -> None:
    """Called from a notebook: headline numbers that the run summary shows for notebook ``notebook``."""
    path = Path(workdir) / f"summary_{notebook}.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    write_text(path, json.dumps({**old, **numbers}, indent=2, default=str))
