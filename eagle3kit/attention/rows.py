"""The rows each TTT step must compute, and the keys earlier steps left, for :mod:`.block_sparse`.

In speculators' EAGLE-3 mask a query at TTT step ``t >= 1`` attends to the keys of step 0 (its document, causally)
and to its own row's keys of steps 1..t (the diagonal), never to another row's later keys. So past step 0 the rows
are independent, and a row whose draft chain reaches no loss at step ``t`` or later need not be computed at ``t``:
:class:`DraftRows` holds, per step, the rows that are, and the keys and values each layer made at each step (no
transformers cache: the layers are called without one). The attention call then lays the computed rows out at their
positions among all ``n`` (the rest are zeros, whose outputs are dropped) and takes the computed rows' outputs back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftRows:
    """``rows[t]``: the sorted positions TTT step ``t`` computes (``rows[0]`` all ``n``; each a subset of the one
    before); ``step``: the step now running; ``keys[layer][t]``: (key, value) that layer made at step ``t``."""

    n: int
    rows: list[torch.Tensor]
    step: int = 0
    keys: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = field(default_factory=dict)
    # step 0 of the last layer: the rows outside ``rows[0]`` give only keys and values (rows, key, value)
    keys_only: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def full(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Keep this step's (key, value) of ``layer``; return query, keys and values laid out at all ``n`` positions:
        query [1, H, n, D], keys [1, Hkv, (t+1)n, D] (step 0's, then each step's)."""
        made = self.keys.setdefault(layer, [])
        del made[self.step:]
        if self.step == 0 and self.keys_only is not None:
            rows, k_only, v_only = self.keys_only
            key = self._spread(key, 0).index_copy(2, rows, k_only)
            value = self._spread(value, 0).index_copy(2, rows, v_only)
            made.append((key, value))
            return self._spread(query, 0), key, value
        made.append((key, value) if self.step else (self._spread(key, 0), self._spread(value, 0)))
        keys = [made[0][0]] + [self._spread(k, t) for t, (k, _) in enumerate(made) if t]
        values = [made[0][1]] + [self._spread(v, t) for t, (_, v) in enumerate(made) if t]
        return self._spread(query, self.step), torch.cat(keys, 2), torch.cat(values, 2)

    def computed(self, out: torch.Tensor) -> torch.Tensor:
        """The rows of ``out`` ([1, n, H, D]) this step computes."""
        rows = self.rows[self.step]
        return out if rows.shape[0] == self.n else out.index_select(1, rows)

    def _spread(self, x: torch.Tensor, step: int) -> torch.Tensor:
        """[1, heads, rows[step], D] -> [1, heads, n, D], zeros where step ``step`` computed no row."""
        rows = self.rows[step]
        if rows.shape[0] == self.n and x.shape[2] == self.n:
            return x
        return x.new_zeros((*x.shape[:2], self.n, x.shape[3])).index_copy(2, rows, x)


def rows_to_compute(loss_mask: torch.Tensor, ttt_steps: int) -> list[torch.Tensor]:
    """Per TTT step, the draft rows whose chain reaches a loss at that step or later: row ``i`` carries loss at step
    ``s`` when target row ``i + s`` does, and counts for the conditional accuracy while it is still correct, which
    it can only be where row ``i`` itself carries loss (speculators starts ``prev_correct`` from the loss mask). At
    step 0 every row also gives keys to the rows after it; the rows outside ``[0]`` give only that."""
    n = loss_mask.shape[0]
    reach = torch.zeros(n, dtype=torch.bool, device=loss_mask.device)
    rows = []
    for step in reversed(range(ttt_steps)):
        at = loss_mask.clone()
        at[: n - step] |= loss_mask[step:]
        at[n - step:] = False
        reach |= at
        rows.append(torch.nonzero(reach).squeeze(1))
    return rows[::-1]
