"""`farm ingest`: existing TensorRT output into the warehouse, one cell per engine.

The files of one engine (profile JSON, times JSON, layer-info JSON, trtexec or verbose build
logs, in any mix) are recognised by content and combined: layer information joined to per-layer
times by name, per-layer memory by the engine explorer's rule, the performance summary or the
per-query times as the measurement, build facts as the build, the device as a `devices` row.
Figures are TensorRT's own: nothing here computes a number TensorRT did not produce, except the
statistics of an `--exportTimes` file (computed exactly as for the farm's own runs) and the
per-layer byte counts (from the shapes and types TensorRT printed).

Honest by construction: a file that is not TensorRT output is skipped and named; a file that is
but cannot be read, or holds nothing farm can use, and files that say they come from different
engines (model, device, TensorRT version, shapes, layers, profiles, measurements, builds) stop the
ingest before anything is written. Where and with what a cell was measured comes from the files
alone (unknown stays null); the machine that imported it is recorded apart, in `ingested_on`.

Modules: `sniff` (what a file is, from its first bytes), `files` (one file read, or why not; a log
split into its trtexec runs), `conflicts` (are these files one engine?), `combine` (one engine's
files into one cell), `writing` (the cell into the warehouse). The readers of TensorRT's formats
are farm.trt_output's, shared with the TensorRT backends.
"""

from farm.ingest.combine import EngineIngest, FileReport, NothingToUse, NotOneEngine, combine
from farm.ingest.conflicts import conflicts
from farm.ingest.files import FileRead, describe_skip, read_file, split_runs
from farm.ingest.writing import IngestWarehouse, ingested_on

__all__ = ["EngineIngest", "FileRead", "FileReport", "IngestWarehouse", "NotOneEngine", "NothingToUse", "combine",
           "conflicts", "describe_skip", "ingested_on", "read_file", "split_runs"]
