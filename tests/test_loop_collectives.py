"""bundle/loop_collectives.py: the script's own torch.distributed calls, from the stack sampler's signatures."""

from ddpdoctor.bundle.loop_collectives import loop_collective_facts


def _st(step_ms, *sigs):
    return {"sampled": True, "step_ms": step_ms, "signatures": list(sigs)}


def _sig(lib, where, ms, sync=True):
    return {"lib": lib, "where": where, "ms_per_step": ms, "sync": sync}


AGO = "torch.distributed.all_gather_object in gather_predictions (train.py:51)"


def test_the_call_every_rank_pays_for_most():
    f = loop_collective_facts(
        {
            0: _st(
                76.0, _sig("torch.distributed.all_gather_object", AGO, 37.3), _sig("torch.Tensor.backward", "b", 10.0)
            ),
            1: _st(
                76.0,
                _sig("torch.distributed.all_gather_object", AGO, 17.9),
                _sig("torch.distributed.all_reduce", "torch.distributed.all_reduce in log (train.py:60)", 2.0),
            ),
        }
    )
    assert f["python.loop_collective.call"] == "all_gather_object" and f["python.loop_collective.object_call"] is True
    assert f["python.loop_collective.where"] == AGO
    # the least of the ranks: what rank 0 pays beyond it is its own
    assert f["python.loop_collective.ms_per_step"] == 17.9
    assert f["python.loop_collective.ms_per_step.per_rank"] == {0: 37.3, 1: 17.9}
    assert f["python.loop_collective.share"] == round(17.9 / 76.0, 4)


def test_ddp_and_calls_that_do_not_wait_are_not_the_loops():
    sigs = (
        _sig("torch.nn.parallel.DistributedDataParallel.forward", "DDP forward in main (t.py:9)", 5.0),
        _sig("torch.Tensor.backward", "torch.Tensor.backward in main (t.py:10)", 30.0),
        _sig("torch.distributed.get_rank", "torch.distributed.get_rank in main (t.py:3)", 1.0, sync=False),
    )
    assert loop_collective_facts({0: _st(50.0, *sigs), 1: _st(50.0, *sigs)}) == {}


def test_a_call_on_one_rank_only_is_not_every_ranks():
    one = _st(50.0, _sig("torch.distributed.barrier", "torch.distributed.barrier in main (t.py:5)", 9.0))
    assert loop_collective_facts({0: one, 1: _st(50.0)}) == {}
    assert loop_collective_facts({0: one}) == {}


def _clip_sigs(func: str, ms: float):
    where = f"torch.distributed.all_reduce in {func} (train.py:63)"
    sig = {"lib": "torch.distributed.all_reduce", "where": where, "func": func, "ms_per_step": ms, "sync": True}
    return _st(100.0, sig)


def test_a_collective_inside_a_gradient_norm_function_is_said_so():
    for func in ("clip_global_grad_norm", "compute_gradnorm", "Trainer.clip_gradients"):
        f = loop_collective_facts({0: _clip_sigs(func, 40.0), 1: _clip_sigs(func, 30.0)})
        assert f["python.loop_collective.in_grad_norm"] is True, func
    for func in ("log_metrics", "main", "reduce_loss"):
        f = loop_collective_facts({0: _clip_sigs(func, 40.0), 1: _clip_sigs(func, 30.0)})
        assert f["python.loop_collective.in_grad_norm"] is False, func


def test_no_function_recorded_says_nothing_about_gradient_norms():
    f = loop_collective_facts(
        {0: _st(50.0, _sig("torch.distributed.all_reduce", "x in y (t.py:1)", 9.0))}
        | {1: _st(50.0, _sig("torch.distributed.all_reduce", "x in y (t.py:1)", 9.0))}
    )
    assert "python.loop_collective.in_grad_norm" not in f and f["python.loop_collective.call"] == "all_reduce"
