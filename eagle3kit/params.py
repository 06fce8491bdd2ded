"""A notebook's ``parameters`` cell as papermill reads it, the check of the values a run would pass it, and the one
parameters cell an executed notebook keeps (:func:`fold_injected`).

Each parameter's type is the one papermill infers (an annotated parameter), else its default's (``ttt_steps = 3``:
an integer); a parameter whose default is ``None`` takes its rule's type. Its range is the library's own rule for a
value of that name (:mod:`eagle3kit.validate`). Notebook parameters are strings and numbers, so ``0`` stands for
``None`` where the rule allows ``None`` and starts above zero (``draft_vocab_size = 0``: the verifier's whole vocab).
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle3kit import validate
from eagle3kit.errors import UserError

TYPES = {"int": int, "float": float, "str": str, "bool": bool}


class ParameterError(UserError):
    """A value the run would pass a notebook that its parameters cell or the library's rule does not allow."""


@dataclass(frozen=True)
class Parameter:
    """One parameter of a notebook's ``parameters`` cell: its name, type (None: any) and default."""

    name: str
    kind: type | None
    default: Any

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` for this parameter (``"use an integer >= 1 ..."``), or None."""
        rule = validate.rule_for(self.name)
        if rule is not None and value == 0 and rule.none and (rule.minimum or 0) > 0 and self.kind is int:
            value = None  # the notebooks' spelling of None
        if rule is not None and (self.kind is None or rule.kind is self.kind or {rule.kind, self.kind} == {int, float}):
            return None if rule.fits(value) else f"use {rule.allowed()}"
        if value is None:
            return None if self.default is None else f"use {validate.TYPE_NAMES[self.kind]}"
        if self.kind is None or validate.Rule(self.kind).fits(value):
            return None
        return f"use {validate.TYPE_NAMES[self.kind]} (its default is {self.default!r})"


def _default(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parameters(path: str | os.PathLike) -> dict[str, Parameter]:
    """The parameters the notebook at ``path`` declares, by name, with their types (see the module docstring)."""
    import papermill  # not at the top: every notebook imports this module (through eagle3kit.runner's record_summary)

    found = {}
    for name, info in papermill.inspect_notebook(str(path)).items():
        default = _default(info["default"])
        kind = TYPES.get(info.get("inferred_type_name") or "") or (type(default) if default is not None else None)
        if kind is None and (rule := validate.rule_for(name)) is not None:
            kind = rule.kind
        found[name] = Parameter(name, kind if kind in TYPES.values() else None, default)
    return found


def check_values(path: str | os.PathLike, values: dict[str, Any], sources: dict[str, str] | None = None) -> None:
    """Refuse the first value of ``values`` (the names the notebook declares) that its parameter does not allow,
    naming the notebook, the parameter, the value, where it came from (``sources[name]``) and what is allowed."""
    declared = parameters(path)
    for name, value in values.items():
        if name in declared and (why := declared[name].problem(value)):
            origin = f" (from {sources[name]})" if sources and name in sources else ""
            raise ParameterError(f"{Path(path).name}: parameter {name}={value!r}{origin} is not allowed: {why}.")


AS_RUN = "parameters-as-run"  # the tag of an executed notebook's parameters cell once papermill's values are in it


def fold_injected(path: str | os.PathLike, preset: str) -> bool:
    """Write papermill's injected values into the executed notebook's ``parameters`` cell and drop the injected cell,
    so a reader sees one cell holding the values that ran (each default's comment kept). False when there is
    nothing to fold."""
    target = Path(path)
    nb = json.loads(target.read_text())
    tags = [c.get("metadata", {}).get("tags", []) for c in nb["cells"]]
    cell = next((c for c, t in zip(nb["cells"], tags, strict=True) if "parameters" in t), None)
    injected = next((c for c, t in zip(nb["cells"], tags, strict=True) if "injected-parameters" in t), None)
    if cell is None or injected is None:
        return False
    values = {node.targets[0].id: ast.get_source_segment(src, node.value)
              for src in ["".join(injected["source"])] for node in ast.parse(src).body
              if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    cell["source"] = _with_values("".join(cell["source"]), values, preset).splitlines(keepends=True)
    cell["metadata"]["tags"] = [*cell["metadata"].get("tags", []), AS_RUN]
    nb["cells"].remove(injected)
    target.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return True


def _with_values(source: str, values: dict[str, str], preset: str) -> str:
    """``source`` (a parameters cell) with each assignment's value replaced by ``values[name]``, its comment kept in
    its column where it fits; names it does not assign are added at the end; its head comment says what ran."""
    lines = source.splitlines()
    done = set()
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        name = getattr(target, "id", None)
        if name in values and node.lineno == node.end_lineno:
            line = lines[node.lineno - 1]
            code, comment = line[:node.value.end_col_offset], line[node.value.end_col_offset:]
            code = code[:node.value.col_offset] + values[name]
            lines[node.lineno - 1] = code + (comment.strip() and " " * max(2, len(line) - len(comment.lstrip())
                                                                         - len(code)) + comment.strip())
            done.add(name)
    head = [f"# The values this run used: the `{preset}` preset (`eagle3kit run-notebooks --preset {preset}`) over the"
            " notebook's defaults."]
    first_code = next((i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")), len(lines))
    return "\n".join([*head, *lines[first_code:], *(f"{k} = {v}" for k, v in values.items() if k not in done)])
