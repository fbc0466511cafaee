"""A rank started the way srun or mpirun start one: the rank and world size come from the launcher's variables
(Slurm: SLURM_PROCID / SLURM_NTASKS; Open MPI: OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE), the script passes
them to ``init_process_group`` itself (env:// store for Slurm, a tcp:// address for MPI), as such scripts do.

    SLURM_PROCID=0 SLURM_NTASKS=2 ... python env_ranks.py --from slurm --port P [--steps 20]
"""

import argparse
import os

from tutorial_spawn import train  # the same training loop as the spawn job (rank 1 slow)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--from", dest="source", choices=("slurm", "mpi"), required=True)
    p.add_argument("--port", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--work", type=int, default=20_000)
    args = p.parse_args()
    args.no_join, args.rejoin_after, args.exit_code, args.hold_s = False, 0, 0, 0.0
    if args.source == "slurm":
        rank, world = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", args.port
        train(rank, world, args)
    else:
        rank, world = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
        args.init_method = f"tcp://127.0.0.1:{args.port}"
        train(rank, world, args)


if __name__ == "__main__":
    main()
