"""A ResNet-50 made slower by a known amount, for checking that farm compare finds a change of about
10 % in both kinds of GPU cell: `module:planted_resnet:resnet50` with `extra_blocks = N` appends a
copy of the last bottleneck block of layer1, then layer2, then layer3, ... (one per stage in turn,
N in all) to torchvision's resnet50. A bottleneck block of layer1 or layer2 is 10 kernels of the
network's about 175 in eager mode and 0.22 GMAC of its 4.1 per image, so two blocks plant about
+11 % on a host-bound cell (batch 1: the time is the launches) and about +11 % on a GPU-bound one
(large batches: the time is the arithmetic). Measured on an H200 in PyTorch eager
(benchmarks/results/verdicts-h200-resnet50*.csv): +12.2 % (fp32) and +14.0 % (fp16) at batch
128, about +10 % at batch 1 (the median of interleaved rounds).

`extra_blocks = 0` is torchvision's resnet50 unchanged. Needs torchvision (the GPU machines).
"""

from __future__ import annotations

import copy


def resnet50(extra_blocks: int = 0):
    """torchvision's resnet50 (random weights) with `extra_blocks` copies of stage blocks appended."""
    import torch
    import torchvision

    net = torchvision.models.resnet50(weights=None)
    stages = [net.layer1, net.layer2, net.layer3, net.layer4]
    added: list[list[torch.nn.Module]] = [[] for _ in stages]
    for k in range(extra_blocks):
        stage = stages[k % len(stages)]
        added[k % len(stages)].append(copy.deepcopy(stage[-1]))  # same channels in and out: no downsample
    for i, stage in enumerate(stages):
        for block in added[i]:
            stage.append(block)
    return net
