"""Is host-bound noise a property of the process or of the moment? One process, torchvision ResNet-50
through benchmarks/torch_bare_loop.py's own query, many short rounds; each round's median printed.

    python3 benchmarks/device/host_rounds.py [--rounds 12] [--precision fp16] [--batch 1] [--mode eager]
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch_bare_loop as bare

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=12)
parser.add_argument("--queries", type=int, default=100)
parser.add_argument("--precision", default="fp16")
parser.add_argument("--batch", type=int, default=1)
parser.add_argument("--mode", default="eager")
parser.add_argument("--pause-s", type=float, default=0.5)
args = parser.parse_args()
import torch  # noqa: E402

torch.set_grad_enabled(False)
torch.backends.cudnn.benchmark = True
stream = torch.cuda.Stream()
torch.cuda.set_stream(stream)
run, x, host, host_out = bare.prepare(bare.network("resnet50", False), args.precision, args.batch, 224, "cuda",
                                      args.mode, True)
medians = []
for r in range(args.rounds):
    latency, _, _ = bare.time_cuda(run, x, host, host_out, 0.2 if r == 0 else 0.0, 1, args.queries)
    medians.append(latency)
    time.sleep(args.pause_s)
spread = (max(medians) - min(medians)) / min(medians) * 100
print(f"{args.precision} b{args.batch} {args.mode}: round medians " + " ".join(f"{m:.3f}" for m in medians)
      + f" ms; spread {spread:.1f} %, median {statistics.median(medians):.3f}")
