"""Which host MPI calls of a region run as the harness's host collectives, and how they read there."""

from __future__ import annotations

from engine.onboard import host_mpi

MACROS = {"MPI_REAL_TYPE": "MPI_DOUBLE", "MPI_WIDE": "MPI_UNSIGNED_LONG"}


def test_the_call_keeps_its_arguments_and_takes_the_harness_communicator():
    args = ["MPI_IN_PLACE", "&norm", "1", "MPI_REAL_TYPE", "MPI_MAX", "local_comm"]
    assert host_mpi.unsupported("MPI_Allreduce", args, MACROS.get) is None
    assert host_mpi.rewrite("MPI_Allreduce", args) == (
        "cuco_host_allreduce(MPI_IN_PLACE, &norm, 1, MPI_REAL_TYPE, MPI_MAX, cuco_c->host_comm)"
    )
    assert host_mpi.rewrite("MPI_Barrier", ["MPI_COMM_WORLD"]) == "cuco_host_barrier(cuco_c->host_comm)"
    assert "#define MPI_DOUBLE CUCO_HOST_DOUBLE" in host_mpi.defines()


def test_a_datatype_or_op_the_harness_lacks_is_named():
    bad = ["&x", "&y", "1", "MPI_WIDE", "MPI_SUM", "MPI_COMM_WORLD"]
    assert host_mpi.unsupported("MPI_Allreduce", bad, MACROS.get) == (
        "MPI_UNSIGNED_LONG is not a datatype or reduction the harness's host collectives take"
    )
    prod = ["&x", "&y", "1", "MPI_INT", "MPI_PROD", "0", "MPI_COMM_WORLD"]
    assert "MPI_PROD" in host_mpi.unsupported("MPI_Reduce", prod, MACROS.get)
    assert "takes 5 arguments" in host_mpi.unsupported("MPI_Bcast", ["&x", "1"], MACROS.get)
