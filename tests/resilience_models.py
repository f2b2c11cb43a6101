"""PyTorch factories for tests/test_sweep_resilience.py: `module:tests.resilience_models:FACTORY`
sources, importable by the planner and by cell processes."""

from __future__ import annotations

import logging
import sys
import warnings

import torch
from torch import nn

LIBRARY = "farm_test_library"  # a library's root logger, configured on first use as transformers does its own
LIBRARY_LOGGER = f"{LIBRARY}.modeling_utils"


def library_logger() -> logging.Logger:
    """LIBRARY_LOGGER, its library's root logger given a StreamHandler on sys.stderr as it is at
    the first call, its flush bound to that stream, and not propagating: what
    transformers.utils.logging does the first time any of its loggers is asked for (inside a
    factory, that is while farm captures the factory's output)."""
    root = logging.getLogger(LIBRARY)
    if not root.handlers:
        handler = logging.StreamHandler()  # sys.stderr, as it is now
        handler.flush = sys.stderr.flush
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        root.propagate = False
    return logging.getLogger(LIBRARY_LOGGER)


class TinyDecoder(nn.Module):
    """Token ids through an embedding table, then a linear head: a decoder's shape in miniature."""

    def __init__(self, vocabulary: int, width: int, exportable: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.head = nn.Linear(width, vocabulary)
        self.exportable = exportable

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if not self.exportable and (torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()):
            raise RuntimeError("this decoder cannot be exported")  # neither exporter gets past it
        return self.head(self.embed(input_ids))


def unexportable_decoder(vocabulary: int = 50, width: int = 8) -> nn.Module:
    """int64 `input_ids` into an embedding of `vocabulary` rows; runs in PyTorch, exports with no
    exporter, so no graph tells the ids' range."""
    return TinyDecoder(vocabulary, width, exportable=False)


def tiny_decoder(vocabulary: int = 50, width: int = 8) -> nn.Module:
    """The same decoder, exportable: its graph says the ids' range (the embedding's rows)."""
    return TinyDecoder(vocabulary, width, exportable=True)


class Chatty(nn.Module):
    """Logs through a library's logger and warns on every forward, as transformers does; and
    through a logger of no configured library (Python's last resort prints those)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Linear(width, width)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (torch.onnx.is_in_onnx_export() or torch.compiler.is_compiling()):
            library_logger().warning("CHATTY-RUN-LOG: forward called")
            logging.getLogger("farm_test_other.module").warning("CHATTY-RUN-BARE-LOG: forward called")
            self.calls += 1  # a new text each time: Python shows a warning once per text and place
            warnings.warn(f"CHATTY-RUN-WARNING: forward call {self.calls}", UserWarning, stacklevel=2)
        return self.body(x)


def chatty(width: int = 8) -> nn.Module:
    """A module whose build and forward log warnings through a library logger and `warnings`."""
    library_logger().warning("CHATTY-BUILD-LOG: building the module")
    warnings.warn("CHATTY-BUILD-WARNING: building the module", UserWarning, stacklevel=2)
    return Chatty(width)


def chatty_then_aborts(width: int = 8) -> nn.Module:
    """`chatty`, whose forward, inside a farm cell process (never the planner), logs and then aborts
    the process: the dead cell's reason quotes the last lines the process printed."""
    import os

    class ChattyAborts(Chatty):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = super().forward(x)
            if "cell_process" in sys.argv[0] and not torch.onnx.is_in_onnx_export():
                library_logger().warning("CHATTY-LAST-WORDS: about to abort")
                sys.stderr.flush()
                os.abort()
            return y

    library_logger().warning("CHATTY-BUILD-LOG: building the module")
    return ChattyAborts(width)
