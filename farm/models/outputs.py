"""What farm makes of a PyTorch module's forward(): its tensors, named. A transformers ModelOutput,
dicts, lists of dicts (torchvision's detectors), tuples and the caches pytree can open are flattened
to named tensors for timing, accuracy and the ONNX export; what is not a tensor (None, a number, a
cache object) is dropped with a note; a key/value cache is turned off where the module allows it
(`without_cache`). `NativeModule` is the module as farm.models.native exports it and the torch
backend runs it. torch is imported only inside the functions.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

__all__ = ["output_names", "output_tensors", "without_cache", "wrap_module"]


def without_cache(net) -> tuple[dict[str, Any], list[str]]:
    """(keyword arguments for forward(), notes): a module that would return a key/value cache
    (a transformers decoder left at use_cache=True returns a DynamicCache beside its logits) is made
    not to: `config.use_cache = False` where its config has it, else `use_cache=False` passed to a
    forward() that takes it. farm times and checks the forward pass's tensors; a cache is state for
    the next call (generation), not an output."""
    config = getattr(net, "config", None)
    configs = [config] if config is not None else []
    try:
        text = config.get_text_config() if hasattr(config, "get_text_config") else None
    except Exception:  # noqa: BLE001 - a config without a text part
        text = None
    if text is not None and all(text is not c for c in configs):
        configs.append(text)
    caching = [c for c in configs if getattr(c, "use_cache", None) is True]
    if caching:
        for c in caching:
            c.use_cache = False
        return {}, ["use_cache turned off (config.use_cache = False): the forward pass is timed without "
                    "returning its key/value cache"]
    try:
        parameter = inspect.signature(net.forward).parameters.get("use_cache")
    except (TypeError, ValueError):
        parameter = None
    if parameter is not None and parameter.default is not False and parameter.kind in (
            parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
        return {"use_cache": False}, ["use_cache turned off (forward(use_cache=False)): the forward pass is timed "
                                      "without returning its key/value cache"]
    return {}, []


def output_names(value) -> tuple[list[str], list[str]]:
    """(the names of the tensors in a forward()'s output, in the order NativeModule returns them;
    notes of what was dropped). One tensor: "output"; a flat tuple or list of tensors: "output_0",
    "output_1"...; any other structure (a transformers ModelOutput, dicts, lists of dicts as
    torchvision's detectors return, caches pytree can open) flattened by torch.utils._pytree, each
    tensor named by its path ("logits", "output_0.boxes", "extra.scale"). What is not a tensor
    (None, a Python number, a cache object pytree cannot open) is dropped, and the notes name it."""
    import torch
    from torch.utils import _pytree as pytree

    if isinstance(value, torch.Tensor):
        return ["output"], []
    if isinstance(value, (tuple, list)) and all(isinstance(v, torch.Tensor) for v in value):
        return (["output"] if len(value) == 1 else [f"output_{i}" for i in range(len(value))]), []
    names, dropped = [], []
    for path, leaf in pytree.tree_flatten_with_path(value)[0]:
        parts = [str(getattr(key, "key", getattr(key, "idx", getattr(key, "name", key)))) for key in path]
        if isinstance(value, (tuple, list)) and parts:
            parts[0] = f"output_{parts[0]}"
        name = ".".join(parts) or "output"
        if isinstance(leaf, torch.Tensor):
            names.append(name)
        else:
            dropped.append(f"{name} ({type(leaf).__name__})")
    notes = []
    if dropped:
        shown = ", ".join(dropped[:8]) + (f" and {len(dropped) - 8} more" if len(dropped) > 8 else "")
        notes.append(f"outputs that are not tensors dropped: {shown}")
    return names, notes


def output_tensors(value) -> tuple:
    """The tensors of a forward()'s output, in `output_names`' order."""
    import torch
    from torch.utils import _pytree as pytree

    if isinstance(value, torch.Tensor):
        return (value,)
    return tuple(leaf for leaf in pytree.tree_leaves(value) if isinstance(leaf, torch.Tensor))


def wrap_module(net, input_names: list[str], output_names: list[str], call_kwargs: dict[str, Any] | None = None):
    return _wrapper_class()(net, input_names, output_names, call_kwargs)


@functools.cache
def _wrapper_class():
    import torch

    class NativeModule(torch.nn.Module):
        """A user's module as the torch backend runs it: inputs by position (and `call_kwargs`, e.g.
        use_cache=False), outputs the flat tuple of its tensors (`output_names` names them)."""

        def __init__(self, net: torch.nn.Module, input_names: list[str], output_names: list[str],
                     call_kwargs: dict[str, Any] | None = None) -> None:
            super().__init__()
            self.net = net
            self.input_names, self.output_names = list(input_names), list(output_names)
            self.call_kwargs = dict(call_kwargs or {})
            self.notes: list[str] = []

        def forward(self, *inputs):
            return output_tensors(self.net(*inputs, **self.call_kwargs))

        def describe(self, *inputs) -> tuple[list[str], list[str]]:
            """forward()'s output names for these inputs (a detector's depend on the batch), and notes
            of what it drops: one eager call, without gradients."""
            with torch.no_grad():
                return output_names(self.net(*inputs, **self.call_kwargs))

    return NativeModule
