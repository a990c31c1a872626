"""What the analysis knows about the APIs a host-driven program calls: which argument of each NCCL,
CUDA and MPI call is a buffer read, a buffer written, a count, a datatype, the communicator, the stream."""

from __future__ import annotations

from typing import TypedDict


class CommArgs(TypedDict):
    """Where an NCCL communication call takes each argument (None: it has no such argument)."""

    send: int | None
    recv: int | None
    count: int
    dtype: int
    redop: int | None
    peer: int | None
    comm: int
    stream: int
    moves: bool  # data movement only (no reduction)


# NCCL communication calls: argument positions (None: the call has no such argument).
NCCL_COMM: dict[str, CommArgs] = {
    #                 send recv count dtype redop root/peer comm stream  data movement only?
    "ncclAllReduce": CommArgs(send=0, recv=1, count=2, dtype=3, redop=4, peer=None, comm=5, stream=6, moves=False),
    "ncclReduce": CommArgs(send=0, recv=1, count=2, dtype=3, redop=4, peer=5, comm=6, stream=7, moves=False),
    "ncclReduceScatter": CommArgs(send=0, recv=1, count=2, dtype=3, redop=4, peer=None, comm=5, stream=6, moves=False),
    "ncclAllGather": CommArgs(send=0, recv=1, count=2, dtype=3, redop=None, peer=None, comm=4, stream=5, moves=True),
    "ncclBroadcast": CommArgs(send=0, recv=1, count=2, dtype=3, redop=None, peer=4, comm=5, stream=6, moves=True),
    "ncclBcast": CommArgs(send=0, recv=0, count=1, dtype=2, redop=None, peer=3, comm=4, stream=5, moves=True),
    "ncclAlltoAll": CommArgs(send=0, recv=1, count=2, dtype=3, redop=None, peer=None, comm=4, stream=5, moves=True),
    "ncclSend": CommArgs(send=0, recv=None, count=1, dtype=2, redop=None, peer=3, comm=4, stream=5, moves=True),
    "ncclRecv": CommArgs(send=None, recv=0, count=1, dtype=2, redop=None, peer=3, comm=4, stream=5, moves=True),
}
NCCL_GROUP = {"ncclGroupStart", "ncclGroupEnd"}
NCCL_INIT = {
    "ncclCommInitRank",
    "ncclCommInitRankConfig",
    "ncclCommInitAll",
    "ncclCommSplit",
    "ncclCommInitRankScalable",
}

NCCL_DTYPE_BYTES = {
    "ncclInt8": 1,
    "ncclChar": 1,
    "ncclUint8": 1,
    "ncclInt32": 4,
    "ncclInt": 4,
    "ncclUint32": 4,
    "ncclInt64": 8,
    "ncclUint64": 8,
    "ncclFloat16": 2,
    "ncclHalf": 2,
    "ncclFloat32": 4,
    "ncclFloat": 4,
    "ncclFloat64": 8,
    "ncclDouble": 8,
    "ncclBfloat16": 2,
    "ncclFloat8e4m3": 1,
    "ncclFloat8e5m2": 1,
}

# C++ element types the generated harness code knows how to fill and compare.
ELEM_BYTES = {
    "float": 4,
    "double": 8,
    "__half": 2,
    "half": 2,
    "__nv_bfloat16": 2,
    "nv_bfloat16": 2,
    "int": 4,
    "unsigned": 4,
    "unsigned int": 4,
    "int32_t": 4,
    "uint32_t": 4,
    "int64_t": 8,
    "uint64_t": 8,
    "long long": 8,
    "size_t": 8,
    "char": 1,
    "int8_t": 1,
    "uint8_t": 1,
    "unsigned char": 1,
    "short": 2,
    "int16_t": 2,
    "uint16_t": 2,
}
FLOAT_TOLERANCE_KEY = {
    "float": "fp32",
    "double": "fp64",
    "__half": "fp16",
    "half": "fp16",
    "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16",
}

# CUDA allocation calls: (pointer argument, bytes argument).
DEVICE_ALLOC = {"cudaMalloc": (0, 1), "cudaMallocAsync": (0, 1), "cudaMallocManaged": (0, 1), "ncclMemAlloc": (0, 1)}
HOST_ALLOC = {"cudaMallocHost": (0, 1), "cudaHostAlloc": (0, 1)}
MEMCPY = {
    "cudaMemcpy": (0, 1),
    "cudaMemcpyAsync": (0, 1),
    "cudaMemcpyPeer": (0, 2),
    "cudaMemcpyPeerAsync": (0, 2),
    "cudaMemcpy2D": (0, 2),
    "cudaMemcpy2DAsync": (0, 2),
}
MEMSET = {"cudaMemset", "cudaMemsetAsync", "cudaMemset2D", "cudaMemset2DAsync"}
EVENTS = {
    "cudaEventCreate",
    "cudaEventCreateWithFlags",
    "cudaEventRecord",
    "cudaEventSynchronize",
    "cudaEventElapsedTime",
    "cudaEventDestroy",
    "cudaStreamWaitEvent",
    "cudaEventQuery",
}
SYNCS = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent"}
STREAM_CREATE = {"cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority"}
DEVICE_SELECT = {"cudaSetDevice", "cudaGetDeviceCount", "cudaGetDevice"}
FILE_IO = {"fopen", "fwrite", "fread", "open", "write", "read", "ofstream", "ifstream"}
LAUNCH_API = {
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaLaunchKernelEx",
    "cuLaunchKernel",
    "cudaGraphLaunch",
}
# CUDA graphs: a capture records what the replay loop launches.
CAPTURE = {"cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph"}
CAPTURE_END = {"cudaStreamEndCapture"}
GRAPH_LAUNCH = {"cudaGraphLaunch"}
