import numpy as np
import pytest

from ddpdoctor.metrics import intervals as iv


def brute(mask_fn, n=260):
    return np.array([mask_fn(t + 0.5) for t in range(n)], dtype=bool)


def to_mask(x: iv.Intervals, n=260):
    return brute(lambda t: bool(((x.starts <= t) & (t < x.ends)).any()), n)


def random_set(rng, k):
    s = rng.integers(0, 190, k).astype(float)
    return s, s + rng.integers(0, 30, k)


def test_union_merges_overlaps_and_touching():
    u = iv.union([5, 0, 10, 30], [12, 4, 20, 30])
    assert u.starts.tolist() == [0, 5] and u.ends.tolist() == [4, 20]


def test_empty_inputs():
    assert len(iv.union([], [])) == 0
    assert iv.difference(iv.EMPTY, iv.union([0], [1])).total == 0
    assert iv.difference(iv.union([0], [1]), iv.EMPTY).total == 1
    assert iv.measure_in_windows(iv.EMPTY, [0], [10]).tolist() == [0.0]


@pytest.mark.parametrize("seed", range(25))
def test_set_operations_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    a = iv.union(*random_set(rng, rng.integers(0, 12)))
    b = iv.union(*random_set(rng, rng.integers(0, 12)))
    ma, mb = to_mask(a), to_mask(b)
    assert (to_mask(iv.difference(a, b)) == (ma & ~mb)).all()
    assert (to_mask(iv.intersection(a, b)) == (ma & mb)).all()
    assert (to_mask(iv.merge(a, b)) == (ma | mb)).all()
    ws = rng.integers(0, 150, 6).astype(float)
    we = ws + rng.integers(0, 60, 6)
    got = iv.measure_in_windows(a, ws, we)
    want = [ma[int(s) : int(e)].sum() for s, e in zip(ws, we)]
    assert np.allclose(got, want)
