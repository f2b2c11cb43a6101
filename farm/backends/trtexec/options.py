"""`[backends.trtexec]`: TrtexecOptions, and the flags that pin trtexec's timing definition to them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from farm.backends.base import BackendOptions
from farm.trt_output import TIMING_FLAGS, flag_table


class TrtexecOptions(BackendOptions):
    """`[backends.trtexec]`: each may be a list, which makes it another sweep axis."""

    binary: str = "trtexec"
    builder_optimization_level: Annotated[int, Field(ge=0, le=5)] = 3
    workspace_mib: Annotated[int, Field(ge=1)] | None = None
    precision_flags: bool = False
    cuda_graph: bool = False
    transfers: bool = True
    spin_wait: bool = False
    streams: Annotated[int, Field(ge=1)] = 1
    timing_cache: bool = True
    extra_args: str = ""


def timing_flags(major: int, options: TrtexecOptions) -> list[str]:
    """The flags that pin trtexec's timing definition to `options` on this major version."""
    table = TIMING_FLAGS[flag_table(major)]
    flags = [table[key][getattr(options, key)] for key in ("transfers", "cuda_graph", "spin_wait")]
    return [f for f in flags if f] + [f"--infStreams={options.streams}", "--separateProfileRun"]
