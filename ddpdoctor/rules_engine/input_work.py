"""Per-rank work from the model's input shapes, in every dimension.

Each rank's usual forward input (the shapes of the first op that takes the batch, ``cross.input_shapes_by_rank``)
is compared across ranks. When exactly one input tensor differs between them and it has the same number of
dimensions on every rank:

- only its first dimension differs: the ranks run different batch sizes (``cross.batch_rows_*``);
- another dimension differs too (a sequence length, an image's height and width): the ranks get the same
  number of samples but not the same amount of work; the tensor's element count per rank says how much
  (``cross.input_work_*``: "[16, 384] against [16, 64], 6.0x the tokens").

The tensor need not be the first input: an embedding takes its weight first and the token ids second.
"""

from __future__ import annotations

import json
import math


def input_work_facts(by_rank: dict[int, str], facts: dict) -> None:
    """Add ``cross.batch_rows_*`` or ``cross.input_work_*`` to ``facts`` when the ranks' usual inputs differ in
    one tensor (see the module's docstring); nothing otherwise."""
    heads = _differing_tensor(by_rank)
    if heads is None:
        return
    if len({tuple(h[1:]) for h in heads.values()}) == 1:
        _batch_rows(heads, facts)
    else:
        _work(heads, facts)


def _differing_tensor(by_rank: dict[int, str]) -> dict[int, list[int]] | None:
    """rank -> the dims of the one input tensor that differs between the ranks (2+ dimensions, as many on
    every rank), or None."""
    parsed = {r: dims for r, x in by_rank.items() if (dims := _dims(x)) is not None}
    if len(parsed) < 2 or len(parsed) < len(by_rank) or len({len(p) for p in parsed.values()}) != 1:
        return None
    lists = list(parsed.values())
    differing = [i for i in range(len(lists[0])) if len({json.dumps(p[i]) for p in lists}) > 1]
    if len(differing) != 1:
        return None
    heads = {r: p[differing[0]] for r, p in sorted(parsed.items())}
    if not all(_is_tensor(h) and len(h) >= 2 for h in heads.values()) or len({len(h) for h in heads.values()}) != 1:
        return None
    return heads


def _batch_rows(heads: dict[int, list[int]], facts: dict) -> None:
    rows = {r: h[0] for r, h in heads.items()}
    largest = max(rows.values())
    facts["cross.batch_rows_by_rank"] = ", ".join(f"rank {r}: {n}" for r, n in rows.items())
    facts["cross.batch_rows_largest"] = largest
    facts["cross.batch_rows_smallest"] = min(rows.values())
    top = [r for r, n in rows.items() if n == largest]
    if len(top) == 1:
        facts["cross.largest_batch_rank"] = top[0]


def _work(heads: dict[int, list[int]], facts: dict) -> None:
    size = {r: math.prod(h) for r, h in heads.items()}
    big, small = max(size.values()), min(size.values())
    if small <= 0 or big == small:
        return
    top = [r for r, n in size.items() if n == big]
    low = min(r for r, n in size.items() if n == small)
    facts["cross.input_work_by_rank"] = "; ".join(f"rank {r}: {_shape(h)}" for r, h in heads.items())
    facts["cross.input_work_ratio"] = round(big / small, 1)
    facts["cross.input_work_unit"] = _unit(heads)
    facts["cross.input_work_smallest_rank"] = low
    facts["cross.input_work_smallest_shape"] = _shape(heads[low])
    facts["cross.input_work_largest_shape"] = _shape(heads[top[0]])
    if len(top) == 1:
        facts["cross.input_work_largest_rank"] = top[0]


def _unit(heads: dict[int, list[int]]) -> str:
    """What one element of the differing tensor counts: token ids ([batch, length]) are tokens, an image batch
    ([N, C, H, W]) whose height or width differs is pixels; anything else is elements."""
    ndim = len(next(iter(heads.values())))
    dims = [h for h in heads.values()]
    differ = {i for i in range(1, ndim) if len({d[i] for d in dims}) > 1}
    if ndim == 2:
        return "tokens"
    if ndim == 3 and differ == {1}:
        return "tokens"  # [batch, length, features]: embedded tokens
    if ndim == 4 and differ <= {2, 3}:
        return "pixels"
    return "elements"


def _shape(dims: list[int]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def _dims(dims_text: str) -> list | None:
    try:
        dims = json.loads(dims_text)
    except ValueError:
        return None
    return dims if isinstance(dims, list) else None


def _is_tensor(x) -> bool:
    return isinstance(x, list) and all(isinstance(d, int) for d in x)
