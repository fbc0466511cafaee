"""Live (CPU, gloo), capture switched on from the environment (DDPDOCTOR_CAPTURE=DIR): ranks started with the
variables srun sets (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_JOB_ID / SLURM_STEP_ID) or Open MPI's
(OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK), the script passing that rank to init_process_group (issue 36
item 4).  Two processes started here stand in for srun's or mpirun's tasks."""

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from subprocesses import free_port, project_env

JOB = Path(__file__).parent / "jobs" / "env_ranks.py"

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not any((Path(sysconfig.get_paths()[k]) / "ddpdoctor_capture.pth").is_file() for k in ("purelib", "platlib")),
        reason="ddpdoctor is not pip-installed in this interpreter (the switch's .pth comes with `pip install`)",
    ),
]


def _base_env(out: Path) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DDPDOCTOR_", "SLURM_", "OMPI_", "PMI")) and k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    }
    return project_env({"DDPDOCTOR_CAPTURE": str(out), "DDPDOCTOR_CAPTURE_ANALYZE": "0", "OMP_NUM_THREADS": "1"}, env)


TASK_VARS = {
    "slurm": lambda r: {
        "SLURM_PROCID": str(r),
        "SLURM_NTASKS": "2",
        "SLURM_LOCALID": str(r),
        "SLURM_JOB_ID": "4242",
        "SLURM_STEP_ID": "0",
    },
    "mpi": lambda r: {
        "OMPI_COMM_WORLD_RANK": str(r),
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(r),
        "PMIX_NAMESPACE": "prterun-test-4242@1",
    },
}


@pytest.mark.parametrize(("source", "launcher"), [("slurm", "slurm"), ("mpi", "mpirun")])
def test_tasks_started_with_the_launchers_variables_make_one_bundle(tmp_path, source, launcher):
    pytest.importorskip("torch")
    out, port = tmp_path / "bundle", free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(JOB), "--from", source, "--port", port],
            env={**_base_env(out), **TASK_VARS[source](r)},
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _o, e in results]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["ranks_present"] == [0, 1] and m["world_size"] == 2, m
    assert m["launcher"] == launcher and m["capture"] == "environment"
    assert m["run_id"] == ("slurm:4242.0" if source == "slurm" else "PMIX_NAMESPACE:prterun-test-4242@1")
    for r in (0, 1):
        s = json.loads((out / "ranks" / f"rank{r}" / "settings.json").read_text())
        assert (s["rank"], s["local_rank"], s["world_size"], s["launcher"]) == (r, r, 2, launcher)
        assert s["process_groups_joined"] == 1 and s["window"]["complete"]
