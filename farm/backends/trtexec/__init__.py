"""The `trtexec` binary: builds and times the engine itself; farm reads what it exports.

One trtexec run per cell with `--exportTimes`, `--exportProfile` and `--exportLayerInfo`
(`--profilingVerbosity=detailed`), the cell's shapes and profile, a timing cache per GPU and
TensorRT version, and every timing-relevant flag explicit so that 10.x and 11.x measure the same
thing whatever their defaults (copies, CUDA graph, spin wait, streams, separate profiling run: as
the options say; `timing_flags`, from `farm.trt_output.TIMING_FLAGS`). The measurement
records its timing definition (`runtime_stats`): what trtexec's log says it did, else what the
command line asked of that version. Its files are read by farm.trt_output's readers; the per-query
times give the samples, with statistics computed as for farm's own runs.

    options  TrtexecOptions (`[backends.trtexec]`), `timing_flags`
    backend  TrtexecBackend, the shape and precision flags
"""

from farm.backends.trtexec.backend import TrtexecBackend, precision_flags
from farm.backends.trtexec.options import TrtexecOptions, timing_flags

__all__ = ["TrtexecBackend", "TrtexecOptions", "precision_flags", "timing_flags"]
