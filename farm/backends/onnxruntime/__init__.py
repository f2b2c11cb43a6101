"""ONNX Runtime: on the CPU (the baseline that runs everywhere) or on an NVIDIA GPU through its
CUDA execution provider (or its TensorRT execution provider).

Build = creating the InferenceSession (graph optimization included), timed; the optimized graph
is saved so per-layer rows describe what actually runs. A CUDA cell also binds its inputs and
outputs to device buffers and, with `cuda_graph`, captures the graph, within the build. On the
CPU a query is `session.run` on host arrays (host clock); on CUDA it is H2D + run + D2H on one
stream, timed by farm.device_timer (farm.backends.onnxruntime.cuda). Per-layer times come from a second,
profiled session, never during the timed run (farm.backends.onnxruntime.profile).

    options    OnnxRuntimeOptions (`[backends.onnxruntime]`)
    cuda       the CUDA query: bound buffers, device timing, CUDA graphs
    placement  which nodes each execution provider got
    profile    per-layer rows from ONNX Runtime's profiler
    backend    OnnxRuntimeBackend, and what a session's start says the model lacks
"""

from farm.backends.onnxruntime.backend import OnnxRuntimeBackend, lacking_operator
from farm.backends.onnxruntime.options import OnnxRuntimeOptions
from farm.backends.onnxruntime.profile import layers_from_profile

__all__ = ["OnnxRuntimeBackend", "OnnxRuntimeOptions", "lacking_operator", "layers_from_profile"]
